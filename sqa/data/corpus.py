"""A corpus: its `Clip` rows, split names and label counts.

The readers (SingMOS-Pro, SingMOS VMC'24, CSV manifests) and the corpus an export records are in
`sqa.data.readers`, which builds on this module (never the other way round). Problems in the
metadata's structure raise `CorpusError` naming the file and the key or row at fault; problems
of single clips (audio, scores, duplicates) are collected by `sqa.data.validate`.

Split names of other toolkits (`SPLIT_ALIASES`) are mapped to `train`, `valid` and `test`; a
corpus without validation clips can have a seeded validation split carved from its training
clips (`sqa.data.valid_split`).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from sqa.data.audio import AudioError, audio_info

# The role names began here and are kept importable from here (`sqa.metrics` defines them).
from sqa.metrics import ROLE_ANCHOR as ROLE_ANCHOR
from sqa.metrics import ROLE_REFERENCE as ROLE_REFERENCE
from sqa.metrics import ROLES as ROLES

SPLITS = ("train", "valid", "test")
# Split names used by other toolkits (ESPnet, SHEET, VoiceMOS lists), accepted in CSV manifests
# and SingMOS-Pro split.json.
SPLIT_ALIASES = {"dev": "valid", "val": "valid", "validation": "valid", "eval": "test"}


# The domain of a clip whose corpus names none (a CSV manifest without `domain_id`).
DEFAULT_DOMAIN = "default"


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
    `ratings` the individual ratings of the overall quality by judge (empty if not published);
    `role` is `reference` or `anchor` for a listening test's reference and anchor conditions;
    `song` names the piece the clip sings where the corpus says (clips of one song by different
    systems are the pairs of an A/B comparison); None where it does not;
    `problems` what the reader found wrong in the clip's rows (a score cell that is not a number),
    reported with the clip's other problems (`sqa.data.validate`) rather than stopping the reader.
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
    role: str | None = None
    problems: tuple[str, ...] = ()
    song: str | None = None


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
        """Validation clips grouped by domain, in domain order, empty groups left out.

        References and anchors are left out: their extreme scores would inflate the correlations
        checkpoints are selected on.
        """
        groups = {
            d: [c for c in self.clips if c.split == "valid" and c.domain == d and not c.role]
            for d in self.domains
        }
        return {d: clips for d, clips in groups.items() if clips}

    def valid_as_test(self) -> Corpus:
        """The validation clips (`valid_sets`, no references or anchors) as the test sets of a corpus.

        One test set per validation domain, named by it: how a model is scored on its validation
        clips outside training (candidates, ridge weights).
        """
        clips = [
            replace(c, split="test", test_set=name)
            for name, group in self.valid_sets().items()
            for c in group
        ]
        return Corpus(clips, self.domains, self.score_range, self.systems)

    def test_sets(self) -> dict[str, list[Clip]]:
        """Test clips grouped by test-set name, sorted by name; references and anchors by role.

        The sets named `reference` and `anchor` (ROLES) are reported on their own rows and left
        out of the average over test sets.
        """
        groups: dict[str, list[Clip]] = {}
        for c in self.clips:
            if c.split == "test":
                groups.setdefault(c.role or c.test_set or "test", []).append(c)
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
            if c.role:
                row.append(c.role)
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

    def with_test(self, sample_ids: Iterable[str], where: str | Path) -> Corpus:
        """The corpus with the training clips `sample_ids` moved to the test split (test set "test").

        An ID that is not a training clip of the corpus is a CorpusError naming `where`.
        """
        wanted = set(sample_ids)
        split_of = {c.sample_id: c.split for c in self.clips}
        unknown = sorted(i for i in wanted if split_of.get(i) != "train")
        if unknown:
            raise CorpusError(
                f"{where}: {len(unknown)} listed test clip(s) are not training clips of this corpus "
                f"(first: {unknown[0]!r})"
            )
        moved = [
            replace(c, split="test", test_set="test") if c.sample_id in wanted else c for c in self.clips
        ]
        return Corpus(moved, self.domains, self.score_range, self.systems)

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


@dataclass(frozen=True)
class LabelCounts:
    """Clips, systems and distinct MOS labels of a group of clips (and distinct system means).

    `clips_per_system` is the median number of clips of a system (each system mean is averaged
    over about that many clips); `listeners` counts the distinct listeners of the clips' ratings
    (0 where none are published).
    """

    clips: int
    systems: int
    labels: int
    system_labels: int
    clips_per_system: float
    listeners: int = 0

    def describe(self) -> str:
        """`N clips, S systems, L distinct labels (M distinct system means), median C clips per system`."""
        return (
            f"{self.clips} clips, {self.systems} systems, {self.labels} distinct labels "
            f"({self.system_labels} distinct system means), median {self.clips_per_system:g} clips per system"
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
        clips_per_system=float(statistics.median(len(v) for v in by_system.values())) if by_system else 0.0,
        listeners=len({j for c in clips for j in c.ratings}),
    )


def format_counts(counts: Mapping[str, LabelCounts]) -> str:
    """A table with one line per named group: clips, systems, labels, system means, listeners."""
    width = max([len(name) for name in counts] + [5])
    lines = [
        f"{'split':<{width}} {'clips':>6} {'systems':>8} {'labels':>7} {'sys-means':>9} {'listeners':>9}"
    ]
    for name, c in counts.items():
        lines.append(
            f"{name:<{width}} {c.clips:>6} {c.systems:>8} {c.labels:>7} {c.system_labels:>9} {c.listeners:>9}"
        )
    return "\n".join(lines)
