"""Corpus readers: SingMOS-Pro layout, SingMOS (VMC'24 track 2) layout and CSV manifests.

Every reader returns a `Corpus` of `Clip` rows. Problems in the metadata's structure raise
`CorpusError` naming the file and the key or row at fault, never a bare KeyError; a CSV cell that
is not a number is a problem of its clip instead (`Clip.problems`), reported with the others. A CSV
manifest's columns are taken by sqa's names, a mapping (`columns`) or recognised spellings
(`COLUMN_SPELLINGS`). Configs and exports name the readers `sqa.data.readers.read_*`
(`CORPUS_READERS`); `recorded_corpus` reads the corpus an export records.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqa.core import reading
from sqa.core.renames import current
from sqa.data.corpus import (
    DEFAULT_DOMAIN,
    ROLE_ANCHOR,
    ROLE_REFERENCE,
    SPLITS,
    Clip,
    Corpus,
    CorpusError,
    accepted_split_names,
    canonical_split,
)
from sqa.metrics import AVERAGE_KEY

log = logging.getLogger(__name__)

# The readers a recorded corpus (an export's `data.corpus`) may name: nothing else is built.
# The readers that generate their corpus where it is missing (told not to, for a recorded corpus).
GENERATING_READERS = frozenset(
    {
        "sqa.data.synthetic.load_synthetic",
        "sqa.data.synthetic.load_synthetic_mushra",
        "sqa.data.small_table.load_small_table",
    }
)
CORPUS_READERS = frozenset(
    {
        "sqa.data.readers.read_singmos_pro",
        "sqa.data.readers.read_vmc24",
        "sqa.data.readers.read_csv_manifest",
        "sqa.data.synthetic.load_synthetic",
        "sqa.data.synthetic.load_synthetic_mushra",
        "sqa.data.small_table.load_small_table",
    }
)


def read_text(path: Path, encoding: str | None = None, hint: str = "") -> str:
    """Text of a metadata file (`sqa.core.reading.read_text`); a CorpusError names what is wrong."""
    try:
        return reading.read_text(path, encoding, hint)
    except reading.ReadError as err:
        raise CorpusError(str(err)) from None


def _scale(score_range: Sequence[float]) -> tuple[float, float]:
    """`score_range` as (low, high); ValueError unless it is two numbers with low < high."""
    try:
        low, high = (float(v) for v in score_range)
    except (TypeError, ValueError):
        raise ValueError(f"score_range must be [low, high], got {score_range!r}") from None
    if not low < high:
        raise ValueError(f"score_range must be [low, high] with low < high, got {score_range!r}")
    return low, high


def _load_json(path: Path) -> object:
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path}: not valid JSON ({err})") from err


def _get(mapping: object, key: str, where: Path, context: str) -> object:
    """mapping[key], or a CorpusError naming the file, the place in it and the missing key."""
    if not isinstance(mapping, Mapping):
        raise CorpusError(f"{where}: expected an object at {context}, found {type(mapping).__name__}")
    if key not in mapping:
        raise CorpusError(f"{where}: missing key {key!r} at {context}")
    return mapping[key]


def _number(value: object, where: Path, context: str) -> float:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError) as err:
        raise CorpusError(f"{where}: {context} is not a number ({value!r})") from err


def _judge_ratings(score: Mapping, where: Path, context: str) -> dict[str, float] | None:
    """Ratings by judge from a score entry's parallel `judges` and `scores` lists.

    {} when the entry has no such lists; None when they are malformed (of different lengths or
    not numbers). A judge listed twice gets the mean of its ratings.
    """
    judges, values = score.get("judges"), score.get("scores")
    if judges is None or values is None:
        return {}
    if not isinstance(judges, list) or not isinstance(values, list) or len(judges) != len(values):
        return None
    grouped: dict[str, list[float]] = {}
    for judge, value in zip(judges, values, strict=True):
        try:
            grouped.setdefault(str(judge), []).append(_number(value, where, f"{context}['scores']"))
        except CorpusError:
            return None
    return {judge: sum(v) / len(v) for judge, v in grouped.items()}


def read_singmos_pro(
    root: str | Path,
    test_batches: Sequence[str] = ("singmospro-p1", "singmospro-p2", "singmospro-p3"),
    sample_rate_filter: int | None = None,
    score_range: Sequence[float] = (1.0, 5.0),
) -> Corpus:
    """Read the SingMOS-Pro layout (info/split.json, info/score.json, wav/).

    Domains are the annotation batches in split.json. The test part of the k-th entry of
    `test_batches` becomes test set `test{k}`; test parts of other batches join training.
    `sample_rate_filter=16000` keeps only 16 kHz clips, as the paper does. Per-judge ratings
    (`judges`/`scores` of an entry's `score`) are kept in `Clip.ratings`; malformed ones are
    left out with a warning, since only judge-aware training needs them. `score_range` is the
    rating scale that scores and ratings are checked against.
    """
    scale = _scale(score_range)
    root = Path(root)
    malformed: list[str] = []
    split_path, score_path = root / "info" / "split.json", root / "info" / "score.json"
    splits = _load_json(split_path)
    scores = _load_json(score_path)
    utterances = _get(scores, "utterance", score_path, "the top level")
    if not isinstance(splits, Mapping) or not splits:
        raise CorpusError(f"{split_path}: expected a non-empty object of annotation batches")
    for name in test_batches:
        if name not in splits:
            raise CorpusError(f"{split_path}: missing key {name!r} (a test batch) at the top level")
    test_names = {b: f"test{i + 1}" for i, b in enumerate(test_batches)}
    clips = []
    for batch in sorted(splits, key=_natural_key):
        parts = _batch_parts(splits[batch], split_path, batch)
        for part in SPLITS:
            for utt in parts.get(part, []):
                entry = _get(utterances, utt, score_path, "['utterance']")
                ctx = f"['utterance'][{utt!r}]"
                score = _get(entry, "score", score_path, ctx)
                mos = _number(
                    _get(score, "mos", score_path, f"{ctx}['score']"),
                    score_path,
                    f"{ctx}['score']['mos']",
                )
                extra = {
                    k: _number(v, score_path, f"{ctx}['score'][{k!r}]")
                    for k, v in score.items()
                    if k not in ("mos", "judges", "scores") and not isinstance(v, list | dict)
                }
                ratings = _judge_ratings(score, score_path, f"{ctx}['score']")
                if ratings is None:
                    malformed.append(str(utt))
                is_test = part == "test" and batch in test_names
                clips.append(
                    Clip(
                        sample_id=str(utt),
                        path=root / str(_get(entry, "wav", score_path, ctx)),
                        mos=mos,
                        system_id=str(_get(entry, "sys_id", score_path, ctx)),
                        domain=batch,
                        split="test" if is_test else ("train" if part == "test" else part),
                        test_set=test_names[batch] if is_test else None,
                        extra_scores=extra,
                        ratings=ratings or {},
                    )
                )
    if malformed:
        log.warning(
            "%s: %d utterance(s) have 'judges' and 'scores' lists of different lengths or with "
            "non-numbers (first: %r); their per-judge ratings are ignored",
            score_path,
            len(malformed),
            malformed[0],
        )
    sys_info_path = root / "info" / "sys_info.json"
    # Optional, but read wherever it exists: a FIFO or device in its place is refused, not skipped.
    systems = frozenset(_load_json(sys_info_path)) if sys_info_path.exists() else None
    corpus = Corpus(clips, sorted(splits, key=_natural_key), scale, systems)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus


def _batch_parts(entry: object, where: Path, batch: str) -> dict[str, list]:
    """A split.json batch's utterance IDs by split: `train` required, `valid` and `test` optional.

    Aliases (`dev`, `eval`, ...) are mapped to their split; a batch without validation clips
    has them carved by the data module when the whole corpus has none.
    """
    if not isinstance(entry, Mapping):
        raise CorpusError(f"{where}: expected an object at [{batch!r}], found {type(entry).__name__}")
    parts: dict[str, list] = {}
    for key, ids in entry.items():
        split = canonical_split(str(key), f"{where} [{batch!r}]")
        if not isinstance(ids, list):
            raise CorpusError(f"{where}: expected a list of utterance IDs at [{batch!r}][{key!r}]")
        parts.setdefault(split, []).extend(ids)
    if "train" not in parts:
        raise CorpusError(f"{where}: missing key 'train' at [{batch!r}] (splits: {accepted_split_names()})")
    return parts


def read_vmc24(
    root: str | Path, sample_rate_filter: int | None = None, score_range: Sequence[float] = (1.0, 5.0)
) -> Corpus:
    """Read the SingMOS VMC'24 track 2 layout: sets/{train,val,eval}_mos_list.txt, wav/<id>.wav."""
    scale = _scale(score_range)
    root = Path(root)
    clips = []
    for list_name, split in (("train", "train"), ("val", "valid"), ("eval", "test")):
        path = root / "sets" / f"{list_name}_mos_list.txt"
        for lineno, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            parts = line.strip().split(",")
            if len(parts) != 2:
                raise CorpusError(f"{path}:{lineno}: expected '<id>,<score>', found {line!r}")
            sample_id, score = parts[0].removesuffix(".wav"), parts[1]
            fields = sample_id.split("-")
            if len(fields) < 3:
                raise CorpusError(f"{path}:{lineno}: ID {sample_id!r} has no system field (third '-' field)")
            clips.append(
                Clip(
                    sample_id=sample_id,
                    path=root / "wav" / f"{sample_id}.wav",
                    mos=_number(score, path, f"line {lineno} score"),
                    system_id=fields[2],
                    domain="vmc24",
                    split=split,
                    test_set="eval" if split == "test" else None,
                )
            )
    corpus = Corpus(clips, ["vmc24"], scale)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus


# sqa's columns of a CSV manifest: required (sample_id derived from the file name where absent),
# then optional; `score_<name>` columns add score dimensions.
REQUIRED_CSV_COLUMNS = ("wav_path", "score", "system_id", "sample_id")
OPTIONAL_CSV_COLUMNS = ("listener_id", "domain_id", "split", "test_set", "role")
# Other tables' names for sqa's columns, recognised where a table has no column of sqa's own name.
# Names are compared in lower case with spaces and hyphens as underscores (so `System ID` is
# system_id too); a table with two candidates for one column must name its own (`columns`).
COLUMN_SPELLINGS = {
    "wav_path": (
        "filename",
        "file_name",
        "file",
        "filepath",
        "file_path",
        "path",
        "wav",
        "wav_file",
        "audio",
        "audio_file",
        "audio_path",
    ),
    "score": ("mos", "rating", "mean_score"),
    "system_id": ("system", "sys", "sys_id", "system_name", "model", "model_id", "model_name"),
    "sample_id": ("sample", "utt_id", "utterance_id", "clip_id"),
    "listener_id": ("listener", "rater", "rater_id", "judge", "judge_id"),
}
# How a clip's replicate ratings (a listener's repeated rows) enter its score.
REPLICATE_MODES = ("per_listener", "pooled")


def csv_rows(text: str, path: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The columns and rows of the CSV `text` of `path`; a CorpusError names the line of a bad field."""
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        return list(reader.fieldnames or []), list(reader)
    except csv.Error as err:
        # csv's error names neither the file nor the line. Its field limit stays as it is: no
        # manifest cell is that long, but an unclosed quote makes the rest of the file one cell.
        limit = csv.field_size_limit()
        what = (
            f"a field longer than {limit} characters (is a quote left open?)"
            if "field limit" in str(err)
            else f"not valid CSV ({err})"
        )
        # The underlying reader's count: DictReader's own counts only the rows it returned.
        raise CorpusError(f"{path} line {reader.reader.line_num}: {what}") from None


def _spelling(column: str) -> str:
    """A column name as spellings are compared: lower case, spaces and hyphens as underscores."""
    return re.sub(r"[\s-]+", "_", column.strip().lower())


def columns_override(names: Mapping[str, str]) -> str:
    """The setting `data.corpus.columns={sqa_name:table_column,...}` as typed in a shell."""

    def value(text: str) -> str:
        # Hydra reads a plain word as it is (and a <placeholder> is the user's to fill); anything
        # else goes in single quotes.
        return text if re.fullmatch(r"\w+|<\w+>", text) else "'" + text.replace("'", "\\'") + "'"

    setting = "data.corpus.columns={" + ",".join(f"{k}:{value(v)}" for k, v in names.items()) + "}"
    # A comma would make a shell expand the braces, and quotes would be the shell's own.
    return f'"{setting}"' if "," in setting or "'" in setting else setting


def csv_columns(
    found: Sequence[str], given: Mapping[str, str] | None, path: Path
) -> tuple[dict[str, str], list[str]]:
    """The table's column (of `found`) for each of sqa's, `score_<name>` too; and what was recognised.

    A column named in `given` (`data.corpus.columns`) is taken as named; else the column of sqa's
    name; else the one column whose name is a recognised spelling (`COLUMN_SPELLINGS`). A name of
    `given` that is not sqa's, a column the table lacks, two candidates for one column and a
    missing required column (but sample_id) are CorpusErrors naming the setting that fixes them.
    The recognised columns are described in words (`'mos' as score`).
    """
    known = (*REQUIRED_CSV_COLUMNS, *OPTIONAL_CSV_COLUMNS)
    names: dict[str, str] = {}
    for key, column in (given or {}).items():
        if key not in known and not str(key).startswith("score_"):
            raise CorpusError(
                f"{path}: data.corpus.columns names {key!r}, which is not a column of sqa's "
                f"({', '.join(known)}, score_<name>)"
            )
        if column not in found:
            raise CorpusError(
                f"{path}: data.corpus.columns maps {key} to {column!r}, which is not a column of the table; "
                f"its columns: {list(found)}"
            )
        names[str(key)] = str(column)
    taken = set(names.values())
    recognised = []
    for name in known:
        if name in names:
            continue
        if name in found:
            names[name] = name
            taken.add(name)
            continue
        candidates = [
            c for c in found if c not in taken and _spelling(c) in {name, *COLUMN_SPELLINGS.get(name, ())}
        ]
        if len(candidates) > 1:
            raise CorpusError(
                f"{path}: columns {candidates[0]!r} and {candidates[1]!r} could both be {name}; "
                f"name the one to use: {columns_override({name: candidates[0]})}"
            )
        if candidates:
            names[name] = candidates[0]
            taken.add(candidates[0])
            recognised.append(f"{candidates[0]!r} as {name}")
    names.update({c: c for c in found if c.startswith("score_") and c not in names and c not in taken})
    missing = [c for c in REQUIRED_CSV_COLUMNS if c not in names and c != "sample_id"]
    if missing:
        raise CorpusError(
            f"{path}: missing column(s) {missing}; found {list(found)}; add them, or name the table's own: "
            f"{columns_override({m: '<column>' for m in missing})}"
        )
    return names, recognised


def _derive_sample_ids(rows: list[dict[str, str]], path: Path) -> None:
    """Give each row the sample_id of its file's name without its extension; they must be unique."""
    files: dict[str, set[Path]] = {}
    for row in rows:
        row["sample_id"] = Path(row["wav_path"]).stem
        files.setdefault(row["sample_id"], set()).add(Path(row["wav_path"]))
    clashes = {i: sorted(str(f) for f in fs) for i, fs in files.items() if len(fs) > 1}
    if clashes:
        sample_id, (first, second, *_) = next(iter(clashes.items()))
        more = f" ({len(clashes)} names clash in all)" if len(clashes) > 1 else ""
        raise CorpusError(
            f"{path}: the table has no sample_id column, and its file names do not tell its clips apart: "
            f"{first!r} and {second!r} are both {sample_id!r}{more}; add a sample_id column, or name "
            f"one: {columns_override({'sample_id': '<column>'})}"
        )


def _numbers(
    group: list[tuple[int, dict[str, str]]], column: str, name: str, problems: list[str]
) -> list[tuple[int, float]]:
    """(line, value) of the rows of `group` with a number in `column`; the others' cells go to `problems`.

    Empty cells of an extra score column are no label; an empty `score` cell is a problem.
    """
    values = []
    for line, row in group:
        cell = row[column]
        if cell == "" and column != "score":
            continue
        try:
            values.append((line, float(cell)))
        except ValueError:
            problems.append(f"line {line} of {name}: {column} is not a number ({cell!r})")
    return values


def _clip_score(ratings: list[tuple[str, float]], replicates: str) -> float:
    """A clip's score from its (listener, rating) rows, per listener first or pooled; NaN without any."""
    if not ratings:
        return math.nan
    if replicates == "pooled":
        return sum(v for _, v in ratings) / len(ratings)
    by_listener: dict[str, list[float]] = {}
    for listener, value in ratings:
        by_listener.setdefault(listener, []).append(value)
    means = [sum(v) / len(v) for v in by_listener.values()]
    return sum(means) / len(means)


def read_csv_manifest(
    path: str | Path,
    default_split: str | None = None,
    sample_rate_filter: int | None = None,
    score_range: Sequence[float] = (1.0, 5.0),
    encoding: str | None = None,
    replicates: str = "per_listener",
    reference_systems: Sequence[str] = (),
    anchor_systems: Sequence[str] = (),
    root: str | Path | None = None,
    columns: Mapping[str, str] | None = None,
) -> Corpus:
    """Read a SHEET-style CSV manifest; rows of one sample from several listeners are averaged.

    Required columns: wav_path, score, system_id; sample_id too, or each clip's ID is its file's
    name without the extension (which must then tell the clips apart). Optional: listener_id,
    domain_id, split (else `default_split`, by default "train", for every row; aliases such as
    `dev` or `eval` accepted), test_set, role (`reference`, `anchor` or empty) and extra score
    columns `score_<name>`. `columns` maps sqa's names to the table's (`{"score": "mos"}`);
    without it, common spellings (`COLUMN_SPELLINGS`: filename, mos, model, ...) are recognised
    where the table lacks sqa's name, and what was recognised or derived is logged in one line.
    A manifest of training rows only gets its test and validation splits carved by the data module.
    A relative `path` resolves against `root` where one is given (the corpus folder, which an
    export records so that the corpus can move); relative audio paths against the CSV's folder.
    The rows' scores by `listener_id` (where given; a listener's repeated rows averaged) are
    kept in `Clip.ratings`. A clip's score is
    the mean over its listeners of each listener's mean rating (`replicates="per_listener"`: a
    listener who rated a clip twice counts once; rows without a listener count as one listener
    each) or the mean of all its rows (`"pooled"`). The clips of `reference_systems` and
    `anchor_systems` (or of rows whose `role` says so) are listening-test references and anchors.
    A score cell that is not a number is a problem of its clip (`Clip.problems`), reported with
    every other one before training; one audio file under several sample IDs is warned about.
    The file is UTF-8 (a byte-order mark is fine) unless `encoding` names another (e.g.
    "latin-1"); `score_range` is the rating scale that scores and ratings are checked against.
    """
    scale = _scale(score_range)
    if replicates not in REPLICATE_MODES:
        raise ValueError(f"replicates must be one of {list(REPLICATE_MODES)}, got {replicates!r}")
    roles = {**{s: ROLE_ANCHOR for s in anchor_systems}, **{s: ROLE_REFERENCE for s in reference_systems}}
    path = Path(root) / path if root is not None else Path(path)
    text = read_text(path, encoding, " or set data.corpus.encoding (e.g. latin-1)")
    found, table = csv_rows(text, path)
    names, recognised = csv_columns(found, columns, path)
    # Rows by sqa's names; a short row's missing cells are empty.
    rows = [{k: row.get(c) or "" for k, c in names.items()} for row in table]
    extra_cols = [k for k in names if k.startswith("score_")]
    said = [f"recognised columns {', '.join(recognised)}"] if recognised else []
    if "sample_id" not in names:
        _derive_sample_ids(rows, path)
        said.append("sample_id derived from each file's name without its extension")
    unread = [c for c in found if c not in names.values()]
    if said and unread:
        said.append(f"columns left unread: {', '.join(map(repr, unread))}")
    if said:
        # What was assumed, said once, with the setting that says otherwise.
        log.info("%s: %s (data.corpus.columns names the columns otherwise)", path, "; ".join(said))
    if "split" not in names and default_split is None:
        default_split = "train"
    grouped: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for lineno, row in enumerate(rows, start=2):
        grouped.setdefault(row["sample_id"], []).append((lineno, row))
    clips = []
    for sample_id, group in grouped.items():
        lineno, first = group[0]
        for other_line, other in group[1:]:
            for key in ("wav_path", "system_id", "domain_id", "split", "test_set", "role"):
                if other.get(key) != first.get(key):
                    raise CorpusError(
                        f"{path}:{other_line}: {key} of sample {sample_id!r} differs from line {lineno}"
                    )
        problems: list[str] = []
        scores = dict(_numbers(group, "score", path.name, problems))
        listeners = {n: r.get("listener_id") for n, r in group}
        mos = _clip_score([(listeners[n] or f"row {n}", v) for n, v in scores.items()], replicates)
        extra = {}
        for col in extra_cols:
            values = [v for _, v in _numbers(group, col, path.name, problems)]
            if values:
                extra[col.removeprefix("score_")] = sum(values) / len(values)
        by_listener: dict[str, list[float]] = {}
        for n, value in scores.items():
            if listeners[n]:
                by_listener.setdefault(listeners[n], []).append(value)
        wav = Path(first["wav_path"])
        if not (first.get("split") or default_split):
            raise CorpusError(
                f"{path}:{lineno}: empty split of sample {sample_id!r}; fill it in or set "
                "data.corpus.default_split=train"
            )
        split = canonical_split(str(first.get("split") or default_split), f"{path}:{lineno}")
        role = (first.get("role") or "").strip().lower() or roles.get(first["system_id"])
        if role not in (None, ROLE_REFERENCE, ROLE_ANCHOR):
            raise CorpusError(
                f"{path}:{lineno}: role {first['role']!r} of sample {sample_id!r} is not "
                f"{ROLE_REFERENCE!r}, {ROLE_ANCHOR!r} or empty"
            )
        clips.append(
            Clip(
                sample_id=sample_id,
                path=wav if wav.is_absolute() else path.parent / wav,
                mos=mos,
                system_id=first["system_id"],
                domain=first.get("domain_id") or DEFAULT_DOMAIN,
                split=split,
                test_set=_test_set(first, split, f"{path}:{lineno}"),
                extra_scores=extra,
                ratings={k: sum(v) / len(v) for k, v in by_listener.items()},
                role=role,
                problems=tuple(problems),
            )
        )
    _warn_shared_files(clips, path)
    domains = sorted({c.domain for c in clips}, key=_natural_key)
    corpus = Corpus(clips, domains, scale)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus


def _warn_shared_files(clips: Sequence[Clip], path: Path) -> None:
    """Warn of audio files that the manifest `path` names under more than one sample ID."""
    ids: dict[Path, list[str]] = {}
    for clip in clips:
        ids.setdefault(clip.path, []).append(clip.sample_id)
    shared = {f: i for f, i in ids.items() if len(i) > 1}
    if not shared:
        return
    listed = "; ".join(f"{str(f)!r} as {', '.join(map(repr, i))}" for f, i in list(shared.items())[:3])
    more = f"; and {len(shared) - 3} more" if len(shared) > 3 else ""
    # Not an error: each row is readable, and a listening test may rate one file twice on purpose.
    # But the copies' ratings stay apart, and carving can put one in training and one in test.
    log.warning(
        "%s: %d audio file(s) appear under more than one sample ID: %s%s; such a file is several clips, "
        "rated apart, that can land in different splits (give it one sample_id to pool its ratings)",
        path,
        len(shared),
        listed,
        more,
    )


def _test_set(row: Mapping[str, str], split: str, where: str) -> str | None:
    """A test clip's test set (`test` where the column is absent or empty); the average's name is reserved."""
    if split != "test":
        return None
    name = row.get("test_set") or "test"
    if name.strip().lower() == AVERAGE_KEY:
        raise CorpusError(
            f"{where}: test_set {name!r} is reserved for the average over the test sets; rename it"
        )
    return name


def _natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key that orders 'p2' before 'p10'."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.findall(r"\d+|\D+", name)]


def recorded_corpus(spec: Mapping[str, Any], where: str | Path, root: str | Path | None = None) -> Corpus:
    """Read the corpus an export records: `{_target_: <one of CORPUS_READERS>, <plain arguments>}`.

    The corpus folder is `root` where the user gives one (it has moved), else the recorded
    `root`, which is relative to the folder of `where` (the export's config.yaml; exports of
    older versions recorded an absolute one); a CSV manifest's `path` is relative to that folder.
    The reader and its arguments are checked before anything is called: the target must be one
    of sqa's readers, every argument a plain value (no nested targets, no interpolations), a
    `path` an existing .csv file and a `root` an existing folder; a recorded synthetic corpus is
    read where it exists, never generated.
    """
    if not isinstance(spec, Mapping) or "_target_" not in spec:
        raise CorpusError(f"{where}: the recorded corpus has no reader (`_target_`)")
    target = spec["_target_"]
    if isinstance(target, str):
        target = current(target)
    if target not in CORPUS_READERS:
        raise CorpusError(f"{where}: refusing corpus reader {target!r}; allowed: {sorted(CORPUS_READERS)}")
    for key, value in spec.items():
        if not _plain(value):
            raise CorpusError(f"{where}: corpus argument {key!r} is not a plain value ({value!r})")
    kwargs = {k: v for k, v in spec.items() if k != "_target_"}
    move = "; if the corpus has moved, name its folder: eval.py export=... data.corpus.root=DIR"
    if root is not None:
        kwargs["root"] = str(root)
    elif kwargs.get("root") is not None:
        kwargs["root"] = str(Path(where).parent / str(kwargs["root"]))
    # What the readers read: a CSV manifest (`path`) or a corpus folder (`root`), nothing else.
    if "path" in kwargs:
        path = Path(str(kwargs["path"]))
        full = Path(kwargs["root"]) / path if kwargs.get("root") is not None else path
        if not (path.suffix == ".csv" and full.is_file()):
            raise CorpusError(f"{where}: the recorded corpus path {str(full)!r} is not a .csv file{move}")
    elif kwargs.get("root") is not None and not Path(kwargs["root"]).is_dir():
        raise CorpusError(f"{where}: the recorded corpus folder {kwargs['root']!r} does not exist{move}")
    if target in GENERATING_READERS:
        # An export's record is read, never acted on: a synthetic corpus is not generated.
        kwargs["allow_generate"] = False
    module, _, name = str(target).rpartition(".")
    reader = getattr(importlib.import_module(module), name)
    return reader(**kwargs)


def _plain(value: object) -> bool:
    """A string without interpolation, a number, a bool, None, or a list or mapping of those.

    A mapping (`columns`) has string keys and none of Hydra's special ones (`_target_`, ...).
    """
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return all(
            isinstance(k, str) and _plain(k) and not (k.startswith("_") and k.endswith("_")) and _plain(v)
            for k, v in value.items()
        )
    if isinstance(value, str):
        return "${" not in value
    return value is None or isinstance(value, bool | int | float)
