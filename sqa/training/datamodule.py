"""LightningDataModule: train loader, a validation loader per domain, a test loader per test set.

The dataset, samplers and collation it wires up are in `sqa.data.dataset`, `sqa.data.samplers`
and `sqa.data.batching`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
from torch.utils.data import DataLoader

from sqa.core.prediction import OVERALL
from sqa.data.arguments import check_arguments
from sqa.data.audio import audio_info
from sqa.data.batching import collate
from sqa.data.corpus import SPLITS, Clip, Corpus, CorpusError, LabelCounts, count_labels
from sqa.data.dataset import MIN_SAMPLES, ClipDataset
from sqa.data.pitch import F0Extractor
from sqa.data.samplers import BucketBatchSampler, EpochSampler, eval_batches
from sqa.data.valid_split import carve_test, carve_valid, read_valid_split, resolve_split_by
from sqa.data.validate import ON_SCREEN, CorpusProblems, format_report, scale_diagnosis, validate_corpus

log = logging.getLogger(__name__)


# `preload: auto` holds a corpus in memory where its clips, decoded (float32 at the training
# rate), take at most this: a listening test of up to about two hours of audio.
PRELOAD_AUTO_BYTES = 512 << 20


def fits_in_memory(clips: Sequence[Clip], sample_rate: int, budget: int) -> bool:
    """Whether `clips` decoded (float32 at `sample_rate`) take at most `budget` bytes, by their headers."""
    total = 0
    for clip in clips:
        rate, frames, _ = audio_info(clip.path)
        total += 4 * -(-frames * sample_rate // rate)
        if total > budget:
            return False
    return True


def available_cpus() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _log_moved(split: str, clips: Sequence[Clip], split_csv: str | None, carving: str) -> None:
    """Say how many training clips of how many systems went to `split`, and from where."""
    log.info(
        "%s split: %d training clip(s) of %d systems moved to %s (%s)",
        split,
        len(clips),
        len({c.system_id for c in clips}),
        split,
        f"from {split_csv}" if split_csv else carving,
    )


def skip_hint(corpus: Corpus, bad: set[str], splits: Sequence[str]) -> str:
    """The fix for clips with problems: data.on_error=skip where that leaves every split some clips."""
    emptied = [s for s in splits if corpus.split(s) and all(c.sample_id in bad for c in corpus.split(s))]
    if emptied:
        return (
            f"(skipping them, data.on_error=skip, would leave no {' or '.join(emptied)} clips: "
            "correct the table)"
        )
    left = len(corpus.clips) - len(bad)
    return f"(set data.on_error=skip to drop these {len(bad)} clip(s) and train on the other {left})"


class MOSDataModule(L.LightningDataModule):
    """Loaders over a `Corpus`: shuffled training clips, per-domain validation, per-set test.

    A corpus without test clips gets a seeded test split of `test_share` of its training clips
    (`carve_test`), then one without validation clips a validation split of `valid_share`
    (`carve_valid`): by clip (a share of every system's clips), by system or by song (disjoint),
    or by song where the clips name songs and by clip where not (auto), as `split_by` says.
    `test_split_csv` and `valid_split_csv` (a run's `test_split.csv` and `valid_split.csv`) reuse
    earlier splits instead. Carving is seeded by `split_seed` (None: `seed`, which also seeds the
    training order and crops). The moved clips are `carved_test` and `carved_valid`. Only
    `required_splits` must have clips (evaluation needs only `test`). `num_workers` is capped
    at the available CPU cores.
    """

    def __init__(
        self,
        corpus: Corpus,
        sample_rate: int = 16000,
        batch_size: int = 8,
        eval_batch_size: int = 8,
        num_workers: int = 0,
        max_train_seconds: float | None = 10.0,
        eval_max_seconds: float | None = None,
        preload: bool | str = False,
        seed: int = 0,
        f0_extractor: F0Extractor | None = None,
        train_domains: Sequence[str] | None = None,
        on_error: str = "raise",
        bucketing: bool = False,
        max_batch_seconds: float | None = None,
        dimensions: Sequence[str] = (OVERALL,),
        judges: bool = False,
        valid_share: float = 0.1,
        valid_split_csv: str | None = None,
        test_share: float = 0.2,
        test_split_csv: str | None = None,
        split_by: str = "auto",
        required_splits: Sequence[str] = SPLITS,
        vocal_only: bool = False,
        split_seed: int | None = None,
    ) -> None:
        super().__init__()
        # Arguments first: a typo in the config must not wait for every clip to be decoded.
        check_arguments(corpus, locals())
        self.carved_valid: list[Clip] = []
        self.carved_test: list[Clip] = []
        # Carving has a seed of its own, so that runs of several seeds can test on the same clips.
        self.split_seed = seed if split_seed is None else split_seed
        if "test" in required_splits:
            corpus = self._with_test_split(corpus, test_share, test_split_csv, self.split_seed, split_by)
            if not corpus.split("test"):
                raise CorpusError("the corpus has no test clips; set data.test_share > 0 to carve some")
        if "valid" in required_splits:
            corpus = self._with_valid_split(corpus, valid_share, valid_split_csv, self.split_seed, split_by)
            if not corpus.split("valid"):
                raise CorpusError(
                    "the corpus has no validation clips; set data.valid_share > 0 to carve some"
                )
        # Validate everything before training starts: stop with the full report, or drop the
        # bad clips and keep the report (`problems`) for the run directory.
        self.problems = validate_corpus(corpus, sample_rate, MIN_SAMPLES, required_splits)
        # A wrong scale puts most clips out of it: skipping them cannot help, so it always stops.
        diagnosis = scale_diagnosis(corpus)
        if diagnosis:
            raise CorpusProblems(self.problems, diagnosis=diagnosis)
        bad = {p.sample_id for p in self.problems if p.sample_id is not None}
        if self.problems and on_error == "raise":
            raise CorpusProblems(self.problems, skip_hint(corpus, bad, required_splits))
        corpus = corpus.without(bad)
        if self.problems:
            log.warning("%s\nskipped %d clip(s)", format_report(self.problems, ON_SCREEN), len(bad))
        for split in required_splits:
            if not corpus.split(split):
                raise CorpusError(f"no usable clips left in the {split} split")
        self.corpus = corpus
        self.sample_rate = sample_rate
        self.batch_size = batch_size
        self.eval_batch_size = eval_batch_size
        # More workers than cores only adds contention (and a DataLoader warning).
        self.num_workers = min(num_workers, available_cpus())
        self.max_train_seconds = max_train_seconds
        # Validation and test clips keep their first eval_max_seconds (None: whole clips).
        self.eval_max_seconds = eval_max_seconds
        self.preload = (
            preload
            if isinstance(preload, bool)
            else fits_in_memory(corpus.clips, sample_rate, PRELOAD_AUTO_BYTES)
        )
        # Every clip cut to its vocal span (sqa.data.vocal), as the export then scores it.
        self.vocal_only = vocal_only
        self.seed = seed
        self.f0_extractor = f0_extractor
        self.train_domains = list(train_domains) if train_domains else None
        self.bucketing = bucketing
        self.max_batch_seconds = max_batch_seconds
        self.dimensions = list(dimensions)
        for dim in self.dimensions[1:] if "train" in required_splits else ():
            if not any(dim in c.extra_scores for c in self.train_clips):
                raise CorpusError(f"no training clip has a {dim!r} score (dimensions: {self.dimensions})")
        # Judges are indexed over the training clips only; evaluation always uses the mean judge.
        self.judges = (
            {name: i for i, name in enumerate(sorted({j for c in self.train_clips for j in c.ratings}))}
            if judges
            else None
        )
        self._datasets: dict[str, ClipDataset] = {}

    def _with_test_split(
        self, corpus: Corpus, share: float, split_csv: str | None, seed: int, by: str
    ) -> Corpus:
        """The corpus with its test split read from `split_csv` or carved where it has none."""
        if corpus.split("test"):
            return corpus
        if split_csv:
            corpus = corpus.with_test(read_valid_split(split_csv), split_csv)
        elif share:
            by = resolve_split_by(corpus, by)
            corpus = carve_test(corpus, share, seed, by)
        else:
            return corpus
        self.carved_test = corpus.split("test")
        _log_moved("test", self.carved_test, split_csv, f"carved by {by}: {share:g}, split seed {seed}")
        return corpus

    def _with_valid_split(
        self, corpus: Corpus, share: float, split_csv: str | None, seed: int, by: str
    ) -> Corpus:
        """The corpus with its validation split read from `split_csv` or carved where it has none."""
        before = {c.sample_id for c in corpus.split("valid")}
        if split_csv:
            corpus = corpus.with_valid(read_valid_split(split_csv), split_csv)
        elif not before and share:
            by = resolve_split_by(corpus, by)
            corpus = carve_valid(corpus, share, seed, by)
        else:
            return corpus
        self.carved_valid = [c for c in corpus.split("valid") if c.sample_id not in before]
        carving = f"carved by {by}: {share:g}, split seed {seed}"
        _log_moved("validation", self.carved_valid, split_csv, carving)
        return corpus

    def label_counts(self) -> dict[str, LabelCounts]:
        """Clips, systems and distinct labels of the training split, each validation and test set."""
        counts = {"train": count_labels(self.train_clips)}
        counts.update({f"valid/{n}": count_labels(c) for n, c in self.corpus.valid_sets().items()})
        counts.update({f"test/{n}": count_labels(c) for n, c in self.corpus.test_sets().items()})
        return counts

    @property
    def train_clips(self) -> list[Clip]:
        """Training clips (of `train_domains` only, if set)."""
        clips = self.corpus.split("train")
        if self.train_domains is not None:
            clips = [c for c in clips if c.domain in self.train_domains]
        return clips

    @property
    def num_judges(self) -> int:
        """Number of judges in the training split's index (0 without judges)."""
        return len(self.judges) if self.judges is not None else 0

    @property
    def valid_names(self) -> list[str]:
        """Names of the validation sets (domains with a valid split), in loader order."""
        return list(self.corpus.valid_sets())

    @property
    def test_names(self) -> list[str]:
        """Names of the test sets, in loader order."""
        return list(self.corpus.test_sets())

    def _dataset(
        self,
        key: str,
        clips: Sequence[Clip],
        max_seconds: float | None = None,
        judges: Mapping[str, int] | None = None,
        crop_from_start: bool = False,
    ) -> ClipDataset:
        if key not in self._datasets:
            self._datasets[key] = ClipDataset(
                clips,
                self.corpus,
                self.sample_rate,
                max_seconds,
                self.preload,
                self.seed,
                self.f0_extractor,
                self.dimensions,
                judges,
                crop_from_start,
                self.vocal_only,
            )
        return self._datasets[key]

    def _ranks(self) -> tuple[int, int]:
        """(world size, global rank) of the attached trainer; (1, 0) without one."""
        trainer = self.trainer
        return (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)

    def _loader(self, dataset: ClipDataset, **sampling: Any) -> DataLoader:
        """A loader over `dataset` with `sampling` (sampler and batch_size, or batch_sampler)."""
        # Held clips are served by this process: a worker would hold a copy of them only to crop
        # them, and on a small machine the workers' processes cost more than they save
        # (sisec18's log-mel candidate on 2 cores read 90 clips from files in 4 workers for 2.2x as
        # long: docs/results.md, "Half the time").
        workers = 0 if self.preload else self.num_workers
        return DataLoader(
            dataset, collate_fn=collate, num_workers=workers, persistent_workers=workers > 0, **sampling
        )

    def _eval_loader(self, dataset: ClipDataset) -> DataLoader:
        # sqa shards evaluation across DDP ranks itself (the trainer runs with
        # use_distributed_sampler off), by whole batches: see `eval_batches`.
        world, rank = self._ranks()
        return self._loader(
            dataset, batch_sampler=eval_batches(len(dataset), self.eval_batch_size, world, rank)
        )

    def train_dataloader(self) -> DataLoader:
        """Shuffled training clips (of `train_domains` only, if set), cropped to `max_train_seconds`."""
        train = self._dataset("train", self.train_clips, self.max_train_seconds, self.judges)
        world, rank = self._ranks()
        epoch, batches = self._resume_point()
        if not self.bucketing:
            sampler = EpochSampler(len(train), self.seed, world, rank)
            sampler.resume(epoch, batches * self.batch_size)
            return self._loader(train, sampler=sampler, batch_size=self.batch_size)
        # Length-bucketed batches: by clip count, or by padded seconds with max_batch_seconds.
        batch_sampler = BucketBatchSampler(
            train.lengths(),
            batch_size=None if self.max_batch_seconds else self.batch_size,
            max_batch_samples=int(self.max_batch_seconds * self.sample_rate)
            if self.max_batch_seconds
            else None,
            seed=self.seed,
            num_replicas=world,
            rank=rank,
        )
        batch_sampler.resume(epoch, batches)
        return self._loader(train, batch_sampler=batch_sampler)

    def _resume_point(self) -> tuple[int, int]:
        """(epoch, training batches it has done) of the checkpoint a fit resumes from; (0, 0) if none.

        Resume checkpoints are written after validations, mid-epoch: the resumed sampler starts
        after the batches trained before it, as an uninterrupted run would continue.
        """
        trainer = self.trainer
        if trainer is None or not trainer.fit_loop.restarting:
            return 0, 0
        loop = trainer.fit_loop
        return loop.epoch_progress.current.processed, loop.epoch_loop.batch_progress.current.completed

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per domain's validation split."""
        return [
            self._eval_loader(
                self._dataset(f"valid/{name}", clips, self.eval_max_seconds, crop_from_start=True)
            )
            for name, clips in self.corpus.valid_sets().items()
        ]

    def test_dataloader(self) -> list[DataLoader]:
        """One loader per test set: whole clips, or their first `eval_max_seconds`."""
        return [
            self._eval_loader(
                self._dataset(f"test/{name}", clips, self.eval_max_seconds, crop_from_start=True)
            )
            for name, clips in self.corpus.test_sets().items()
        ]
