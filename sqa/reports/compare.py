"""Compare two settings on the same test clips: groups of runs (seeds), or two single runs.

    sqa-compare A1 A2 A3 -- B1 B2 B3 [--metric srcc] [--resamples 1000] [--seed 0]
                [--json out.json [--overwrite]]
    sqa-compare --a A1 A2 A3 --b B1 B2 B3 [options]
    sqa-compare A B [options]                    (one run a side)

A run is a predictions.csv or its run directory. Every run must hold the same test clips with the
same true MOS: a multirun over seeds does where the corpus has its test split, or where every run
is given the same split files (docs/guide.md, "Comparing two settings"). For every test set and the
weighted average, at utterance and system level, the metric is computed for each run, and B − A
is the difference of the two sides' means over their runs. Each of `--resamples` resamples draws
the clips (systems) once and scores every run on them: the variance of B − A over the resamples,
the noise the runs share cancelled, is the clip variance.

Several runs a side (seeds of each setting): the standard error of B − A adds the seed-to-seed
variance s_A²/n_A + s_B²/n_B (s²: the sample variance of a side's run values) to the clip
variance. The 95 % interval and the two-sided p are Welch's t with Welch–Satterthwaite degrees of
freedom, the clip variance counting as known (it rests on the resamples, not on the few runs).
Resampling three seeds instead would see 10 distinct draws and understate their variance by a
third; the t distribution's few degrees of freedom allow for how little three seeds say of it.
Both variances hold the seed-by-clip interaction, so their sum errs on the conservative side.
"significant" when the interval excludes 0 (p < 0.05). A side whose runs all score alike gives
no spread to estimate: Welch–Satterthwaite takes its variance of 0 as exact (right for the
constant predictor, equal by construction), and its degrees of freedom follow the other side
alone, often by the millions; the row shows df n/a and the note below the table says why.

One run on a side: seed-to-seed variance cannot be estimated, and the output says in one line
that it is not included. The interval is the percentile 95 % interval of the resampled
differences and p = 2·min(share of them ≤ 0, share ≥ 0) (capped at 1); "significant" when the
interval excludes 0. Resamples where B − A is exactly 0 (ties: the runs rank the drawn clips or
systems alike, common at system level with few systems) count on both sides of p, which keeps p
consistent with the interval but lets it reach 1 beside an interval that is not [0, 0]; the
output gives their share.

For rmse and mse a negative difference means B is better. `--json` is written atomically, never
over a run it reads and over an existing file only with `--overwrite`.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sqa import metrics
from sqa.core.atomic import json_text, write_output
from sqa.reports.aligned_runs import SAME_CLIPS, align, read_predictions
from sqa.reports.compare_arguments import parse_args
from sqa.reports.significance import summarise, welch

# Every public name of this module, those now defined in aligned_runs, significance and
# compare_arguments included: each stays `sqa.reports.compare.<name>`.
__all__ = [
    "SAME_CLIPS",
    "SEED_NOTE",
    "TIES_NOTE",
    "UNDEFINED_COMPARISON",
    "align",
    "compare",
    "compare_groups",
    "format_comparison",
    "main",
    "parse_args",
    "read_predictions",
    "run_labels",
    "summarise",
    "welch",
]

UNDEFINED_COMPARISON = dict(diff=math.nan, ci=None, p=math.nan, significant=False, resamples=0, ties=0)
TIES_NOTE = (
    "ties: the share of resamples where B - A is exactly 0 (both runs rank the drawn clips or systems "
    "alike, common with few systems). p counts them on both sides, so where they are many p is high, "
    "up to 1, beside an interval that is not [0, 0]: on those points the runs cannot be told apart."
)
DF_NOTE = (
    "df n/a: a side's runs all score alike there (no seed-to-seed spread, taken as exact, as for "
    "the constant predictor), so Welch's degrees of freedom follow the other side alone, often "
    "by the millions; the interval and p use them (the --json entry's df_undefined says which side)."
)
# pair_acc over one pair of points with different true scores is 0, 1/2 or 1 whatever the
# predictor: as empty as a correlation of two points. It needs this many such pairs.
MIN_PAIRS = 2
SEED_NOTE = (
    "Seed-to-seed variance is not included (one run on a side): the interval and p cover the test "
    "clips' resampling only. To include it, give several seeds a side: sqa-compare A1 A2 A3 -- B1 B2 B3"
)


def run_labels(side: str, count: int) -> list[str]:
    """Names of a side's runs in reasons: `A` for a single run, else `A1`, `A2`, ..."""
    return [side] if count == 1 else [f"{side}{i}" for i in range(1, count + 1)]


