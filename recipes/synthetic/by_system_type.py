"""Error of runs on the synthetic corpus, split into pitch-degraded systems and all others.

    python recipes/synthetic/by_system_type.py data/synthetic-seed0-clips14 \
        --cell "SSL=runs/quick/table3/ssl/*" --cell "SSL + pitch histogram=runs/quick/table3/histogram/*"

For each cell (a label and a glob of run directories) it prints the utterance-level RMSE and the
system-level RMSE (on per-system means) of the test clips of pitch-degraded systems (detune, drift,
jitter, per-note detune) and of the other systems, as mean ± std over the runs.
"""

from __future__ import annotations

import argparse
import glob
import json
from pathlib import Path

import numpy as np

from sqa.core.artefacts import read_predictions
from sqa.metrics import correlations, system_means

PITCH_TYPES = {"detune", "drift", "jitter", "note_detune"}


def group_errors(run_dir: Path, sys_type: dict[str, str]) -> dict[str, tuple[float, float]]:
    """(utterance RMSE, system RMSE) of the pitch-degraded and the other systems of one run."""
    rows = read_predictions(run_dir)
    out = {}
    for group, keep in (("pitch", True), ("other", False)):
        part = [r for r in rows if (sys_type[r["system_id"]] in PITCH_TYPES) == keep]
        pred = [r["pred"] for r in part]
        mos = [r["mos"] for r in part]
        systems = [f"{r['test_set']}/{r['system_id']}" for r in part]
        sys_pred, sys_mos, _ = system_means(pred, mos, systems)
        out[group] = (
            correlations(np.array(pred), np.array(mos))["rmse"],
            correlations(sys_pred, sys_mos)["rmse"],
        )
    return out


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", type=Path, help="the synthetic corpus folder (with info/sys_info.json)")
    parser.add_argument("--cell", action="append", required=True, help="LABEL=GLOB of run directories")
    args = parser.parse_args()
    sys_info = json.loads((args.corpus / "info" / "sys_info.json").read_text(encoding="utf-8"))
    sys_type = {k: v["type"] for k, v in sys_info.items()}
    header = ["setting", "runs", "pitch utt RMSE", "pitch sys RMSE", "other utt RMSE", "other sys RMSE"]
    print("| " + " | ".join(header) + " |")
    print("|---|---|---|---|---|---|")
    for cell in args.cell:
        label, _, pattern = cell.partition("=")
        runs = [group_errors(Path(d), sys_type) for d in sorted(glob.glob(pattern))]
        if not runs:
            raise SystemExit(f"no run directory matches {pattern!r}")
        cols = []
        for group in ("pitch", "other"):
            for i in (0, 1):
                values = np.array([r[group][i] for r in runs])
                cols.append(f"{values.mean():.3f} ± {values.std(ddof=1) if len(values) > 1 else 0.0:.3f}")
        print(f"| {label} | {len(runs)} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
