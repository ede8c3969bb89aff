"""Utterance- and system-level MOS metrics: the one place where scores are computed.

RMSE, LCC (Pearson), SRCC (Spearman) and KTAU (Kendall's tau-b) at utterance level, and at system
level on per-system means (the mean prediction of a system's clips against the mean of their true
MOS). Averages over test sets weight utterance blocks by clip count and system blocks by system
count. Nothing is rounded.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np
from scipy import stats

METRIC_NAMES = ("rmse", "lcc", "srcc", "ktau")
AVERAGE_KEY = "avg"


def correlations(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """RMSE, LCC, SRCC and KTAU of 1-D arrays `pred` and `true` of equal length (plus `n`)."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    if pred.shape != true.shape or pred.ndim != 1:
        raise ValueError(f"pred and true must be 1-D of equal length, got {pred.shape} and {true.shape}")
    n = int(pred.size)
    rmse = float(np.sqrt(np.mean((pred - true) ** 2))) if n else math.nan
    # Correlations are undefined for fewer than two points or a constant input; report NaN.
    if n < 2 or np.ptp(pred) == 0 or np.ptp(true) == 0:
        return {"rmse": rmse, "lcc": math.nan, "srcc": math.nan, "ktau": math.nan, "n": n}
    return {
        "rmse": rmse,
        "lcc": float(stats.pearsonr(pred, true)[0]),
        "srcc": float(stats.spearmanr(pred, true)[0]),
        "ktau": float(stats.kendalltau(pred, true)[0]),
        "n": n,
    }


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


def weighted_average(blocks: Mapping[str, Mapping[str, Mapping[str, float]]]) -> dict:
    """Average per-set results `{name: {utt|sys: metrics}}`, weighting each block by its `n`."""
    out: dict[str, dict[str, float]] = {}
    for level in ("utt", "sys"):
        items = [b[level] for b in blocks.values()]
        total = sum(int(m["n"]) for m in items)
        avg: dict[str, float] = {"n": total}
        for name in METRIC_NAMES:
            avg[name] = sum(m[name] * m["n"] for m in items) / total if total else math.nan
        out[level] = avg
    return out


def evaluate_sets(
    pred: Sequence[float], true: Sequence[float], systems: Sequence[str], test_sets: Sequence[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """Metric blocks for every test set (sorted by name) plus their weighted average under `avg`."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(test_sets):
        groups.setdefault(name, []).append(i)
    result = {}
    for name in sorted(groups):
        idx = groups[name]
        result[name] = evaluate([pred[i] for i in idx], [true[i] for i in idx], [systems[i] for i in idx])
    result[AVERAGE_KEY] = weighted_average(result)
    return result


def selection_score(blocks: Mapping[str, Mapping[str, Mapping[str, float]]]) -> float:
    """System-level SRCC averaged over sets weighted by system count (NaN sets count as 0)."""
    total = sum(int(b["sys"]["n"]) for b in blocks.values())
    if total == 0:
        return math.nan
    acc = 0.0
    for b in blocks.values():
        srcc = b["sys"]["srcc"]
        acc += (0.0 if math.isnan(srcc) else srcc) * b["sys"]["n"]
    return acc / total


def format_table(results: Mapping[str, Mapping[str, Mapping[str, float]]]) -> str:
    """Render results as the paper's `R1/R2|R3|Avg` table, one row per level and metric."""
    sets = [k for k in results if k != AVERAGE_KEY]
    header = "/".join(sets[:-1]) + ("|" if len(sets) > 1 else "") + sets[-1] + "|Avg"
    lines = [f"{'level':<6} {'metric':<6} {header}"]
    for level in ("utt", "sys"):
        for name in METRIC_NAMES:
            vals = [f"{results[s][level][name]:.3f}" for s in sets]
            cell = "/".join(vals[:-1]) + ("|" if len(vals) > 1 else "") + vals[-1]
            cell += f"|{results[AVERAGE_KEY][level][name]:.3f}"
            lines.append(f"{level:<6} {name:<6} {cell}")
    counts = ", ".join(f"{s}: {results[s]['utt']['n']} clips/{results[s]['sys']['n']} systems" for s in sets)
    lines.append(f"({counts})")
    return "\n".join(lines)
