"""Corpus readers: SingMOS-Pro layout, SingMOS (VMC'24 track 2) layout and CSV manifests.

Every reader returns a `Corpus` of `Clip` rows. Problems in the metadata's structure raise
`CorpusError` naming the file and the key or row at fault, never a bare KeyError. Configs and
exports name the readers `sqa.data.readers.read_*` (`CORPUS_READERS`); `recorded_corpus` reads the
corpus an export records.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import logging
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


REQUIRED_CSV_COLUMNS = ("wav_path", "score", "system_id", "sample_id")
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


def _clip_score(group: list[tuple[int, dict[str, str]]], path: Path, replicates: str) -> float:
    """A clip's score from its rows: per listener first, then across listeners, or all rows pooled."""
    values = [
        (r.get("listener_id") or f"row {n}", _number(r["score"], path, f"line {n} score")) for n, r in group
    ]
    if replicates == "pooled":
        return sum(v for _, v in values) / len(values)
    by_listener: dict[str, list[float]] = {}
    for listener, value in values:
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
) -> Corpus:
    """Read a SHEET-style CSV manifest; rows of one sample from several listeners are averaged.

    Required columns: wav_path, score, system_id, sample_id. Optional: listener_id, domain_id,
    split (else `default_split`, by default "train", for every row; aliases such as `dev` or
    `eval` accepted), test_set, role (`reference`, `anchor` or empty) and extra score columns
    `score_<name>`. A manifest of training rows only gets its test and validation splits carved
    by the data module.
    A relative `path` resolves against `root` where one is given (the corpus folder, which an
    export records so that the corpus can move); relative audio paths against the CSV's folder.
    The rows' scores by `listener_id` (where given; a listener's repeated rows averaged) are
    kept in `Clip.ratings`. A clip's score is
    the mean over its listeners of each listener's mean rating (`replicates="per_listener"`: a
    listener who rated a clip twice counts once; rows without a listener count as one listener
    each) or the mean of all its rows (`"pooled"`). The clips of `reference_systems` and
    `anchor_systems` (or of rows whose `role` says so) are listening-test references and anchors.
    The file is UTF-8 (a byte-order mark is fine) unless `encoding` names another (e.g.
    "latin-1"); `score_range` is the rating scale that scores and ratings are checked against.
    """
    scale = _scale(score_range)
    if replicates not in REPLICATE_MODES:
        raise ValueError(f"replicates must be one of {list(REPLICATE_MODES)}, got {replicates!r}")
    roles = {**{s: ROLE_ANCHOR for s in anchor_systems}, **{s: ROLE_REFERENCE for s in reference_systems}}
    path = Path(root) / path if root is not None else Path(path)
    text = read_text(path, encoding, " or set data.corpus.encoding (e.g. latin-1)")
    columns, rows = csv_rows(text, path)
    missing = [c for c in REQUIRED_CSV_COLUMNS if c not in columns]
    if missing:
        raise CorpusError(f"{path}: missing column(s) {missing}; found {columns}")
    if "split" not in columns and default_split is None:
        default_split = "train"
    grouped: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for lineno, row in enumerate(rows, start=2):
        grouped.setdefault(row["sample_id"], []).append((lineno, row))
    extra_cols = [c for c in columns if c.startswith("score_")]
    clips = []
    for sample_id, group in grouped.items():
        lineno, first = group[0]
        for other_line, other in group[1:]:
            for key in ("wav_path", "system_id", "domain_id", "split", "test_set", "role"):
                if other.get(key) != first.get(key):
                    raise CorpusError(
                        f"{path}:{other_line}: {key} of sample {sample_id!r} differs from line {lineno}"
                    )
        mos = _clip_score(group, path, replicates)
        extra = {}
        for col in extra_cols:
            values = [_number(r[col], path, f"line {n} {col}") for n, r in group if r[col] not in ("", None)]
            if values:
                extra[col.removeprefix("score_")] = sum(values) / len(values)
        by_listener: dict[str, list[float]] = {}
        for n, r in group:
            if r.get("listener_id"):
                rating = _number(r["score"], path, f"line {n} score")
                by_listener.setdefault(r["listener_id"], []).append(rating)
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
            )
        )
    domains = sorted({c.domain for c in clips}, key=_natural_key)
    corpus = Corpus(clips, domains, scale)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus


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
    """A string without interpolation, a number, a bool, None, or a list of those."""
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, str):
        return "${" not in value
    return value is None or isinstance(value, bool | int | float)
