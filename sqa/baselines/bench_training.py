"""What an export in a bench was trained on, and the clips of a corpus it may be scored on.

`Training` reads the corpus an export's config.yaml records, split as eval.py splits it: its test
clips are those eval.py tests, every other recorded clip one the export was trained or validated
on. A bench clip is one of them when it has the same sample ID and the same audio (the same file,
or a copy of the same bytes); file names play no part. `sqa.baselines.bench` leaves an export's
seen clips out of its row (`export_clips`), splits a table without a split column as the exports'
records split it (`split_by_record`) and marks a row in-corpus or cross-corpus (`export_kind`).
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from sqa.baselines.bench_config import BenchPredictor
from sqa.data.corpus import Clip, Corpus, CorpusError
from sqa.data.readers import recorded_corpus
from sqa.data.valid_split import read_valid_split
from sqa.exports.config import read_export_config
from sqa.exports.errors import ExportError
from sqa.exports.location import regular_file, resolve_export

KIND_IN, KIND_CROSS = "in-corpus", "cross-corpus"
# The export's copy of the validation split its run carved (`sqa.exports.format.EXPORT_FILES`).
VALID_SPLIT = "valid_split.csv"


class BenchError(RuntimeError):
    """A corpus or predictor of the config could not be scored; the message names it."""


def recorded_source(export: Path) -> Path | None:
    """The file (a manifest) or folder the export at `export` records as its training corpus, resolved."""
    config_path = resolve_export(export)[0]
    spec = (read_export_config(config_path).get("data") or {}).get("corpus") or {}
    root, path = spec.get("root"), spec.get("path")
    # Recorded relative to the export's folder (older exports: absolute, which the join keeps).
    base = config_path.parent / str(root) if root is not None else None
    if isinstance(path, str):
        return ((base / path) if base is not None else Path(path)).resolve()
    return base.resolve() if base is not None else None


@functools.cache
def _digest(path: Path, stamp: tuple[int, int]) -> bytes:
    """SHA-256 of the file at `path`, kept per (size, modification time) `stamp`: each file read once."""
    return hashlib.sha256(path.read_bytes()).digest()


def _same_audio(a: Path, b: Path) -> bool:
    """Whether `a` and `b` are one recording: the same file, or two files of the same bytes."""
    a, b = a.resolve(), b.resolve()
    if a == b:
        return True
    try:
        first, second = a.stat(), b.stat()
        if first.st_size != second.st_size:
            return False
        # A copy of the corpus elsewhere holds the clips the export heard all the same.
        return _digest(a, (first.st_size, first.st_mtime_ns)) == _digest(
            b, (second.st_size, second.st_mtime_ns)
        )
    except OSError:
        # Unreadable: not shown to be the export's clip (scoring it reports the file).
        return False


def _same_label(a: float, b: float) -> bool:
    """Equal labels, two missing ones (a score cell that is not a number) included."""
    return a == b or (math.isnan(a) and math.isnan(b))


@dataclass(frozen=True)
class Training:
    """The clips an export records as its training corpus, split as eval.py splits them.

    `clips` by sample ID: the recorded corpus as its config.yaml's `data.corpus` reads it (the
    reader and its arguments, the folder relative to the export, `sqa.data.readers.recorded_corpus`),
    its test clips those eval.py tests (its own test split, else the export's test_split.csv),
    its validation clips its own or the export's valid_split.csv, and every other one a training
    clip. `source` is the recorded manifest or folder, named in messages.
    """

    name: str
    source: Path | None
    clips: Mapping[str, Clip]

    @property
    def tested(self) -> bool:
        """Whether the export records a test split (clips of its corpus it was not trained on)."""
        return any(c.split == "test" for c in self.clips.values())

    def twin(self, clip: Clip) -> Clip | None:
        """The recorded clip that `clip` is: its sample ID, with the same audio; None where none is.

        Matched by sample ID, as a run's split files name clips, and held to the same audio so
        that another corpus's clip of the same name (`take1`) is not taken for it.
        """
        recorded = self.clips.get(clip.sample_id)
        return recorded if recorded is not None and _same_audio(clip.path, recorded.path) else None

    def is_training_corpus(self, corpus: Corpus) -> bool:
        """Whether every clip of `corpus` is one of the recorded corpus, with the same label.

        The same audio rated anew (another listening test, another scale) is another corpus.
        """
        twins = [(c, self.twin(c)) for c in corpus.clips]
        return bool(twins) and all(t is not None and _same_label(c.mos, t.mos) for c, t in twins)

    def unseen(self, corpus: Corpus) -> tuple[Corpus, int]:
        """`corpus` less the test clips the export was trained or validated on, and how many those were."""
        seen = set()
        for clip in corpus.split("test"):
            recorded = self.twin(clip)
            if recorded is not None and recorded.split != "test":
                seen.add(clip.sample_id)
        return corpus.without(seen), len(seen)

    @property
    def where(self) -> str:
        """The recorded corpus, in words: the manifest or folder its config.yaml names."""
        return (
            "its recorded corpus"
            if self.source is None
            else f"the corpus its config.yaml records ({self.source})"
        )

    def describe(self) -> str:
        """The clips it was trained or validated on, in words: its recorded corpus less its test split."""
        tested = sum(c.split == "test" for c in self.clips.values())
        if not tested:
            return f"{self.where}, every clip of it: the export records no test split"
        return f"{self.where} less its test split of {tested} clips"


def training(predictor: BenchPredictor) -> Training:
    """What the export of `predictor` records of its training data; a BenchError where it cannot be told."""
    config_path = resolve_export(predictor.export)[0]
    data = read_export_config(config_path).get("data") or {}
    spec = data.get("corpus")
    refused = f"{predictor.name}: sqa-bench cannot tell which clips {config_path.parent} was trained on"
    if not spec:
        raise BenchError(
            f"{refused}: its config.yaml records no training corpus (a reader outside sqa's, or an "
            "export written by hand); bench an export of a training run, which records its corpus"
        )
    try:
        corpus = recorded_corpus(spec, config_path)
        split_csv = data.get("test_split_csv")
        # eval.py's test clips: the corpus's own test split, else the run's carved one.
        if not corpus.split("test") and split_csv is not None:
            path = regular_file(config_path.parent, Path(str(split_csv)).name)
            corpus = corpus.with_test(read_valid_split(path), path)
        # The run's carved validation clips, as an ensemble reads its members' (the constant is
        # the mean of the training clips alone).
        if (config_path.parent / VALID_SPLIT).exists():
            path = regular_file(config_path.parent, VALID_SPLIT)
            corpus = corpus.with_valid(read_valid_split(path), path)
    except (CorpusError, ExportError) as err:
        raise BenchError(f"{refused}: {err}") from None
    return Training(predictor.name, recorded_source(predictor.export), {c.sample_id: c for c in corpus.clips})


def export_kind(corpus: Corpus, record: Training) -> str:
    """`in-corpus` where `corpus` is the export's recorded training corpus (`Training.is_training_corpus`)."""
    return KIND_IN if record.is_training_corpus(corpus) else KIND_CROSS


def split_by_record(corpus: Corpus, name: str, records: list[Training]) -> tuple[Corpus, list[str]]:
    """A corpus without splits split as the exports trained on it split it, and the note saying so.

    A corpus with training or validation clips, or one no export of `records` was trained on, is
    returned as it is. Otherwise (every clip a test clip: a table without a split column) each
    clip takes its split, test set and role from its recorded twin, so that its test clips are
    those eval.py tests and its training clips those the exports were trained on. An export that
    records no test split, or two whose records split the corpus differently, are a BenchError.
    """
    if not records or corpus.split("train") or corpus.split("valid"):
        return corpus, []
    splits: dict[str, list[Clip]] = {}
    for record in records:
        if not record.tested:
            raise BenchError(
                f"{record.name} on {name}: the corpus has no training or validation clips (a table without "
                "a split column) and the export records no test split, so any clip of it may be one the "
                "export was trained on; give the table a split column whose test rows it was not trained on"
            )
        # Every clip has its twin: the corpus is the export's (`Training.is_training_corpus`).
        twins = [(c, record.twin(c)) for c in corpus.clips]
        splits[record.name] = [
            replace(c, split=t.split, test_set=t.test_set, role=t.role) for c, t in twins if t is not None
        ]
    first, *others = records
    key = [(c.sample_id, c.split, c.test_set, c.role) for c in splits[first.name]]
    for other in others:
        if [(c.sample_id, c.split, c.test_set, c.role) for c in splits[other.name]] != key:
            raise BenchError(
                f"{name}: the corpus has no training or validation clips (a table without a split column), "
                f"and {first.name} and {other.name} record different splits of it; give the table a split "
                "column (e.g. from one export's test_split.csv), or bench those exports in separate recipes"
            )
    clips = splits[first.name]
    counts = {split: sum(c.split == split for c in clips) for split in ("test", "valid", "train")}
    names = ", ".join(r.name for r in records)
    note = (
        f"{name} has no training or validation clips (a table without a split column): split as {names} "
        f"recorded it, its {counts['test']} test clips those eval.py tests, beside {counts['valid']} "
        f"validation and {counts['train']} training clips"
    )
    return Corpus(clips, corpus.domains, corpus.score_range, corpus.systems), [note]


def export_clips(record: Training, corpus: Corpus, name: str) -> tuple[Corpus, list[str]]:
    """The clips of `corpus` its export is scored on (`Training.unseen`), and the note on those left out.

    A BenchError where none is left: every test clip is one the export was trained or validated on.
    """
    kept, left = record.unseen(corpus)
    tests = len(corpus.split("test"))
    if not kept.split("test"):
        raise BenchError(
            f"{record.name} on {name}: all {tests} test clips are clips the export was trained or "
            f"validated on ({record.describe()}); bench it on clips it was not trained on, e.g. a "
            "table whose split column's test rows are its test split (its test_split.csv)"
        )
    if not left:
        return kept, []
    note = (
        f"{record.name} on {name}: {left} of {tests} test clips left out, as the export was trained or "
        f"validated on them ({record.describe()})"
    )
    return kept, [note]
