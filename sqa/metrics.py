"""Utterance- and system-level MOS metrics: the one place where scores are computed.

RMSE, MSE, LCC (Pearson), SRCC (Spearman), KTAU (Kendall's tau-b) and PAIR_ACC (pairwise
preference accuracy) at utterance level, and at system level on per-system means (the mean
prediction of a system's clips against the mean of their true MOS). Averages over test sets weight utterance
blocks by clip count and system blocks by system count. Optional bootstrap 95 % intervals
resample clips (utterance level) or systems (system level). Nothing is rounded.

A metric that is undefined for a set (too few points, constant labels or predictions) is NaN in
its level block, and the set's block says why under `undefined` ({utt|sys: {metric: reason}});
averages leave such sets out and list the sets each metric is averaged over under
`averaged_over` ({utt|sys: {metric: [set, ...]}}); an interval that cannot exist (undefined
metric, too few points for the bootstrap) is None. Level blocks hold numbers only. Written as
JSON (`sqa.core.atomic`), NaN becomes null.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence

import numpy as np
from scipy import stats

from sqa.core import resampling
from sqa.core.resampling import bootstrap_indices, interval, pair_stats, row_pearson

METRIC_NAMES = ("rmse", "mse", "lcc", "srcc", "ktau", "pair_acc")
# Higher is better for these; lower for the error measures.
RANKING_METRICS = ("lcc", "srcc", "ktau", "pair_acc")
ERROR_METRICS = ("rmse", "mse")
LEVELS = ("utt", "sys")
# What a point is at each level, as the reasons for undefined metrics name it.
UNITS = {"utt": "clip", "sys": "system"}
AVERAGE_KEY = "avg"
# Listening-test conditions that are rated but are not systems under test (a MUSHRA hidden
# reference and its anchors): their test sets are reported on their own, outside every average.
ROLE_REFERENCE, ROLE_ANCHOR = "reference", "anchor"
ROLES = (ROLE_REFERENCE, ROLE_ANCHOR)
CI_KEY = "ci"
UNDEFINED_KEY = "undefined"
AVERAGED_OVER_KEY = "averaged_over"
# Fewest points for which a ranking metric is defined (any other metric, an error measure, needs
# one): with two points every correlation is ±1 whatever the data, and pair_acc needs one pair.
MIN_POINTS = {"lcc": 3, "srcc": 3, "ktau": 3, "pair_acc": 2}
# Fewest points for a bootstrap interval (error measures: 2; with one point every resample is
# that point). A resample with at most two distinct points has a correlation of ±1 or none: at
# 5 points 1 resample in 10 is such, at 8 fewer than 1 in 2,000, so the percentile ends are no
# longer set by degenerate draws.
MIN_INTERVAL_POINTS = {"lcc": 8, "srcc": 8, "ktau": 8, "pair_acc": 8}


def pair_acc(pred: np.ndarray, true: np.ndarray) -> float:
    """Fraction of pairs of 1-D `pred`/`true` (n,) untied in `true` that `pred` orders alike (ties ½)."""
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    n = pred.size
    credit = 0.0
    untied = 0
    rows = max(1, resampling.PAIR_BLOCK // max(n, 1))
    for start in range(0, n, rows):
        d_pred = np.sign(pred[start : start + rows, None] - pred[None, :])
        d_true = np.sign(true[start : start + rows, None] - true[None, :])
        mask = d_true != 0
        credit += np.count_nonzero(mask & (d_pred == d_true)) + 0.5 * np.count_nonzero(mask & (d_pred == 0))
        untied += np.count_nonzero(mask)
    # Ordered pairs count every unordered pair twice (and i == j never, as it is tied in `true`),
    # which leaves the fraction unchanged.
    return credit / untied if untied else math.nan


def defined(value: object) -> bool:
    """True for a metric value that is a number, False for None (JSON null) and NaN."""
    return value is not None and not math.isnan(value)  # type: ignore[arg-type]


def count_text(n: int, unit: str) -> str:
    """`n` units in words: "1 system", "2 systems"."""
    return f"{n} {unit}{'' if n == 1 else 's'}"


def undefined_reasons(
    pred: np.ndarray, true: np.ndarray, unit: str = "point", names: Sequence[str] = METRIC_NAMES
) -> dict[str, str]:
    """Why each of `names` is undefined for 1-D `pred`/`true` (n,) of `unit`s; defined ones are absent."""
    n = int(pred.size)
    reasons = {}
    for name in names:
        need = MIN_POINTS.get(name, 1)
        if n < need:
            reasons[name] = f"{count_text(n, unit)} (needs at least {need})"
        elif not (np.isfinite(pred).all() and np.isfinite(true).all()):
            reasons[name] = "some predictions or labels are not finite"
        elif name in MIN_POINTS and np.ptp(true) == 0:
            reasons[name] = f"every {unit} has the same true score"
        elif name in MIN_POINTS and name != "pair_acc" and np.ptp(pred) == 0:
            # pair_acc stays defined: constant predictions tie every pair (credit ½ each).
            reasons[name] = f"every {unit} has the same prediction"
    return reasons


def correlations(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """RMSE, MSE, LCC, SRCC, KTAU and PAIR_ACC of 1-D arrays `pred` and `true` (n,) (plus `n`).

    Metrics that are undefined for these points (see `undefined_reasons`) are NaN.
    """
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    if pred.shape != true.shape or pred.ndim != 1:
        raise ValueError(f"pred and true must be 1-D of equal length, got {pred.shape} and {true.shape}")
    n = int(pred.size)
    reasons = undefined_reasons(pred, true)
    compute = {
        "rmse": lambda: float(np.sqrt(np.mean((pred - true) ** 2))),
        "mse": lambda: float(np.mean((pred - true) ** 2)),
        "lcc": lambda: float(stats.pearsonr(pred, true)[0]),
        "srcc": lambda: float(stats.spearmanr(pred, true)[0]),
        "ktau": lambda: float(stats.kendalltau(pred, true)[0]),
        "pair_acc": lambda: pair_acc(pred, true),
    }
    out: dict = {name: math.nan if name in reasons else fn() for name, fn in compute.items()}
    out["n"] = n
    return out


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
        out["lcc"] = row_pearson(p, t)
    if "srcc" in names:
        out["srcc"] = row_pearson(stats.rankdata(p, axis=1), stats.rankdata(t, axis=1))
    if "ktau" in names or "pair_acc" in names:
        out["ktau"], out["pair_acc"] = pair_stats(pred, true, idx)
    return {name: out[name] for name in names}


def system_means(
    pred: Sequence[float], true: Sequence[float], systems: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Per-system mean prediction and mean true MOS, systems in sorted order.

    Each mean is the exact mean of the system's values, correctly rounded (`statistics.mean`),
    so it does not depend on the order of the clips: systems whose ratings average to the same
    number tie, and a constant predictor's system means are exactly that constant, which the
    ranking metrics of `undefined_reasons` then see as constant rather than as last-bit noise.
    """
    values: dict[str, tuple[list[float], list[float]]] = {}
    for p, t, s in zip(pred, true, systems, strict=True):
        ps, ts = values.setdefault(s, ([], []))
        ps.append(float(p))
        ts.append(float(t))
    names = sorted(values)
    p_mean = np.array([statistics.mean(values[s][0]) for s in names])
    t_mean = np.array([statistics.mean(values[s][1]) for s in names])
    return p_mean, t_mean, names


