"""LightningDataModule: train loader, a validation loader per domain, a test loader per test set."""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from sqa.data.audio import audio_info, crop_start, load_audio, pad_to
from sqa.data.batching import pad_batch
from sqa.data.corpus import (
    SPLITS,
    Clip,
    Corpus,
    CorpusError,
    LabelCounts,
    carve_valid,
    count_labels,
    read_valid_split,
)
from sqa.data.pitch import F0Extractor
from sqa.data.validate import CorpusProblems, format_report, validate_corpus
from sqa.models.predictor import OVERALL

log = logging.getLogger(__name__)
T = TypeVar("T")

# Receptive field of the wav2vec2 and log-mel front ends: shorter clips are zero-padded to it.
MIN_SAMPLES = 400


class ClipDataset(Dataset):
    """Clips of one split as mono float waveforms at `sample_rate`, plus their labels.

    Training clips longer than `max_seconds` are cropped at a random offset (a multiple of the
    f0 hop, so the f0 track stays aligned) that depends on the seed, the clip and the epoch (the
    crop policy; `EpochSampler` passes `(index, epoch)` keys); with `crop_from_start` (evaluation
    under `eval_max_seconds`, the paper's protocol) they keep their first `max_seconds` instead.
    With an `f0_extractor`, items carry the clip's f0 track.

    Items carry the labels of `dimensions` (`target`, NaN where the clip has no such score, and
    `mask`); "mos" is the clip's MOS, other names its `extra_scores`. With `judges` (judge name
    -> ID), the dataset holds one item per clip with the mean judge (ID `len(judges)`, the clip's
    mean scores) plus one item per rating (that judge's ID and rating, other dimensions masked),
    and a clip without ratings or with a judge outside `judges` is an error.
    """

    def __init__(
        self,
        clips: Sequence[Clip],
        corpus: Corpus,
        sample_rate: int,
        max_seconds: float | None = None,
        preload: bool = False,
        seed: int = 0,
        f0_extractor: F0Extractor | None = None,
        dimensions: Sequence[str] = (OVERALL,),
        judges: Mapping[str, int] | None = None,
        crop_from_start: bool = False,
    ) -> None:
        self.clips = list(clips)
        self.crop_from_start = crop_from_start
        self.dimensions = list(dimensions)
        self.mean_judge = len(judges) if judges is not None else None
        # (clip index, judge ID or None for the mean judge, that judge's rating)
        self.items: list[tuple[int, int | None, float | None]] = []
        for i, clip in enumerate(self.clips):
            self.items.append((i, None, None))
            if judges is None:
                continue
            where = f"{clip.path} [{clip.sample_id}]"
            if not clip.ratings:
                raise CorpusError(f"{where}: no per-judge ratings, which training with judges needs")
            for name, rating in sorted(clip.ratings.items()):
                if name not in judges:
                    raise CorpusError(f"{where}: judge {name!r} is not in the training judge index")
                self.items.append((i, judges[name], rating))
        self.f0_extractor = f0_extractor
        self.hop = int(round(sample_rate * f0_extractor.frame_period_ms / 1000)) if f0_extractor else 1
        self.domain_ids = [corpus.domain_index(c.domain) for c in self.clips]
        self.sample_rate = sample_rate
        self.max_samples = int(max_seconds * sample_rate) if max_seconds else None
        self.seed = seed
        self._cache = [self._read(i) for i in range(len(self.clips))] if preload else None

    def __len__(self) -> int:
        return len(self.items)

    def lengths(self) -> list[int]:
        """Samples each item will have at `sample_rate` after the crop, read from file headers."""
        per_clip = []
        for clip in self.clips:
            sr, frames, _ = audio_info(clip.path)
            length = max(frames * self.sample_rate // sr, MIN_SAMPLES)
            per_clip.append(min(length, self.max_samples) if self.max_samples else length)
        return [per_clip[i] for i, _, _ in self.items]

    def _labels(self, clip: Clip, judge: int | None, rating: float | None) -> tuple[list[float], list[bool]]:
        """Targets (NaN where missing) and label mask over `dimensions` for one item."""
        if judge is not None:
            # A judge's rating is of the overall quality only.
            others = len(self.dimensions) - 1
            return [rating] + [math.nan] * others, [True] + [False] * others
        values = [clip.mos if d == OVERALL else clip.extra_scores.get(d, math.nan) for d in self.dimensions]
        return values, [not math.isnan(v) for v in values]

    def _read(self, index: int) -> tuple[np.ndarray, np.ndarray | None]:
        wav = pad_to(load_audio(self.clips[index].path, self.sample_rate), MIN_SAMPLES)
        f0 = self.f0_extractor(wav, self.sample_rate) if self.f0_extractor else None
        return wav, f0

    def __getitem__(self, key: int | tuple[int, int]) -> dict[str, Any]:
        index, epoch = key if isinstance(key, tuple) else (key, 0)
        clip_index, judge, rating = self.items[index]
        clip = self.clips[clip_index]
        wav, f0 = self._cache[clip_index] if self._cache is not None else self._read(clip_index)
        # The crop depends only on the seed, the item and the epoch, so a resumed run crops alike.
        rng = np.random.default_rng([self.seed, index, epoch]) if self.max_samples is not None else None
        start = 0 if self.crop_from_start else crop_start(wav.shape[0], self.max_samples, rng, self.hop)
        if self.max_samples is not None:
            wav = wav[start : start + self.max_samples]
            if f0 is not None:
                f0 = f0[start // self.hop : (start + self.max_samples) // self.hop + 1]
        target, mask = self._labels(clip, judge, rating)
        return {
            "index": index,
            "wav": torch.from_numpy(np.ascontiguousarray(wav)),
            "f0": torch.from_numpy(np.ascontiguousarray(f0)) if f0 is not None else None,
            "mos": clip.mos,
            "target": target,
            "mask": mask,
            "judge": self.mean_judge if judge is None else judge,
            "domain": self.domain_ids[clip_index],
            "sample_id": clip.sample_id,
            "system_id": clip.system_id,
            "test_set": clip.test_set or "",
        }


def rank_share(items: Sequence[T], num_replicas: int = 1, rank: int = 0) -> Sequence[T]:
    """Every `num_replicas`-th of `items` from `rank` on, all ranks equally many.

    Equal counts keep DDP's collective calls in step; the few items left over are dropped (each
    epoch's shuffle drops different ones).
    """
    usable = max(len(items) // num_replicas, 1) * num_replicas
    return items[rank:usable:num_replicas]


class _EpochRankSampler(Sampler):
    """Seed, epoch and DDP rank of a training sampler whose output is a function of (seed, epoch).

    Lightning calls `set_epoch` before every epoch, so an epoch's order and crops are the same
    whether or not the run was interrupted and resumed before it.
    """

    def __init__(self, seed: int = 0, num_replicas: int = 1, rank: int = 0) -> None:
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not in [0, {num_replicas})")
        self.seed = seed
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self._resume = (0, 0)

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose order the next iteration yields."""
        self.epoch = epoch

    def resume(self, epoch: int, skip: int) -> None:
        """Continue `epoch` after its first `skip` items, which a resumed run has trained already."""
        self.epoch = epoch
        self._resume = (epoch, skip)

    def _skipped(self, items: Sequence[T]) -> Sequence[T]:
        """`items` of the current epoch without those trained before a resume."""
        epoch, skip = self._resume
        return items[skip:] if epoch == self.epoch else items


class EpochSampler(_EpochRankSampler):
    """Shuffles `size` indices with a permutation fixed by (seed, epoch); yields (index, epoch).

    With `num_replicas` > 1 (DDP) rank `rank` takes its `rank_share` of the permutation.
    """

    def __init__(self, size: int, seed: int = 0, num_replicas: int = 1, rank: int = 0) -> None:
        super().__init__(seed, num_replicas, rank)
        self.size = size

    def __len__(self) -> int:
        return len(rank_share(range(self.size), self.num_replicas, self.rank))

    def __iter__(self) -> Iterator[tuple[int, int]]:
        order = np.random.default_rng([self.seed, self.epoch]).permutation(self.size)
        share = self._skipped(rank_share(order, self.num_replicas, self.rank))
        return iter([(int(i), self.epoch) for i in share])


def eval_batches(size: int, batch_size: int, num_replicas: int = 1, rank: int = 0) -> list[list[int]]:
    """Consecutive batches of `size` indices, every `num_replicas`-th one from `rank` on.

    Under DDP each evaluation batch is the very batch a single process would form, so every
    clip's score (and every metric over the gathered scores) equals the single-process one.
    Ranks get equally many batches (Lightning needs at least one per rank): the list is padded
    by repeating batches from its start, whose duplicate rows the gathering drops.
    """
    batches = [list(range(i, min(i + batch_size, size))) for i in range(0, size, batch_size)]
    per_rank = -(-len(batches) // num_replicas)
    padded = [batches[i % len(batches)] for i in range(per_rank * num_replicas)]
    return padded[rank::num_replicas]


class BucketBatchSampler(_EpochRankSampler):
    """Batches of clips of similar length, to cut padding; yields lists of (index, epoch).

    Each epoch shuffles the clips with a permutation fixed by (seed, epoch), sorts them by length
    within pools of `pool_size`, cuts each pool into batches of `batch_size` clips or, with
    `max_batch_samples`, of as many clips as fit when padded to the longest, and shuffles the
    batches. With `num_replicas` > 1 (DDP) every rank gets an equal share of distinct batches.
    """

    def __init__(
        self,
        lengths: Sequence[int],
        batch_size: int | None = None,
        max_batch_samples: int | None = None,
        seed: int = 0,
        num_replicas: int = 1,
        rank: int = 0,
        pool_size: int = 1000,
    ) -> None:
        if (batch_size is None) == (max_batch_samples is None):
            raise ValueError("give exactly one of batch_size or max_batch_samples")
        super().__init__(seed, num_replicas, rank)
        self.lengths = list(lengths)
        self.batch_size = batch_size
        self.max_batch_samples = max_batch_samples
        self.pool_size = pool_size

    def _split(self, pool: list[int]) -> list[list[int]]:
        if self.batch_size is not None:
            return [pool[i : i + self.batch_size] for i in range(0, len(pool), self.batch_size)]
        batches, batch = [], []
        for index in pool:  # sorted by length: the newest clip is the longest
            if batch and self.lengths[index] * (len(batch) + 1) > self.max_batch_samples:
                batches.append(batch)
                batch = []
            batch.append(index)
        return batches + ([batch] if batch else [])

    def batches(self) -> list[list[int]]:
        """Batches of clip indices of this rank for the current epoch."""
        rng = np.random.default_rng([self.seed, self.epoch])
        order = rng.permutation(len(self.lengths)).tolist()
        batches = []
        for start in range(0, len(order), self.pool_size):
            pool = sorted(order[start : start + self.pool_size], key=lambda i: self.lengths[i])
            batches.extend(self._split(pool))
        batches = [batches[i] for i in rng.permutation(len(batches))]
        return list(rank_share(batches, self.num_replicas, self.rank))

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        return iter([[(i, self.epoch) for i in batch] for batch in self._skipped(self.batches())])


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Pad a batch: index (B,), wav (B, N), lengths (B,), f0 (B, T') or None, mos, domain (B,), ids.

    Also target (B, K) (NaN where a label is missing), the same labels unrounded as B lists of K
    floats (`labels`, for evaluation), mask (B, K) bool and judge (B,) IDs (None for datasets
    without judges).
    """
    wav, lengths = pad_batch([it["wav"] for it in items])
    f0 = pad_batch([it["f0"] for it in items])[0] if items[0].get("f0") is not None else None
    return {
        "index": torch.tensor([it["index"] for it in items]),
        "wav": wav,
        "lengths": lengths,
        "f0": f0,
        "mos": torch.tensor([it["mos"] for it in items], dtype=torch.float32),
        "target": torch.tensor([it["target"] for it in items], dtype=torch.float32),
        # The labels as read (Python floats): float32 would turn 4.4 into 4.400000095367432.
        "labels": [list(it["target"]) for it in items],
        "mask": torch.tensor([it["mask"] for it in items], dtype=torch.bool),
        "judge": torch.tensor([it["judge"] for it in items]) if items[0]["judge"] is not None else None,
        "domain": torch.tensor([it["domain"] for it in items]),
        "sample_id": [it["sample_id"] for it in items],
        "system_id": [it["system_id"] for it in items],
        "test_set": [it["test_set"] for it in items],
    }


def available_cpus() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(value: Any) -> bool:
    return (
        isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, str) for v in value)
    )


# What each argument of MOSDataModule must be (the words of the error), and the test for it.
_KINDS: dict[str, Callable[[Any], bool]] = {
    "a positive integer": lambda v: _integer(v) and v > 0,
    "an integer >= 0": lambda v: _integer(v) and v >= 0,
    "an integer": _integer,
    "a positive number of seconds or null": lambda v: (
        v is None or (isinstance(v, int | float) and not isinstance(v, bool) and v > 0)
    ),
    "true or false": lambda v: isinstance(v, bool),
    "a list of names or null": lambda v: v is None or _names(v),
    "a non-empty list of names": lambda v: _names(v) and len(v) > 0,
    "'raise' or 'skip'": lambda v: v in ("raise", "skip"),
    "a share in [0, 1)": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1,
}
_ARGUMENTS = {
    "sample_rate": "a positive integer",
    "batch_size": "a positive integer",
    "eval_batch_size": "a positive integer",
    "num_workers": "an integer >= 0",
    "max_train_seconds": "a positive number of seconds or null",
    "preload": "true or false",
    "seed": "an integer",
    "train_domains": "a list of names or null",
    "on_error": "'raise' or 'skip'",
    "bucketing": "true or false",
    "max_batch_seconds": "a positive number of seconds or null",
    "dimensions": "a non-empty list of names",
    "judges": "true or false",
    "valid_share": "a share in [0, 1)",
}


def _check_arguments(corpus: Corpus, args: Mapping[str, Any]) -> None:
    """ValueError naming the first of the data module's `args` of a wrong type or value."""
    for name, kind in _ARGUMENTS.items():
        if not _KINDS[kind](args[name]):
            raise ValueError(f"{name} must be {kind}, got {args[name]!r}")
    unknown = sorted(set(args["train_domains"] or ()) - set(corpus.domains))
    if unknown:
        raise ValueError(f"train_domains {unknown} not in the corpus {corpus.domains}")


class MOSDataModule(L.LightningDataModule):
    """Loaders over a `Corpus`: shuffled training clips, per-domain validation, per-set test.

    A corpus without validation clips gets a seeded validation split of `valid_share` of every
    system's training clips (`carve_valid`); `valid_split_csv` (a run's `valid_split.csv`)
    reuses one instead. The clips moved to validation are `carved_valid`. Only
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
        preload: bool = False,
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
        required_splits: Sequence[str] = SPLITS,
    ) -> None:
        super().__init__()
        # Arguments first: a typo in the config must not wait for every clip to be decoded.
        _check_arguments(corpus, locals())
        self.carved_valid: list[Clip] = []
        if "valid" in required_splits:
            corpus = self._with_valid_split(corpus, valid_share, valid_split_csv, seed)
            if not corpus.split("valid"):
                raise CorpusError(
                    "the corpus has no validation clips; set data.valid_share > 0 to carve some"
                )
        # Validate everything before training starts: stop with the full report, or drop the
        # bad clips and keep the report (`problems`) for the run directory.
        self.problems = validate_corpus(corpus, sample_rate, MIN_SAMPLES, required_splits)
        if self.problems and on_error == "raise":
            raise CorpusProblems(self.problems, "(set data.on_error=skip to drop these clips)")
        bad = {p.sample_id for p in self.problems if p.sample_id is not None}
        corpus = corpus.without(bad)
        if self.problems:
            log.warning("%s\nskipped %d clip(s)", format_report(self.problems), len(bad))
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
        self.preload = preload
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

    def _with_valid_split(self, corpus: Corpus, share: float, split_csv: str | None, seed: int) -> Corpus:
        """The corpus with its validation split read from `split_csv` or carved where it has none."""
        before = {c.sample_id for c in corpus.split("valid")}
        if split_csv:
            corpus = corpus.with_valid(read_valid_split(split_csv), split_csv)
        elif not before and share:
            corpus = carve_valid(corpus, share, seed)
        else:
            return corpus
        self.carved_valid = [c for c in corpus.split("valid") if c.sample_id not in before]
        log.info(
            "validation split: %d training clip(s) of %d systems moved to validation (%s)",
            len(self.carved_valid),
            len({c.system_id for c in self.carved_valid}),
            f"from {split_csv}" if split_csv else f"carved: {share:g} of each system, seed {seed}",
        )
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
            )
        return self._datasets[key]

    def _ranks(self) -> tuple[int, int]:
        """(world size, global rank) of the attached trainer; (1, 0) without one."""
        trainer = self.trainer
        return (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)

    def _loader(self, dataset: ClipDataset, **sampling: Any) -> DataLoader:
        """A loader over `dataset` with `sampling` (sampler and batch_size, or batch_sampler)."""
        return DataLoader(
            dataset,
            collate_fn=collate,
            num_workers=self.num_workers,
            persistent_workers=self.num_workers > 0,
            **sampling,
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
