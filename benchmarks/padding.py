"""Padding waste: fraction of padded samples per epoch, random batches vs length-bucketed batches.

    .venv/bin/python benchmarks/padding.py

Two length distributions of 4,000 clips at 16 kHz: log-normal around 5 s (like SingMOS-Pro) and a
long-tailed one (Pareto, many short clips, a few of several minutes). Batches of 15 clips, and
batches capped at 75 s of padded audio. Pure arithmetic on lengths: no timing, no noise.
"""

from __future__ import annotations

import numpy as np

from sqa.training.datamodule import BucketBatchSampler

SR = 16000


def padded_fraction(batches: list[list[int]], lengths: list[int]) -> float:
    """Padded samples over all samples of the padded batches."""
    padded = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - sum(lengths[i] for b in batches for i in b) / padded


def main() -> None:
    """Print the padded fraction of each batching for each distribution."""
    rng = np.random.default_rng(0)
    distributions = {
        "log-normal, mean about 5 s": rng.lognormal(np.log(5 * SR), 0.5, 4000),
        "long-tailed (Pareto, 1 s minimum)": (rng.pareto(1.5, 4000) + 1) * SR,
    }
    print(f"{'distribution':<36} {'random x15':>11} {'bucketed x15':>13} {'bucketed <=75 s':>16}")
    for name, raw in distributions.items():
        lengths = raw.astype(int).tolist()
        order = np.random.default_rng(1).permutation(len(lengths)).tolist()
        random = [order[i : i + 15] for i in range(0, len(order), 15)]
        by_count = BucketBatchSampler(lengths, batch_size=15).batches()
        by_seconds = BucketBatchSampler(lengths, max_batch_samples=75 * SR).batches()
        fractions = [padded_fraction(b, lengths) for b in (random, by_count, by_seconds)]
        print(f"{name:<36} {fractions[0]:>11.1%} {fractions[1]:>13.1%} {fractions[2]:>16.1%}")


if __name__ == "__main__":
    main()
