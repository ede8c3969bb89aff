"""Significance of a paired difference B − A: the bootstrap's summary of one run a side, Welch's t of seeds.

`sqa.reports.compare`'s docstring gives the method: which variances enter and why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats

from sqa import metrics
from sqa.core import resampling

# Run values closer than this (relative to their size, at least 1) are the same value: runs whose
# predictions differ by float rounding only have no seed-to-seed spread.
SPREAD_TOLERANCE = 1e-12


def summarise(observed: float, diffs: np.ndarray) -> dict[str, Any]:
    """Observed difference, 95 % interval, two-sided p and significance of resampled `diffs` (R,).

    `resamples` counts the resamples where both runs' metric is defined, which the p-value and
    interval rest on; `ties` those of them where the difference is exactly 0.
    """
    valid = diffs[~np.isnan(diffs)]
    lo, hi = metrics.interval(valid)
    p = resampling.two_sided_p(valid)
    return {
        "diff": observed,
        "ci": [lo, hi],
        "p": float(p),
        "significant": bool(lo > 0 or hi < 0),
        "resamples": int(valid.size),
        "ties": int(np.count_nonzero(valid == 0)),
    }


def welch(
    observed: float, runs_a: Sequence[float], runs_b: Sequence[float], diffs: np.ndarray
) -> dict[str, Any]:
    """Welch's t-test of B − A = `observed`, the difference of the side means, against seed and clip variance.

    `runs_a`, `runs_b`: each run's value (two or more a side); `diffs` (R,): B − A on each clip
    resample (NaN where undefined). Returns diff, ci, p, significant, resamples, se and its parts
    seed_se and clip_se, and df; the interval and p are NaN where fewer than two resamples
    define the difference. Where a side's runs all score alike (`has_spread`), df is None and
    `df_undefined` says why: Welch's degrees of freedom then follow the other side alone.
    """
    valid = diffs[~np.isnan(diffs)]
    sides = (runs_a, runs_b)
    seed_parts = [float(np.var(runs, ddof=1)) / len(runs) for runs in sides]
    clip_var = float(np.var(valid, ddof=1)) if valid.size > 1 else math.nan
    var = sum(seed_parts) + clip_var
    flat = [(name, runs) for name, runs in zip("AB", sides, strict=True) if not has_spread(runs)]
    undefined = None
    # Welch–Satterthwaite; the clip variance, known from the resamples, adds nothing below. A side
    # without spread adds nothing either: its variance of 0 is taken as exact, as for the constant
    # predictor, whose runs are equal by construction (no spread on either side: a normal interval).
    spread = sum(
        v**2 / (len(runs) - 1) for v, runs in zip(seed_parts, sides, strict=True) if has_spread(runs)
    )
    df = var**2 / spread if spread > 0 else math.inf
    if flat:
        # Then the df follows the other side alone and runs to millions where the clip variance
        # dominates: a number that says nothing to a reader, so the row says why instead.
        said = " and ".join(f"{name}'s {len(runs)} runs all score {runs[0]:.3f}" for name, runs in flat)
        other = "no side" if len(flat) == 2 else "the other side's runs alone"
        undefined = (
            f"{said}: no seed-to-seed spread there, taken as exact, so Welch's degrees of freedom "
            f"follow {other} (the interval and p use them; a normal interval where they are many)"
        )
    if var > 0:
        half = float(stats.t.ppf(0.975, df)) * math.sqrt(var)
        p = float(2 * stats.t.sf(abs(observed) / math.sqrt(var), df))
    elif var == 0:
        # Every run and every resample agree: the difference has no spread to be tested against.
        half, p = 0.0, 1.0 if observed == 0 else 0.0
    else:
        half, p = math.nan, math.nan
    lo, hi = observed - half, observed + half
    return {
        "diff": observed,
        "ci": [lo, hi],
        "p": p,
        "significant": bool(lo > 0 or hi < 0),
        "resamples": int(valid.size),
        "se": math.sqrt(var),
        "seed_se": math.sqrt(sum(seed_parts)),
        "clip_se": math.sqrt(clip_var),
        "df": df if undefined is None else None,
        **({} if undefined is None else {"df_undefined": undefined}),
    }


def has_spread(runs: Sequence[float]) -> bool:
    """Whether a side's run values differ beyond float rounding (identical runs, or ranks alike, do not)."""
    values = np.asarray(runs, dtype=np.float64)
    return bool(np.ptp(values) > SPREAD_TOLERANCE * max(1.0, float(np.max(np.abs(values)))))
