"""Vectorised statistics of many bootstrap resamples at once, and percentile intervals.

Kernels behind `sqa.metrics`'s intervals and `sqa.reports.compare`'s paired bootstrap: each takes a
resample matrix `idx` (R, m) of indices into the n points and returns one value per resample.
"""

from __future__ import annotations

import math

import numpy as np

CI_PERCENTILES = (2.5, 97.5)
# Elements per block of the O(n²) pairwise computations: bounds their memory (32 MB of float64)
# whatever the number of clips.
PAIR_BLOCK = 1 << 22


def interval(values: np.ndarray) -> list[float]:
    """Percentile 95 % interval [lo, hi] of `values` (R,) ignoring NaNs; [nan, nan] if all are NaN."""
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return [math.nan, math.nan]
    lo, hi = np.percentile(values, CI_PERCENTILES)
    return [float(lo), float(hi)]


def two_sided_p(values: np.ndarray) -> float:
    """Two-sided bootstrap p of a difference from its resamples `values` (R,); NaN without any.

    2·min(share ≤ 0, share ≥ 0), at most 1: sqa-compare's runs and sqa-score's systems alike.
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return math.nan
    return min(1.0, 2 * min(float(np.mean(values <= 0)), float(np.mean(values >= 0))))


def row_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row pair of `a` and `b` (R, m) → (R,); NaN for constant rows.

    `scipy.stats.pearsonr(a, b, axis=1)` gives the same values (to 1e-16) and NaN for constant
    rows too, but is about 9 times slower on 1,000 resamples of 2,000 clips (it checks and
    warns per row); bootstrap intervals call this for every set, level and correlation.
    """
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    # A constant row's centred values need not be exactly 0 (rounding of the mean): test the input.
    constant = (np.ptp(a, axis=1) == 0) | (np.ptp(b, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return np.where(constant, math.nan, np.clip(r, -1.0, 1.0))


def tied_pairs(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Pairs tied in `values` (n,) within each multiset of clip `counts` (R, n) → (R,)."""
    _, group = np.unique(values, return_inverse=True)
    n_groups = int(group.max()) + 1
    r = counts.shape[0]
    flat = (group[None, :] + n_groups * np.arange(r)[:, None]).ravel()
    per_value = np.bincount(flat, weights=counts.ravel(), minlength=r * n_groups).reshape(r, n_groups)
    return ((per_value**2).sum(axis=1) - counts.sum(axis=1)) / 2


def pair_stats(pred: np.ndarray, true: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Kendall's tau-b and pair_acc of the resamples `idx` (R, m) of `pred`/`true` (n,), each (R,)."""
    r, m = idx.shape
    n = pred.size
    # A resample is a multiset of the n clips with counts c (R, n); its concordant minus
    # discordant pairs are c·S·c / 2 with S[k, l] = sign(Δpred)·sign(Δtrue): one matrix product
    # per column block instead of O(m²) work per resample. Counts and S are small integers, so
    # float32 products and sums are exact (below 2**24).
    counts = np.bincount((idx + n * np.arange(r)[:, None]).ravel(), minlength=r * n).reshape(r, n)
    counts = counts.astype(np.float32)
    score = np.zeros(r)
    cols = max(1, PAIR_BLOCK // max(n, 1))
    for start in range(0, n, cols):
        block = slice(start, start + cols)
        s = np.sign(pred[:, None] - pred[None, block]) * np.sign(true[:, None] - true[None, block])
        score += np.einsum("rk,rk->r", counts[:, block], counts @ s.astype(np.float32), dtype=np.float64)
    score /= 2
    total = m * (m - 1) / 2
    untied_pred = total - tied_pairs(pred, counts)
    untied_true = total - tied_pairs(true, counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = score / np.sqrt(untied_pred * untied_true)
        # Pairs untied in the truth are concordant, discordant or tied in pred (credit ½), so
        # pair_acc = (concordant + ties/2) / untied_true = (1 + score / untied_true) / 2.
        acc = 0.5 * (1.0 + score / untied_true)
    tau = np.where((untied_pred > 0) & (untied_true > 0), np.clip(tau, -1.0, 1.0), math.nan)
    return tau, np.where(untied_true > 0, acc, math.nan)


def bootstrap_indices(rng: np.random.Generator, n: int, resamples: int) -> np.ndarray:
    """Indices (resamples, n) drawn uniformly with replacement from range(n)."""
    return rng.integers(0, n, size=(resamples, n))