def _few_pairs(true: np.ndarray, unit: str) -> str | None:
    """Why pair_acc is undefined on true scores `true` (n,): under `MIN_PAIRS` untied pairs; else None."""
    _, counts = np.unique(true, return_counts=True)
    pairs = (len(true) ** 2 - int(np.sum(counts**2))) // 2
    if pairs >= MIN_PAIRS:
        return None
    plural = "" if pairs == 1 else "s"
    return f"{pairs} pair{plural} of {unit}s with different true scores (needs at least {MIN_PAIRS})"


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
    """Paired bootstrap of `metric` B − A of two single runs: `compare_groups` with one run a side."""
    return compare_groups([pred_a], [pred_b], true, systems, test_sets, metric, resamples, seed)


def compare_groups(
    runs_a: Sequence[Sequence[float]],
    runs_b: Sequence[Sequence[float]],
    true: list[float],
    systems: list[str],
    test_sets: list[str],
    metric: str = "srcc",
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, dict[str, dict[str, Any]]]:
    """`metric` B − A of the sides' means over runs per test set (sorted) and `avg`, at `utt` and `sys`.

    Each entry: a, b (the side means of the observed values), diff, ci [lo, hi], p, significant
    and resamples (those defining the difference); with several runs a side (the module
    docstring) also se, seed_se, clip_se and df, else ties (resamples where the difference is
    exactly 0); a_runs and b_runs (each run's value) where a side has several runs. Where the
    metric is undefined for any run (pair_acc also on fewer than `MIN_PAIRS` pairs of points with
    different true scores) the entry has `undefined` (the reason, naming the run), NaN for that
    run's value and no difference, interval or p; the average leaves such sets out and then lists
    the sets it is over under `averaged_over`. Sets named `reference` and `anchor`
    (`metrics.ROLES`) get their own entries and are never averaged, as in metrics.json. With fewer
    points than `metrics.MIN_INTERVAL_POINTS` the entry has the difference but `no_interval` (the
    reason) instead of an interval and p. Where a side's runs all score alike, df is None and
    `df_undefined` says why (`significance.welch`).
    """
    labels = {"a": run_labels("A", len(runs_a)), "b": run_labels("B", len(runs_b))}
    preds = dict(zip([*labels["a"], *labels["b"]], [*runs_a, *runs_b], strict=True))
    seeds = len(runs_a) > 1 and len(runs_b) > 1
    groups = metrics.set_indices(test_sets)
    rng = np.random.default_rng(seed)
    observed: dict[str, dict[str, dict]] = {label: {} for label in preds}
    draws: dict[str, dict[str, dict]] = {label: {} for label in preds}
    # Per set and level, why the comparison is undefined (the metric is undefined for a run).
    reasons: dict[str, dict[str, str]] = {}
    for name, idx in groups.items():
        t, s = [true[i] for i in idx], [systems[i] for i in idx]
        # Sorted system names are the same for every run, so their system means align.
        pairs = {label: _level_pairs([pred[i] for i in idx], t, s) for label, pred in preds.items()}
        for k, level in enumerate(metrics.LEVELS):
            tt = pairs[labels["a"][0]][k][1]
            # One draw of clips (systems) for every run: their shared noise cancels in B − A.
            shared = metrics.bootstrap_indices(rng, len(tt), resamples)
            for label, run_pairs in pairs.items():
                p = run_pairs[k][0]
                observed[label].setdefault(name, {})[level] = {
                    metric: metrics.correlations(p, tt)[metric],
                    "n": len(tt),
                }
                draws[label].setdefault(name, {})[level] = {
                    **metrics.resampled_metrics(p, tt, shared, (metric,)),
                    "n": len(tt),
                }
                unit = metrics.UNITS[level]
                reason = metrics.undefined_reasons(p, tt, unit, (metric,)).get(metric)
                if reason is None and metric == "pair_acc":
                    reason = _few_pairs(tt, unit)
                if reason is not None:
                    # Undefined is null, never the 0 or 1 a single pair gives.
                    observed[label][name][level][metric] = math.nan
                    reasons.setdefault(name, {}).setdefault(level, f"{label}: {reason}")
    # The average is over the sets where the metric is defined for every run, the same for all,
    # and leaves a listening test's reference and anchor sets out, as metrics.json's does.
    headline = [name for name in groups if name not in metrics.ROLES]
    over = {
        level: {metric: [name for name in headline if level not in reasons.get(name, {})]}
        for level in metrics.LEVELS
    }
    for label in preds:
        observed[label][metrics.AVERAGE_KEY] = metrics.weighted_average(observed[label], (metric,), over)
        draws[label][metrics.AVERAGE_KEY] = metrics.weighted_average(draws[label], (metric,), over)
    for level in metrics.LEVELS:
        if not over[level][metric]:
            reasons.setdefault(metrics.AVERAGE_KEY, {})[level] = "undefined in every set"
    result: dict[str, dict[str, dict[str, Any]]] = {}
    for name in observed[labels["a"][0]]:
        result[name] = {}
        for level in metrics.LEVELS:
            values = {side: [observed[x][name][level][metric] for x in labels[side]] for side in labels}
            a, b = (float(np.mean(values[side])) for side in ("a", "b"))
            runs = {"a_runs": values["a"], "b_runs": values["b"]} if len(preds) > 2 else {}
            reason = reasons.get(name, {}).get(level)
            if reason is not None:
                result[name][level] = {"a": a, "b": b, **UNDEFINED_COMPARISON, "undefined": reason, **runs}
                continue
            sets = over[level][metric] if name == metrics.AVERAGE_KEY else [name]
            n = sum(observed[labels["a"][0]][s][level]["n"] for s in sets)
            need = metrics.MIN_INTERVAL_POINTS.get(metric, 2)
            if n < need:
                # As in metrics.json: too few points for the bootstrap to mean anything.
                entry = {**UNDEFINED_COMPARISON, "diff": b - a}
                entry["no_interval"] = (
                    f"{metrics.count_text(n, metrics.UNITS[level])} (needs at least {need})"
                )
            else:
                side_draws = {
                    side: np.mean([draws[x][name][level][metric] for x in labels[side]], axis=0)
                    for side in labels
                }
                diffs = side_draws["b"] - side_draws["a"]
                entry = welch(b - a, values["a"], values["b"], diffs) if seeds else summarise(b - a, diffs)
            result[name][level] = {"a": a, "b": b, **entry, **runs}
            if name == metrics.AVERAGE_KEY and len(sets) < len(headline):
                result[name][level]["averaged_over"] = sets
    return result


