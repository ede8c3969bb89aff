"""Cost of the bootstrap intervals of the test phase, per metric, against a per-resample scipy loop.

    .venv/bin/python benchmarks/bootstrap.py [--resamples 1000]

Synthetic predictions on test sets sized like SingMOS-Pro's (2,091/1,540/376 clips, 31/41/15
systems; 4,007 clips in all). Prints the time of `evaluate_sets` without and with intervals, the
time of each metric's resamples on the largest set, and scipy's Kendall's tau over a few resamples
scaled to the same count.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy import stats

from sqa import metrics

SETS = {"test1": (2091, 31), "test2": (1540, 41), "test3": (376, 15)}


def simulated(rng: np.random.Generator) -> tuple[list[float], list[float], list[str], list[str]]:
    """Predictions, true MOS (in steps of 0.2, so with ties), systems and test set of every clip."""
    pred, true, systems, sets = [], [], [], []
    for name, (clips, n_systems) in SETS.items():
        quality = rng.uniform(1.5, 4.5, n_systems)
        system = rng.integers(0, n_systems, clips)
        mos = np.round((quality[system] + rng.normal(0, 0.5, clips)) * 5) / 5
        pred += list(mos + rng.normal(0, 0.6, clips))
        true += list(mos)
        systems += [f"{name}-sys{s}" for s in system]
        sets += [name] * clips
    return pred, true, systems, sets


def seconds(fn, *args, **kwargs) -> float:
    """Wall-clock seconds of one call."""
    start = time.perf_counter()
    fn(*args, **kwargs)
    return time.perf_counter() - start


def main() -> None:
    """Print the timings."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args()
    pred, true, systems, sets = simulated(np.random.default_rng(0))
    t = seconds(metrics.evaluate_sets, pred, true, systems, sets)
    print(f"evaluate_sets, {len(pred)} clips, no intervals: {t:.2f} s")
    t = seconds(metrics.evaluate_sets, pred, true, systems, sets, bootstrap=args.resamples)
    print(f"evaluate_sets, {len(pred)} clips, {args.resamples} resamples: {t:.2f} s")
    n = SETS["test1"][0]
    p, y = np.array(pred[:n]), np.array(true[:n])
    idx = metrics.bootstrap_indices(np.random.default_rng(0), n, args.resamples)
    for name in metrics.METRIC_NAMES:
        t = seconds(metrics.resampled_metrics, p, y, idx, (name,))
        print(f"  {name:<8} {n} clips x {args.resamples}: {t:.2f} s")
    loop = seconds(lambda: [stats.kendalltau(p[i], y[i]) for i in idx[:20]]) * args.resamples / 20
    print(f"  scipy.stats.kendalltau per resample, scaled to {args.resamples}: {loop:.2f} s")


if __name__ == "__main__":
    main()