def evaluate(pred: Sequence[float], true: Sequence[float], systems: Sequence[str]) -> dict[str, dict]:
    """Utterance (`utt`) and system (`sys`) metric blocks for one test set.

    Plus `undefined` ({level: {metric: reason}}) where a metric is undefined (NaN).
    """
    sys_pred, sys_true, _ = system_means(pred, true, systems)
    points = {
        "utt": (np.asarray(pred, dtype=np.float64), np.asarray(true, dtype=np.float64)),
        "sys": (sys_pred, sys_true),
    }
    out: dict[str, dict] = {level: correlations(p, t) for level, (p, t) in points.items()}
    reasons = {level: undefined_reasons(p, t, UNITS[level]) for level, (p, t) in points.items()}
    if any(reasons.values()):
        out[UNDEFINED_KEY] = {level: r for level, r in reasons.items() if r}
    return out


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


def intervals(
    draws: Mapping[str, Mapping[str, np.ndarray]],
    block: Mapping[str, Mapping],
    points: Mapping[str, Mapping[str, int]] | None = None,
) -> dict[str, dict[str, list[float] | None]]:
    """The `ci` entry {utt|sys: {metric: [lo, hi] or None}} of `block` from its resamples `draws`.

    None where the metric is undefined in `block`, where it rests on fewer points than
    `MIN_INTERVAL_POINTS` (`points[level][metric]`, else the block's `n`) or where no resample
    defines it.
    """
    out: dict[str, dict[str, list[float] | None]] = {}
    for level in LEVELS:
        out[level] = {}
        for name in METRIC_NAMES:
            n = points[level][name] if points is not None else int(block[level]["n"])
            ci = interval(draws[level][name]) if defined(block[level][name]) else [math.nan, math.nan]
            enough = n >= MIN_INTERVAL_POINTS.get(name, 2)
            out[level][name] = ci if enough and not math.isnan(ci[0]) else None
    return out