def _p_text(r: dict[str, Any]) -> str:
    """The p-value to 3 decimals; below the bootstrap's resolution `<1/R`, below 0.001 (Welch) `<0.001`."""
    if "df" in r:
        return "<0.001" if r["p"] < 0.001 else f"{r['p']:.3f}"
    if r["p"] == 0:
        return f"<{1 / r['resamples']:.2g}"
    return f"{r['p']:.3f}"


def side_names(a: Sequence[str], b: Sequence[str]) -> tuple[str, str]:
    """Names of the two sides' runs (paths), told apart: what their paths do not share, else A and B.

    A side's path is its run's, or the folder its runs share; the folders both sides share are
    left out (runs/ssl and runs/midi are `ssl` and `midi`).
    """
    folders = [Path(os.path.commonpath([os.path.abspath(p) for p in side])) for side in (a, b)]
    shared = Path(os.path.commonpath([str(f) for f in folders]))
    names = [str(f.relative_to(shared)) if f != shared else "" for f in folders]
    if not all(names) or names[0] == names[1] or any(len(n) > 24 for n in names):
        return "A", "B"
    return names[0], names[1]


def direction(metric: str) -> str:
    """Whether a larger `metric` is better: `lower is better` (errors) or `higher is better`."""
    return "lower is better" if metric in metrics.ERROR_METRICS else "higher is better"


