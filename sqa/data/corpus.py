"""Corpus readers: SingMOS-Pro layout, SingMOS (VMC'24 track 2) layout and CSV manifests.

Every reader returns a `Corpus` of `Clip` rows. Problems in the metadata's structure raise
`CorpusError` naming the file and the key or row at fault, never a bare KeyError; problems of
single clips (audio, scores, duplicates) are collected by `sqa.data.validate`.

Split names of other toolkits (`SPLIT_ALIASES`) are mapped to `train`, `valid` and `test`; a
corpus without validation clips can have a seeded validation split carved from its training
clips (`carve_valid`).
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import io
import json
import logging
import re
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from sqa.atomic import atomic_write_text
from sqa.data.audio import AudioError, audio_info

SPLITS = ("train", "valid", "test")
# Split names used by other toolkits (ESPnet, SHEET, VoiceMOS lists), accepted in CSV manifests
# and SingMOS-Pro split.json.
SPLIT_ALIASES = {"dev": "valid", "val": "valid", "validation": "valid", "eval": "test"}
VALID_SPLIT_COLUMNS = ("sample_id", "system_id", "domain")
# The readers a recorded corpus (an export's `data.corpus`) may name: nothing else is built.
CORPUS_READERS = frozenset(
    {
        "sqa.data.corpus.read_singmos_pro",
        "sqa.data.corpus.read_vmc24",
        "sqa.data.corpus.read_csv_manifest",
        "sqa.data.synthetic.load_synthetic",
    }
)

log = logging.getLogger(__name__)


class CorpusError(ValueError):
    """Corpus metadata is missing, malformed or inconsistent."""


def accepted_split_names() -> str:
    """The accepted split names and their aliases, for error messages and documentation."""
    return ", ".join(
        f"{split} (or {', '.join(a for a, s in SPLIT_ALIASES.items() if s == split)})"
        if split in SPLIT_ALIASES.values()
        else split
        for split in SPLITS
    )


def canonical_split(name: str, where: str) -> str:
    """`train`, `valid` or `test` for a split name or alias (any case); CorpusError naming `where`."""
    key = name.strip().lower()
    key = SPLIT_ALIASES.get(key, key)
    if key not in SPLITS:
        raise CorpusError(f"{where}: unknown split {name!r}; accepted: {accepted_split_names()}")
    return key


@dataclass(frozen=True)
class Clip:
    """One rated clip: where its audio is, its MOS and where it belongs.

    `extra_scores` holds other score dimensions (e.g. lyrics, melody) where the corpus has them;
    `ratings` the individual ratings of the overall quality by judge (empty if not published).
    """

    sample_id: str
    path: Path
    mos: float
    system_id: str
    domain: str
    split: str
    test_set: str | None = None
    extra_scores: Mapping[str, float] = field(default_factory=dict)
    ratings: Mapping[str, float] = field(default_factory=dict)


@dataclass
class Corpus:
    """Clips, their ordered domains (annotation batches), score scale and known systems.

    `systems` is None where the corpus has no list of systems to check clips against.
    """

    clips: list[Clip]
    domains: list[str]
    score_range: tuple[float, float] = (1.0, 5.0)
    systems: frozenset[str] | None = None

    def domain_index(self, domain: str) -> int:
        """Integer ID of a domain name (its position in `domains`)."""
        return self.domains.index(domain)

    def split(self, name: str) -> list[Clip]:
        """Clips of one split (`train`, `valid` or `test`)."""
        return [c for c in self.clips if c.split == name]

    def valid_sets(self) -> dict[str, list[Clip]]:
        """Validation clips grouped by domain, in domain order, empty groups left out."""
        groups = {d: [c for c in self.clips if c.split == "valid" and c.domain == d] for d in self.domains}
        return {d: clips for d, clips in groups.items() if clips}

    def test_sets(self) -> dict[str, list[Clip]]:
        """Test clips grouped by test-set name, sorted by name."""
        groups: dict[str, list[Clip]] = {}
        for c in self.clips:
            if c.split == "test":
                groups.setdefault(c.test_set or "test", []).append(c)
        return dict(sorted(groups.items()))

    def filter_sample_rate(self, sample_rate: int) -> Corpus:
        """Keep only clips whose file is stored at `sample_rate` (the paper's 16 kHz filter)."""
        kept = [c for c in self.clips if _file_sample_rate(c.path) in (sample_rate, None)]
        return Corpus(kept, self.domains, self.score_range, self.systems)

    def fingerprint(self) -> str:
        """SHA-256 over every clip's labels and audio bytes: equal fingerprints, equal data."""
        digest = hashlib.sha256(json.dumps([self.domains, list(self.score_range)]).encode())
        for c in sorted(self.clips, key=lambda c: c.sample_id):
            row = [c.sample_id, c.mos, c.system_id, c.domain, c.split, c.test_set, dict(c.extra_scores)]
            if c.ratings:
                # Appended only when present: corpora without ratings keep their fingerprints.
                row.append(dict(c.ratings))
            digest.update(json.dumps(row).encode())
            if c.path.is_file():
                digest.update(hashlib.sha256(c.path.read_bytes()).digest())
        return digest.hexdigest()

    def with_valid(self, sample_ids: Iterable[str], where: str | Path) -> Corpus:
        """The corpus with the training clips `sample_ids` moved to the validation split.

        An ID that is already a validation clip is kept; one that is not in the corpus or is a
        test clip is a CorpusError naming `where` (the split's source).
        """
        wanted = set(sample_ids)
        split_of = {c.sample_id: c.split for c in self.clips}
        unknown = sorted(i for i in wanted if split_of.get(i) not in ("train", "valid"))
        if unknown:
            raise CorpusError(
                f"{where}: {len(unknown)} listed validation clip(s) are not training or validation "
                f"clips of this corpus (first: {unknown[0]!r})"
            )
        clips = [replace(c, split="valid") if c.sample_id in wanted else c for c in self.clips]
        return Corpus(clips, self.domains, self.score_range, self.systems)

    def without(self, sample_ids: set[str]) -> Corpus:
        """The corpus less the clips with these sample IDs."""
        kept = [c for c in self.clips if c.sample_id not in sample_ids]
        return Corpus(kept, self.domains, self.score_range, self.systems)


def _file_sample_rate(path: Path) -> int | None:
    """Stored sample rate, or None for a file that cannot be read (validation reports it)."""
    try:
        return audio_info(path)[0]
    except AudioError:
        return None


def _read_text(path: Path, encoding: str | None = None, hint: str = "") -> str:
    """Text of a metadata file: UTF-8 (or `encoding`), a byte-order mark dropped.

    A file that does not decode is a CorpusError naming it, the first bad byte and its line.
    """
    if not path.is_file():
        raise CorpusError(f"{path}: file not found")
    data = path.read_bytes()
    try:
        text = data.decode(encoding or "utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise CorpusError(
            f"{path}: not {encoding or 'UTF-8'} text (byte 0x{data[err.start]:02x} on line {line}); "
            f"save it as UTF-8{hint}"
        ) from None
    except LookupError:
        raise CorpusError(f"{path}: unknown encoding {encoding!r}") from None
    return text.removeprefix("\ufeff")


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
    text = _read_text(path)
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
    systems = frozenset(_load_json(sys_info_path)) if sys_info_path.is_file() else None
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
        for lineno, line in enumerate(_read_text(path).splitlines(), start=1):
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


def read_csv_manifest(
    path: str | Path,
    default_split: str | None = None,
    sample_rate_filter: int | None = None,
    score_range: Sequence[float] = (1.0, 5.0),
    encoding: str | None = None,
) -> Corpus:
    """Read a SHEET-style CSV manifest; rows of one sample from several listeners are averaged.

    Required columns: wav_path, score, system_id, sample_id. Optional: listener_id, domain_id,
    split (else `default_split` for every row; aliases such as `dev` or `eval` accepted), test_set,
    and extra score columns `score_<name>`.
    Relative paths resolve against the CSV's folder. The rows' scores by `listener_id` (where
    given; a listener's repeated rows averaged) are kept in `Clip.ratings`. The file is UTF-8
    (a byte-order mark is fine) unless `encoding` names another (e.g. "latin-1"); `score_range`
    is the rating scale that scores and ratings are checked against.
    """
    scale = _scale(score_range)
    path = Path(path)
    text = _read_text(path, encoding, " or set data.corpus.encoding (e.g. latin-1)")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = reader.fieldnames or []
    missing = [c for c in REQUIRED_CSV_COLUMNS if c not in columns]
    if missing:
        raise CorpusError(f"{path}: missing column(s) {missing}; found {columns}")
    if "split" not in columns and default_split is None:
        raise CorpusError(f"{path}: no 'split' column; add one or set default_split")
    rows = list(reader)
    grouped: dict[str, list[tuple[int, dict[str, str]]]] = {}
    for lineno, row in enumerate(rows, start=2):
        grouped.setdefault(row["sample_id"], []).append((lineno, row))
    extra_cols = [c for c in columns if c.startswith("score_")]
    clips = []
    for sample_id, group in grouped.items():
        lineno, first = group[0]
        for other_line, other in group[1:]:
            for key in ("wav_path", "system_id", "domain_id", "split", "test_set"):
                if other.get(key) != first.get(key):
                    raise CorpusError(
                        f"{path}:{other_line}: {key} of sample {sample_id!r} differs from line {lineno}"
                    )
        mos = sum(_number(r["score"], path, f"line {n} score") for n, r in group) / len(group)
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
            raise CorpusError(f"{path}:{lineno}: empty split of sample {sample_id!r} and no default_split")
        split = canonical_split(str(first.get("split") or default_split), f"{path}:{lineno}")
        clips.append(
            Clip(
                sample_id=sample_id,
                path=wav if wav.is_absolute() else path.parent / wav,
                mos=mos,
                system_id=first["system_id"],
                domain=first.get("domain_id") or "default",
                split=split,
                test_set=(first.get("test_set") or "test") if split == "test" else None,
                extra_scores=extra,
                ratings={k: sum(v) / len(v) for k, v in by_listener.items()},
            )
        )
    domains = sorted({c.domain for c in clips}, key=_natural_key)
    corpus = Corpus(clips, domains, scale)
    return corpus.filter_sample_rate(sample_rate_filter) if sample_rate_filter else corpus


def _natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key that orders 'p2' before 'p10'."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.findall(r"\d+|\D+", name)]


@dataclass(frozen=True)
class LabelCounts:
    """Clips, systems and distinct MOS labels of a group of clips (and distinct system means)."""

    clips: int
    systems: int
    labels: int
    system_labels: int

    def describe(self) -> str:
        """`N clips, S systems, L distinct labels (M distinct system means)`."""
        return (
            f"{self.clips} clips, {self.systems} systems, {self.labels} distinct labels "
            f"({self.system_labels} distinct system means)"
        )


def count_labels(clips: Sequence[Clip]) -> LabelCounts:
    """Counts of `clips`: labels compared to 9 decimals, so equal means summed apart count once."""
    by_system: dict[str, list[float]] = {}
    for c in clips:
        by_system.setdefault(c.system_id, []).append(c.mos)
    return LabelCounts(
        clips=len(clips),
        systems=len(by_system),
        labels=len({round(c.mos, 9) for c in clips}),
        system_labels=len({round(sum(v) / len(v), 9) for v in by_system.values()}),
    )


def format_counts(counts: Mapping[str, LabelCounts]) -> str:
    """A table with one line per named group: clips, systems, distinct labels, distinct system means."""
    width = max([len(name) for name in counts] + [5])
    lines = [f"{'split':<{width}} {'clips':>6} {'systems':>8} {'labels':>7} {'sys-means':>9}"]
    for name, c in counts.items():
        lines.append(f"{name:<{width}} {c.clips:>6} {c.systems:>8} {c.labels:>7} {c.system_labels:>9}")
    return "\n".join(lines)


def carve_valid(corpus: Corpus, share: float, seed: int) -> Corpus:
    """The corpus with a seeded `share` of every system's training clips moved to `valid`.

    A system with n ≥ 2 training clips gives max(1, round(share·n)) of them and keeps at least
    one, so every system with two or more clips is seen in training and in validation. Each
    system's draw depends only on the seed, its ID and its clips' sample IDs, not on the others.
    """
    if not 0 < share < 1:
        raise ValueError(f"valid_share must be in (0, 1), got {share}")
    by_system: dict[str, list[Clip]] = {}
    for c in corpus.split("train"):
        by_system.setdefault(c.system_id, []).append(c)
    chosen: set[str] = set()
    for system, clips in by_system.items():
        if len(clips) < 2:
            continue
        ids = sorted(c.sample_id for c in clips)
        rng = np.random.default_rng([seed, zlib.crc32(system.encode())])
        take = min(max(1, round(share * len(ids))), len(ids) - 1)
        chosen.update(ids[i] for i in rng.permutation(len(ids))[:take])
    return corpus.with_valid(chosen, "carve_valid")


def write_valid_split(clips: Sequence[Clip], path: str | Path) -> None:
    """Write validation clips' sample_id, system_id and domain to a CSV that `read_valid_split` reads."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(VALID_SPLIT_COLUMNS)
    for c in sorted(clips, key=lambda c: c.sample_id):
        writer.writerow([c.sample_id, c.system_id, c.domain])
    atomic_write_text(path, buffer.getvalue())


def read_valid_split(path: str | Path) -> list[str]:
    """Sample IDs listed in a validation split CSV (a `sample_id` column; other columns ignored)."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"{path}: file not found")
    with path.open(newline="") as fh:
        reader = csv.DictReader(fh)
        if "sample_id" not in (reader.fieldnames or []):
            raise CorpusError(f"{path}: no 'sample_id' column; found {reader.fieldnames}")
        ids = [row["sample_id"] for row in reader]
    if not ids:
        raise CorpusError(f"{path}: lists no sample IDs")
    return ids


def recorded_corpus(spec: Mapping[str, Any], where: str | Path) -> Corpus:
    """Read the corpus an export records: `{_target_: <one of CORPUS_READERS>, <plain arguments>}`.

    The reader and its arguments are checked before anything is called: the target must be one
    of sqa's readers and every argument a plain value (no nested targets, no interpolations).
    """
    if not isinstance(spec, Mapping) or "_target_" not in spec:
        raise CorpusError(f"{where}: the recorded corpus has no reader (`_target_`)")
    target = spec["_target_"]
    if target not in CORPUS_READERS:
        raise CorpusError(f"{where}: refusing corpus reader {target!r}; allowed: {sorted(CORPUS_READERS)}")
    for key, value in spec.items():
        if not _plain(value):
            raise CorpusError(f"{where}: corpus argument {key!r} is not a plain value ({value!r})")
    module, _, name = str(target).rpartition(".")
    reader = getattr(importlib.import_module(module), name)
    return reader(**{k: v for k, v in spec.items() if k != "_target_"})


def _plain(value: object) -> bool:
    """A string without interpolation, a number, a bool, None, or a list of those."""
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, str):
        return "${" not in value
    return value is None or isinstance(value, bool | int | float)
