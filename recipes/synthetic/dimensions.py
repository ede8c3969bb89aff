"""Per-dimension test SRCC of three-head runs against using their overall prediction instead.

    python recipes/synthetic/dimensions.py "runs/synthetic/dimensions/*" [--dimensions lyrics melody]

For each extra score dimension it compares, over the test clips that have that label, the run's
own head for the dimension (`pred_<dim>`) with the run's overall MOS prediction (`pred`) as the
predictor of that dimension: utterance- and system-level SRCC averaged over the test sets
(weighted by clips and systems, `sqa.metrics.evaluate_sets`), as mean ± std over the runs.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

import numpy as np

from sqa.core.artefacts import PREDICTIONS_FILE, read_predictions, runs_with_predictions, score_columns
from sqa.metrics import AVERAGE_KEY, evaluate_sets
from sqa.reports.tables import spread_text


def srcc(rows: list[dict[str, Any]], pred_key: str, true_key: str) -> tuple[float, float]:
    """Average utterance- and system-level SRCC of column `pred_key` against `true_key`."""
    result = evaluate_sets(
        [r[pred_key] for r in rows],
        [r[true_key] for r in rows],
        [r["system_id"] for r in rows],
        [r["test_set"] for r in rows],
    )
    return result[AVERAGE_KEY]["utt"]["srcc"], result[AVERAGE_KEY]["sys"]["srcc"]


def compare(run_dirs: list[Path], dims: list[str]) -> dict[str, dict[str, np.ndarray]]:
    """Per dimension: (runs, 2) arrays of (utt, sys) SRCC for its own head and the overall one."""
    out: dict[str, dict[str, list]] = {d: {"head": [], "overall": []} for d in dims}
    for run_dir in run_dirs:
        rows = read_predictions(run_dir)
        for dim in dims:
            true_key, pred_key = score_columns(dim)
            part = [r for r in rows if not math.isnan(r.get(true_key, math.nan))]
            if not part:
                raise SystemExit(f"{run_dir / PREDICTIONS_FILE}: no test clip has a {dim} label")
            out[dim]["head"].append(srcc(part, pred_key, true_key))
            out[dim]["overall"].append(srcc(part, score_columns()[1], true_key))
    return {d: {k: np.array(v) for k, v in groups.items()} for d, groups in out.items()}


def cell(values: np.ndarray) -> str:
    """Mean ± std over the runs where the value is defined, to three decimals (`n/a`: in none)."""
    kept = values[~np.isnan(values)]
    std = kept.std(ddof=1) if kept.size > 1 else math.nan
    return spread_text(kept.mean() if kept.size else math.nan, std, kept.size, values.size, sep=" ± ")


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", help="glob of run directories (with predictions.csv)")
    parser.add_argument("--dimensions", nargs="+", default=["lyrics", "melody"])
    args = parser.parse_args()
    run_dirs = runs_with_predictions(args.runs)
    if not run_dirs:
        raise SystemExit(f"no run directory with predictions.csv matches {args.runs!r}")
    results = compare(run_dirs, args.dimensions)
    print(f"{len(run_dirs)} run(s); test SRCC averaged over the test sets with labels of the dimension")
    print("| dimension | predictor | utt SRCC | sys SRCC |")
    print("|---|---|---|---|")
    for dim, groups in results.items():
        for name, label in (("head", f"its own {dim} head"), ("overall", "the overall (mos) prediction")):
            print(f"| {dim} | {label} | {cell(groups[name][:, 0])} | {cell(groups[name][:, 1])} |")
    wins = all((np.nanmean(g["head"], 0) > np.nanmean(g["overall"], 0)).all() for g in results.values())
    print(f"own heads beat the overall prediction on every dimension and level: {'yes' if wins else 'NO'}")


if __name__ == "__main__":
    main()