def format_comparison(
    result: dict[str, dict[str, dict[str, Any]]],
    metric: str,
    seeds: bool = False,
    names: tuple[str, str] = ("A", "B"),
) -> str:
    """A line per test set and level: A, B, B − A, its interval, p, then ties, or df and SE parts (`seeds`).

    The sides are labelled by `names` (`side_names`). The average has no line where it averages
    one set (`_table_rows`). Where any resample tied, `TIES_NOTE` below the table says what that
    does to p; where a row's degrees of freedom are n/a, `DF_NOTE` says why.
    """
    lower_is_better = metric in metrics.ERROR_METRICS
    tail = f"{'df':>5}  {'seed SE':>7}  {'clip SE':>7}" if seeds else "ties"
    rows = _table_rows(result)
    # As wide as the longest set name (`reference` is nine letters): the columns stay aligned.
    wn = max(8, *(len(name) for name, _, _ in rows)) if rows else 8
    wa, wb = (max(7, len(n)) for n in names)
    first, second = names
    sides = f"{first:>{wa}} {second:>{wb}} {'B-A':>7}"
    lines = [f"{'set':<{wn}} {'level':<5} {sides}  {'95 % interval':<18} {'p':>6}  {tail}"]
    tied = flat = False
    for name, level, r in rows:
        a, b = (
            f"{v:>{w}.3f}" if metrics.defined(v) else f"{'n/a':>{w}}" for v, w in ((r["a"], wa), (r["b"], wb))
        )
        if "undefined" in r:
            lines.append(f"{name:<{wn}} {level:<5} {a} {b} {'n/a':>7}  undefined: {r['undefined']}")
            continue
        verdict = ""
        if r["significant"]:
            better = second if (r["diff"] < 0) == lower_is_better else first
            verdict = f"  significant ({better} better)"
        if "averaged_over" in r:
            verdict += f"  (over {', '.join(r['averaged_over'])})"
        head = f"{name:<{wn}} {level:<5} {a} {b} {r['diff']:>+7.3f}  "
        if "no_interval" in r:
            lines.append(f"{head}no interval: {r['no_interval']}{verdict}")
            continue
        interval = f"[{r['ci'][0]:+.3f}, {r['ci'][1]:+.3f}]"
        if seeds:
            if r["df"] is None:
                df, flat = f"{'n/a':>5}", True
            else:
                # Many degrees of freedom (the clip variance dominating) need no decimals.
                df = f"{r['df']:>5.1f}" if r["df"] < 100 else f"{r['df']:>5.0f}"
            parts = f"{df}  {r['seed_se']:>7.3f}  {r['clip_se']:>7.3f}"
        else:
            parts = f"{100 * r['ties'] / r['resamples']:.0f} %" if r["resamples"] else "n/a"
            parts = f"{parts:>4}"
            tied = tied or r["ties"] > 0
        lines.append(f"{head}{interval:<18} {_p_text(r):>6}  {parts}{verdict}")
    if tied:
        lines += ["", TIES_NOTE]
    if flat:
        lines += ["", DF_NOTE]
    return "\n".join(lines)


def _table_rows(result: dict[str, dict[str, dict[str, Any]]]) -> list[tuple[str, str, dict[str, Any]]]:
    """The (set, level, entry) rows of a comparison's table: the sets', then the average's over several.

    An average over one set (one test set beside a listening test's reference and anchors, or the
    only set where the metric is defined at that level) would repeat that set's row: it is left out.
    """
    headline = [name for name in result if name != metrics.AVERAGE_KEY and name not in metrics.ROLES]
    return [
        (name, level, r)
        for name, block in result.items()
        for level, r in block.items()
        if name != metrics.AVERAGE_KEY or len(r.get("averaged_over", headline)) > 1
    ]


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-compare`; returns the exit code (1 when the inputs do not match)."""
    args = parse_args(argv)
    try:
        runs = align([*args.a, *args.b])
    except (OSError, ValueError) as err:
        print(f"sqa-compare: {err}", file=sys.stderr)
        return 1
    preds = runs["preds"]
    result = compare_groups(
        preds[: len(args.a)],
        preds[len(args.a) :],
        runs["mos"],
        runs["system_id"],
        runs["test_set"],
        metric=args.metric,
        resamples=args.resamples,
        seed=args.seed,
    )
    seeds = len(args.a) > 1 and len(args.b) > 1
    names = side_names(args.a, args.b)
    what = f"{args.metric} ({direction(args.metric)})"
    if len(preds) == 2:
        print(f"{what}: B - A over {args.resamples} paired resamples (seed {args.seed})")
    else:
        method = "Welch's t over seed-to-seed and clip variance, " if seeds else ""
        print(
            f"{what}: B - A of the means over runs (A: {len(args.a)}, B: {len(args.b)}); "
            f"{method}{args.resamples} paired resamples (seed {args.seed})"
        )
    for side, name, runs in (("A", names[0], args.a), ("B", names[1], args.b)):
        print(f"{side} = {'' if name == side else f'{name}: '}{', '.join(runs)}")
    if not seeds:
        print(SEED_NOTE)
    print(format_comparison(result, args.metric, seeds, names))
    if args.json:
        summary = {
            "a": args.a,
            "b": args.b,
            "metric": args.metric,
            "resamples": args.resamples,
            "seed": args.seed,
            "seed_variance": seeds,
            "results": result,
        }
        try:
            write_output(args.json, json_text(summary), overwrite=args.overwrite, inputs=args.inputs)
        except OSError as err:
            print(f"sqa-compare: --json {err}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
