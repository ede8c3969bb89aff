"""Samplers whose order is a function of (seed, epoch): shuffled clips, length buckets, DDP shares."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np
from torch.utils.data import Sampler

T = TypeVar("T")


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
