"""Utterance- and system-level MOS metrics: the one place where scores are computed.

RMSE, MSE, LCC (Pearson), SRCC (Spearman), KTAU (Kendall's tau-b) and PAIR_ACC (pairwise
preference accuracy) at utterance level, and at system level on per-system means (the mean
prediction of a system's clips against the mean of their true MOS). Averages over test sets weight utterance
blocks by clip count and system blocks by system count. Optional bootstrap 95 % intervals
resample clips (utterance level) or systems (system level). Nothing is rounded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

METRIC_NAMES = ("rmse", "mse", "lcc", "srcc", "ktau", "pair_acc")
# Higher is better for these; lower for the error measures.
RANKING_METRICS = ("lcc", "srcc", "ktau", "pair_acc")
ERROR_METRICS = ("rmse", "mse")
LEVELS = ("utt", "sys")
AVERAGE_KEY = "avg"
CI_KEY = "ci"
CI_PERCENTILES = (2.5, 97.5)
# Elements per block of the O(n²) pairwise computations: bounds their memory (32 MB of float64)
# whatever the number of clips.
PAIR_BLOCK = 1 << 22


def pair_acc(pred: np.ndarray, true: np.ndarray) -> float:
    """Fraction of pairs of 1-D `pred`/`true` (n,) untied in `true` that `pred` orders alike (ties ½)."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    n = pred.size
    credit = 0.0
    untied = 0
    rows = max(1, PAIR_BLOCK // max(n, 1))
    for start in range(0, n, rows):
        d_pred = np.sign(pred[start : start + rows, None] - pred[None, :])
        d_true = np.sign(true[start : start + rows, None] - true[None, :])
        mask = d_true != 0
        credit += np.count_nonzero(mask & (d_pred == d_true)) + 0.5 * np.count_nonzero(mask & (d_pred == 0))
        untied += np.count_nonzero(mask)
    # Ordered pairs count every unordered pair twice (and i == j never, as it is tied in `true`),
    # which leaves the fraction unchanged.
    return credit / untied if untied else math.nan


def correlations(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """RMSE, MSE, LCC, SRCC, KTAU and PAIR_ACC of 1-D arrays `pred` and `true` (n,) (plus `n`)."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    if pred.shape != true.shape or pred.ndim != 1:
        raise ValueError(f"pred and true must be 1-D of equal length, got {pred.shape} and {true.shape}")
    n = int(pred.size)
    mse = float(np.mean((pred - true) ** 2)) if n else math.nan
    rmse = math.sqrt(mse)
    acc = pair_acc(pred, true)
    # Correlations are undefined for fewer than two points or a constant input; report NaN.
    if n < 2 or np.ptp(pred) == 0 or np.ptp(true) == 0:
        return {
            "rmse": rmse,
            "mse": mse,
            "lcc": math.nan,
            "srcc": math.nan,
            "ktau": math.nan,
            "pair_acc": acc,
            "n": n,
        }
    return {
        "rmse": rmse,
        "mse": mse,
        "lcc": float(stats.pearsonr(pred, true)[0]),
        "srcc": float(stats.spearmanr(pred, true)[0]),
        "ktau": float(stats.kendalltau(pred, true)[0]),
        "pair_acc": acc,
        "n": n,
    }


def _row_pearson(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of each row pair of `a` and `b` (R, m) → (R,); NaN for constant rows."""
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    # A constant row's centred values need not be exactly 0 (rounding of the mean): test the input.
    constant = (np.ptp(a, axis=1) == 0) | (np.ptp(b, axis=1) == 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * b).sum(axis=1) / np.sqrt((a * a).sum(axis=1) * (b * b).sum(axis=1))
    return np.where(constant, math.nan, np.clip(r, -1.0, 1.0))


def _tied_pairs(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Pairs tied in `values` (n,) within each multiset of clip `counts` (R, n) → (R,)."""
    _, group = np.unique(values, return_inverse=True)
    n_groups = int(group.max()) + 1
    r = counts.shape[0]
    flat = (group[None, :] + n_groups * np.arange(r)[:, None]).ravel()
    per_value = np.bincount(flat, weights=counts.ravel(), minlength=r * n_groups).reshape(r, n_groups)
    return ((per_value**2).sum(axis=1) - counts.sum(axis=1)) / 2


def _pair_stats(pred: np.ndarray, true: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
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
    untied_pred = total - _tied_pairs(pred, counts)
    untied_true = total - _tied_pairs(true, counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        tau = score / np.sqrt(untied_pred * untied_true)
        # Pairs untied in the truth are concordant, discordant or tied in pred (credit ½), so
        # pair_acc = (concordant + ties/2) / untied_true = (1 + score / untied_true) / 2.
        acc = 0.5 * (1.0 + score / untied_true)
    tau = np.where((untied_pred > 0) & (untied_true > 0), np.clip(tau, -1.0, 1.0), math.nan)
    return tau, np.where(untied_true > 0, acc, math.nan)


def resampled_metrics(
    pred: np.ndarray, true: np.ndarray, idx: np.ndarray, names: Sequence[str] = METRIC_NAMES
) -> dict[str, np.ndarray]:
    """Metrics `names` of every resample: row r of `idx` (R, m) indexes `pred`/`true` (n,); each (R,)."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    p, t = pred[idx], true[idx]
    out: dict[str, np.ndarray] = {}
    if "rmse" in names or "mse" in names:
        out["mse"] = np.mean((p - t) ** 2, axis=1)
        out["rmse"] = np.sqrt(out["mse"])
    if "lcc" in names:
        out["lcc"] = _row_pearson(p, t)
    if "srcc" in names:
        out["srcc"] = _row_pearson(stats.rankdata(p, axis=1), stats.rankdata(t, axis=1))
    if "ktau" in names or "pair_acc" in names:
        out["ktau"], out["pair_acc"] = _pair_stats(pred, true, idx)
    return {name: out[name] for name in names}


def bootstrap_indices(rng: np.random.Generator, n: int, resamples: int) -> np.ndarray:
    """Indices (resamples, n) drawn uniformly with replacement from range(n)."""
    return rng.integers(0, n, size=(resamples, n))


def system_means(
    pred: Sequence[float], true: Sequence[float], systems: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per-system mean prediction and mean true MOS, systems in sorted order."""
    sums: dict[str, list[float]] = {}
    for p, t, s in zip(pred, true, systems, strict=True):
        acc = sums.setdefault(s, [0.0, 0.0, 0])
        acc[0] += float(p)
        acc[1] += float(t)
        acc[2] += 1
    names = sorted(sums)
    p_mean = np.array([sums[s][0] / sums[s][2] for s in names])
    t_mean = np.array([sums[s][1] / sums[s][2] for s in names])
    return p_mean, t_mean, names


def evaluate(
    pred: Sequence[float], true: Sequence[float], systems: Sequence[str]
) -> dict[str, dict[str, float]]:
    """Utterance (`utt`) and system (`sys`) metric blocks for one test set."""
    sys_pred, sys_true, _ = system_means(pred, true, systems)
    return {
        "utt": correlations(np.asarray(pred), np.asarray(true)),
        "sys": correlations(sys_pred, sys_true),
    }


def bootstrap_metrics(
    pred: Sequence[float],
    true: Sequence[float],
    systems: Sequence[str],
    rng: np.random.Generator,
    resamples: int,
    names: Sequence[str] = METRIC_NAMES,
) -> dict[str, dict]:
    """Resampled metrics of one test set: {utt|sys: {metric: (resamples,) array, "n": count}}.

    Utterance level resamples clips, system level resamples the per-system mean pairs.
    """
    sys_pred, sys_true, _ = system_means(pred, true, systems)
    out = {}
    for level, (p, t) in zip(LEVELS, ((pred, true), (sys_pred, sys_true)), strict=True):
        idx = bootstrap_indices(rng, len(p), resamples)
        out[level] = {**resampled_metrics(p, t, idx, names), "n": len(p)}
    return out


def interval(values: np.ndarray) -> list[float]:
    """Percentile 95 % interval [lo, hi] of `values` (R,) ignoring NaNs; [nan, nan] if all are NaN."""
    values = np.asarray(values, dtype=np.float64)
    values = values[~np.isnan(values)]
    if values.size == 0:
        return [math.nan, math.nan]
    lo, hi = np.percentile(values, CI_PERCENTILES)
    return [float(lo), float(hi)]


def intervals(draws: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, list[float]]]:
    """The `ci` entry {utt|sys: {metric: [lo, hi]}} of resampled metrics {utt|sys: {metric: (R,)}}."""
    return {level: {name: interval(draws[level][name]) for name in METRIC_NAMES} for level in LEVELS}


def weighted_average(
    blocks: Mapping[str, Mapping[str, Mapping]], names: Sequence[str] = METRIC_NAMES
) -> dict:
    """Average per-set results `{name: {utt|sys: metrics}}`, weighting each block by its `n`.

    Metric values may be floats or equal-length arrays (resamples), averaged elementwise.
    """
    out: dict[str, dict] = {}
    for level in LEVELS:
        items = [b[level] for b in blocks.values()]
        total = sum(int(m["n"]) for m in items)
        avg: dict = {"n": total}
        for name in names:
            avg[name] = sum(m[name] * m["n"] for m in items) / total if total else math.nan
        out[level] = avg
    return out


def evaluate_sets(
    pred: Sequence[float],
    true: Sequence[float],
    systems: Sequence[str],
    test_sets: Sequence[str],
    bootstrap: int = 0,
    seed: int = 0,
) -> dict[str, dict[str, dict]]:
    """Metric blocks for every test set (sorted by name) plus their weighted average under `avg`.

    With `bootstrap` resamples (0: none), every block also holds `ci`: {utt|sys: {metric: [lo, hi]}},
    percentile 95 % intervals; the average's resamples every test set independently and averages.
    """
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(test_sets):
        groups.setdefault(name, []).append(i)
    rng = np.random.default_rng(seed)
    result: dict[str, dict] = {}
    draws = {}
    for name in sorted(groups):
        idx = groups[name]
        p, t, s = [pred[i] for i in idx], [true[i] for i in idx], [systems[i] for i in idx]
        result[name] = evaluate(p, t, s)
        if bootstrap:
            draws[name] = bootstrap_metrics(p, t, s, rng, bootstrap)
            result[name][CI_KEY] = intervals(draws[name])
    result[AVERAGE_KEY] = weighted_average(result)
    if bootstrap:
        result[AVERAGE_KEY][CI_KEY] = intervals(weighted_average(draws))
    return result


def undefined(value: float | None) -> bool:
    """Whether a metric value is undefined (None or NaN, e.g. a correlation of a constant input)."""
    return value is None or math.isnan(value)


def selection_score(
    blocks: Mapping[str, Mapping[str, Mapping[str, float]]], metric: str = "srcc", level: str = "sys"
) -> float:
    """`metric` at `level` averaged over the sets' blocks, weighted by their count `n` at that level.

    An undefined ranking metric counts as 0 (chance); an undefined error makes the score NaN,
    which checkpointing ranks last.
    """
    total = sum(int(b[level]["n"]) for b in blocks.values())
    if total == 0:
        return math.nan
    acc = 0.0
    for b in blocks.values():
        value = b[level][metric]
        if undefined(value):
            if metric not in RANKING_METRICS:
                return math.nan
            value = 0.0
        acc += value * b[level]["n"]
    return acc / total


def _cell(block: Mapping[str, Mapping], level: str, name: str) -> str:
    """One value, followed by its interval `[lo, hi]` when the block has one."""
    text = f"{block[level][name]:.3f}"
    if CI_KEY in block:
        lo, hi = block[CI_KEY][level][name]
        text += f" [{lo:.2f}, {hi:.2f}]"
    return text


def format_table(results: Mapping[str, Mapping[str, Mapping]]) -> str:
    """Render results as the paper's `R1/R2|R3|Avg` table, one row per level and metric."""
    sets = [k for k in results if k != AVERAGE_KEY]
    header = "/".join(sets[:-1]) + ("|" if len(sets) > 1 else "") + sets[-1] + "|Avg"
    lines = [f"{'level':<6} {'metric':<8} {header}"]
    for level in LEVELS:
        for name in METRIC_NAMES:
            vals = [_cell(results[s], level, name) for s in sets]
            cell = "/".join(vals[:-1]) + ("|" if len(vals) > 1 else "") + vals[-1]
            cell += "|" + _cell(results[AVERAGE_KEY], level, name)
            lines.append(f"{level:<6} {name:<8} {cell}")
    counts = ", ".join(f"{s}: {results[s]['utt']['n']} clips/{results[s]['sys']['n']} systems" for s in sets)
    lines.append(f"({counts})")
    if CI_KEY in results[AVERAGE_KEY]:
        lines.append("[lo, hi]: bootstrap 95 % intervals")
    return "\n".join(lines)