def weighted_average(
    blocks: Mapping[str, Mapping[str, Mapping]],
    names: Sequence[str] = METRIC_NAMES,
    over: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> dict:
    """Average per-set results `{name: {utt|sys: metrics}}`, weighting each block by its `n`.

    Each metric is averaged over the sets `over[level][metric]`, by default those where it is
    defined; `averaged_over` ({level: {metric: sets}}) lists them, and a metric defined in no set
    is NaN with its reason under `undefined`. `n` counts every set's points. Metric values may be
    floats or equal-length arrays (resamples, which need `over`), averaged elementwise.
    """
    out: dict[str, dict] = {}
    averaged_over: dict[str, dict[str, list[str]]] = {}
    undefined: dict[str, dict[str, str]] = {}
    for level in LEVELS:
        avg: dict = {"n": sum(int(b[level]["n"]) for b in blocks.values())}
        used_by_name: dict[str, list[str]] = {}
        reasons: dict[str, str] = {}
        for name in names:
            used = (
                list(over[level][name])
                if over is not None
                else [s for s, b in blocks.items() if defined(b[level][name])]
            )
            weight = sum(int(blocks[s][level]["n"]) for s in used)
            if used:
                avg[name] = sum(blocks[s][level][name] * blocks[s][level]["n"] for s in used) / weight
            else:
                avg[name] = math.nan
                reasons[name] = "undefined in every set"
            used_by_name[name] = used
        averaged_over[level] = used_by_name
        if reasons:
            undefined[level] = reasons
        out[level] = avg
    out[AVERAGED_OVER_KEY] = averaged_over
    if undefined:
        out[UNDEFINED_KEY] = undefined
    return out


def set_indices(test_sets: Sequence[str]) -> dict[str, list[int]]:
    """Positions of each test set's clips in `test_sets` (n,), sets sorted by name."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(test_sets):
        groups.setdefault(name, []).append(i)
    return {name: groups[name] for name in sorted(groups)}


def evaluate_sets(
    pred: Sequence[float],
    true: Sequence[float],
    systems: Sequence[str],
    test_sets: Sequence[str],
    bootstrap: int = 0,
    seed: int = 0,
    apart: Collection[str] = (),
) -> dict[str, dict[str, dict]]:
    """Metric blocks for every test set (sorted by name) plus their weighted average under `avg`.

    Sets named in `apart` (a listening test's references and anchors) get their blocks but are
    left out of the average.

    With `bootstrap` resamples (0: none), every block also holds `ci`: {utt|sys: {metric: [lo, hi]}},
    percentile 95 % intervals (None where one cannot exist, see `intervals`); the average's
    resamples every test set independently and averages those its metric is averaged over.
    """
    rng = np.random.default_rng(seed)
    result: dict[str, dict] = {}
    draws = {}
    for name, idx in set_indices(test_sets).items():
        p, t, s = [pred[i] for i in idx], [true[i] for i in idx], [systems[i] for i in idx]
        result[name] = evaluate(p, t, s)
        if bootstrap:
            draws[name] = bootstrap_metrics(p, t, s, rng, bootstrap)
            result[name][CI_KEY] = intervals(draws[name], result[name])
    headline = {name: block for name, block in result.items() if name not in apart}
    average = weighted_average(headline)
    if bootstrap:
        over = average[AVERAGED_OVER_KEY]
        points = {
            level: {m: sum(int(result[s][level]["n"]) for s in sets) for m, sets in over[level].items()}
            for level in LEVELS
        }
        headline_draws = {name: d for name, d in draws.items() if name not in apart}
        average[CI_KEY] = intervals(weighted_average(headline_draws, over=over), average, points)
    result[AVERAGE_KEY] = average
    return result
