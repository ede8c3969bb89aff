"""Paired bootstrap comparison of two runs on the same test clips.

    sqa-compare A/predictions.csv B/predictions.csv [--metric srcc] [--resamples 1000] [--seed 0]
                [--json out.json]

For every test set and the weighted average, at utterance and system level, each resample draws
clips (systems) once and scores both runs on them, so the difference B − A is bootstrapped with
the runs' shared noise cancelled. Reported: the observed difference, its percentile 95 % interval
and p = 2·min(share of resampled differences ≤ 0, share ≥ 0) (capped at 1); "significant" when the
interval excludes 0. For rmse and mse a negative difference means B is better.

Resamples where B − A is exactly 0 (ties: both runs rank the drawn points alike, common at system
level with few systems) count on both sides of p, which keeps p consistent with the interval
but lets it reach 1 beside an interval that is not [0, 0]; the output gives their share.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from sqa import metrics
from sqa.core import artefacts
from sqa.core.atomic import atomic_write_text, json_text

UNDEFINED_COMPARISON = {
    "diff": math.nan,
    "ci": None,
    "p": math.nan,
    "significant": False,
    "resamples": 0,
    "ties": 0,
}
TIES_NOTE = (
    "ties: the share of resamples where B - A is exactly 0 (both runs rank the drawn clips or systems "
    "alike, common with few systems). p counts them on both sides, so where they are many p is high, "
    "up to 1, beside an interval that is not [0, 0]: on those points the runs cannot be told apart."
)


def read_predictions(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Rows of a predictions.csv keyed by (test_set, sample_id), in file order."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for line, row in enumerate(artefacts.read_predictions(path), start=2):
        key = (row["test_set"], row["sample_id"])
        if key in rows:
            raise ValueError(f"{path}:{line}: sample {key[1]!r} of {key[0]!r} appears twice")
        rows[key] = row
    return rows


def align(path_a: str | Path, path_b: str | Path) -> dict[str, list]:
    """Both runs' predictions on the same clips: lists pred_a, pred_b, mos, system_id, test_set.

    The runs must cover the same (test_set, sample_id) pairs with the same system and true MOS;
    otherwise the error names the file and the first mismatching sample.
    """
    rows_a, rows_b = read_predictions(path_a), read_predictions(path_b)
    for key in rows_b:
        if key not in rows_a:
            raise ValueError(f"{path_b}: sample {key[1]!r} of test set {key[0]!r} is not in {path_a}")
    out: dict[str, list] = {"pred_a": [], "pred_b": [], "mos": [], "system_id": [], "test_set": []}
    for key, a in rows_a.items():
        b = rows_b.get(key)
        if b is None:
            raise ValueError(f"{path_b}: lacks sample {key[1]!r} of test set {key[0]!r} (in {path_a})")
        if not math.isclose(a["mos"], b["mos"], rel_tol=1e-9, abs_tol=1e-9):
            raise ValueError(
                f"{path_b}: sample {key[1]!r} of test set {key[0]!r} has true MOS {b['mos']!r}, "
                f"{path_a} has {a['mos']!r}"
            )
        if a["system_id"] != b["system_id"]:
            raise ValueError(
                f"{path_b}: sample {key[1]!r} of test set {key[0]!r} has system {b['system_id']!r}, "
                f"{path_a} has {a['system_id']!r}"
            )
        for column, value in (
            ("pred_a", a["pred"]),
            ("pred_b", b["pred"]),
            ("mos", a["mos"]),
            ("system_id", a["system_id"]),
            ("test_set", key[0]),
        ):
            out[column].append(value)
    return out


def summarise(observed: float, diffs: np.ndarray) -> dict[str, Any]:
    """Observed difference, 95 % interval, two-sided p and significance of resampled `diffs` (R,).

    `resamples` counts the resamples where both runs' metric is defined, which the p-value and
    interval rest on; `ties` those of them where the difference is exactly 0.
    """
    valid = diffs[~np.isnan(diffs)]
    lo, hi = metrics.interval(valid)
    p = min(1.0, 2 * min(np.mean(valid <= 0), np.mean(valid >= 0))) if valid.size else math.nan
    return {
        "diff": observed,
        "ci": [lo, hi],
        "p": float(p),
        "significant": bool(lo > 0 or hi < 0),
        "resamples": int(valid.size),
        "ties": int(np.count_nonzero(valid == 0)),
    }


def _level_pairs(
    pred: list[float], true: list[float], systems: list[str]
) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """(pred, true) at utterance level and as per-system means."""
    sys_pred, sys_true, _ = metrics.system_means(pred, true, systems)
    return (np.asarray(pred, dtype=np.float64), np.asarray(true, dtype=np.float64)), (sys_pred, sys_true)


def compare(
    pred_a: list[float],
    pred_b: list[float],
    true: list[float],
    systems: list[str],
    test_sets: list[str],
    metric: str = "srcc",
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """Paired bootstrap of `metric` B − A per test set (sorted) and `avg`, at `utt` and `sys` level.

    Each entry: a, b (observed values), diff, ci [lo, hi], p, significant, resamples (those
    defining the difference) and ties (those of them where it is exactly 0). Where the metric is
    undefined for either run the entry has `undefined` (the reason) and no difference, interval
    or p; the average leaves such sets out and then lists the sets it is over under
    `averaged_over`. With fewer points than
    `metrics.MIN_INTERVAL_POINTS` the entry has the difference but `no_interval` (the reason)
    instead of an interval and p.
    """
    groups = metrics.set_indices(test_sets)
    rng = np.random.default_rng(seed)
    observed: dict[str, dict[str, dict]] = {"a": {}, "b": {}}
    draws: dict[str, dict[str, dict]] = {"a": {}, "b": {}}
    # Per set and level, why the comparison is undefined (the metric is undefined for A or B).
    reasons: dict[str, dict[str, str]] = {}
    for name, idx in groups.items():
        t, s = [true[i] for i in idx], [systems[i] for i in idx]
        # Sorted system names are the same for both runs, so their system means align.
        pairs_a = _level_pairs([pred_a[i] for i in idx], t, s)
        pairs_b = _level_pairs([pred_b[i] for i in idx], t, s)
        for level, (p_a, tt), (p_b, _) in zip(metrics.LEVELS, pairs_a, pairs_b, strict=True):
            shared = metrics.bootstrap_indices(rng, len(tt), resamples)
            for run, p in (("a", p_a), ("b", p_b)):
                observed[run].setdefault(name, {})[level] = {
                    metric: metrics.correlations(p, tt)[metric],
                    "n": len(tt),
                }
                draws[run].setdefault(name, {})[level] = {
                    **metrics.resampled_metrics(p, tt, shared, (metric,)),
                    "n": len(tt),
                }
                reason = metrics.undefined_reasons(p, tt, metrics.UNITS[level], (metric,)).get(metric)
                if reason is not None:
                    reasons.setdefault(name, {}).setdefault(level, f"{run.upper()}: {reason}")
    # The average is over the sets where the metric is defined for both runs, the same for both.
    over = {
        level: {metric: [name for name in groups if level not in reasons.get(name, {})]}
        for level in metrics.LEVELS
    }
    for run in ("a", "b"):
        observed[run][metrics.AVERAGE_KEY] = metrics.weighted_average(observed[run], (metric,), over)
        draws[run][metrics.AVERAGE_KEY] = metrics.weighted_average(draws[run], (metric,), over)
    for level in metrics.LEVELS:
        if not over[level][metric]:
            reasons.setdefault(metrics.AVERAGE_KEY, {})[level] = "undefined in every set"
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for name in observed["a"]:
        result[name] = {}
        for level in metrics.LEVELS:
            a, b = observed["a"][name][level][metric], observed["b"][name][level][metric]
            reason = reasons.get(name, {}).get(level)
            if reason is not None:
                result[name][level] = {"a": a, "b": b, **UNDEFINED_COMPARISON, "undefined": reason}
                continue
            sets = over[level][metric] if name == metrics.AVERAGE_KEY else [name]
            n = sum(observed["a"][s][level]["n"] for s in sets)
            need = metrics.MIN_INTERVAL_POINTS.get(metric, 2)
            if n < need:
                # As in metrics.json: too few points for the bootstrap to mean anything.
                entry = {**UNDEFINED_COMPARISON, "diff": b - a}
                entry["no_interval"] = (
                    f"{metrics.count_text(n, metrics.UNITS[level])} (needs at least {need})"
                )
            else:
                diffs = draws["b"][name][level][metric] - draws["a"][name][level][metric]
                entry = summarise(b - a, diffs)
            result[name][level] = {"a": a, "b": b, **entry}
            if name == metrics.AVERAGE_KEY and len(sets) < len(groups):
                result[name][level]["averaged_over"] = sets
    return result


def _p_text(r: dict[str, Any]) -> str:
    """The p-value to 3 decimals; `<1/R` where no resample crossed 0 (p is below the resolution)."""
    if r["p"] == 0:
        return f"<{1 / r['resamples']:.2g}"
    return f"{r['p']:.3f}"


def format_comparison(result: dict[str, dict[str, dict[str, Any]]], metric: str) -> str:
    """One line per test set and level: A, B, B − A, its interval, p, the share of ties and the verdict.

    Where any resample tied, `TIES_NOTE` below the table says what that does to p.
    """
    lower_is_better = metric in metrics.ERROR_METRICS
    lines = [f"{'set':<8} {'level':<5} {'A':>7} {'B':>7} {'B-A':>7}  {'95 % interval':<18} {'p':>6}  ties"]
    tied = False
    for name, block in result.items():
        for level, r in block.items():
            a, b = (f"{v:>7.3f}" if metrics.defined(v) else f"{'n/a':>7}" for v in (r["a"], r["b"]))
            if "undefined" in r:
                lines.append(f"{name:<8} {level:<5} {a} {b} {'n/a':>7}  undefined: {r['undefined']}")
                continue
            verdict = ""
            if r["significant"]:
                better = "B" if (r["diff"] < 0) == lower_is_better else "A"
                verdict = f"  significant ({better} better)"
            if "averaged_over" in r:
                verdict += f"  (over {', '.join(r['averaged_over'])})"
            head = f"{name:<8} {level:<5} {a} {b} {r['diff']:>+7.3f}  "
            if "no_interval" in r:
                lines.append(f"{head}no interval: {r['no_interval']}{verdict}")
                continue
            interval = f"[{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]"
            ties = f"{100 * r['ties'] / r['resamples']:.0f} %" if r["resamples"] else "n/a"
            tied = tied or r["ties"] > 0
            lines.append(f"{head}{interval:<18} {_p_text(r):>6}  {ties:>4}{verdict}")
    if tied:
        lines += ["", TIES_NOTE]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-compare`; returns the exit code (1 when the inputs do not match)."""
    parser = argparse.ArgumentParser(prog="sqa-compare", description=__doc__.split("\n")[0])
    parser.add_argument("a", help="predictions.csv of run A (the reference)")
    parser.add_argument("b", help="predictions.csv of run B")
    parser.add_argument("--metric", default="srcc", choices=metrics.METRIC_NAMES)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the comparison as JSON to this file")
    args = parser.parse_args(argv)
    if args.resamples < 1:
        parser.error("--resamples must be at least 1")
    if args.json and any(Path(args.json).resolve() == Path(p).resolve() for p in (args.a, args.b)):
        parser.error(f"--json {args.json} is one of the inputs; sqa-compare never overwrites an input")
    try:
        runs = align(args.a, args.b)
    except (OSError, ValueError) as err:
        print(f"sqa-compare: {err}", file=sys.stderr)
        return 1
    result = compare(
        runs["pred_a"],
        runs["pred_b"],
        runs["mos"],
        runs["system_id"],
        runs["test_set"],
        metric=args.metric,
        resamples=args.resamples,
        seed=args.seed,
    )
    print(f"{args.metric}: B - A over {args.resamples} paired resamples (seed {args.seed})")
    print(f"A = {args.a}\nB = {args.b}")
    print(format_comparison(result, args.metric))
    if args.json:
        summary = {
            "a": str(args.a),
            "b": str(args.b),
            "metric": args.metric,
            "resamples": args.resamples,
            "seed": args.seed,
            "results": result,
        }
        atomic_write_text(args.json, json_text(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
