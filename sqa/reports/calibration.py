"""Calibration of predicted spreads on test clips: interval coverage, NLL, a reliability plot.

For a predictor with a spread (`sqa.models.uncertainty`) the test rows carry `pred`, `spread`
and the listeners' `ratings`. A spread is that of one listener's rating, so its central
intervals are checked against single ratings (each rating one case) and against the clip MOS
(each clip one case). A calibrated model covers about the nominal share of single ratings; the
clip MOS, being a mean of ratings, is covered at least as often where the model is calibrated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sqa.core.atomic import atomic_write_json
from sqa.core.spread import INTERVAL_LEVELS, interval, nll
from sqa.reports.plots import DPI, save

CALIBRATION_FILE = "calibration.json"
# Nominal levels of the reliability plot.
RELIABILITY_LEVELS = tuple(round(0.1 * k, 1) for k in range(1, 10))


def coverage(
    values: np.ndarray, mean: np.ndarray, spread: np.ndarray, level: float, distribution: str
) -> float:
    """Share of `values` (N,) inside the central `level` intervals about `mean` (N,) with `spread` (N,)."""
    low, high = interval(mean, spread, level, distribution)
    values = np.asarray(values, dtype=np.float64)
    return float(np.mean((values >= low) & (values <= high))) if values.size else float("nan")


def _cases(rows: Sequence[Mapping[str, Any]]) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(values, means, spreads) of the clip MOS (one per clip) and of single ratings (one per rating)."""
    clips = [r for r in rows if not np.isnan(r["mos"])]
    rated = [(v, r["pred"], r["spread"]) for r in rows for v in r.get("ratings", ())]
    return {
        "clip_mos": tuple(
            np.array([r[k] for r in clips], dtype=np.float64) for k in ("mos", "pred", "spread")
        ),
        "single_ratings": tuple(np.array(col, dtype=np.float64) for col in zip(*rated, strict=True))
        if rated
        else (np.empty(0),) * 3,
    }


def calibration(rows: Sequence[Mapping[str, Any]], distribution: str) -> dict[str, Any]:
    """calibration.json's content: per case, count, 50 %/90 % coverage, mean NLL, reliability curve."""
    out: dict[str, Any] = {
        "distribution": distribution,
        "mean_spread": float(np.mean([r["spread"] for r in rows])),
    }
    for case, (values, mean, spread) in _cases(rows).items():
        out[case] = {
            "n": int(values.size),
            **{
                f"coverage{s}": coverage(values, mean, spread, level, distribution)
                for s, level in INTERVAL_LEVELS.items()
            },
            "nll": float(np.mean(nll(values, mean, spread, distribution))) if values.size else float("nan"),
            "reliability": {
                f"{level:g}": coverage(values, mean, spread, level, distribution)
                for level in RELIABILITY_LEVELS
            },
        }
    return out


def reliability_figure(record: Mapping[str, Any]) -> Figure:
    """Observed against nominal coverage of the central intervals, one line per case of `record`."""
    figure = Figure(figsize=(4.5, 4.5), dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    ax = figure.add_subplot()
    ax.plot([0, 1], [0, 1], color="grey", linestyle="--", label="calibrated")
    for case, label in (("clip_mos", "clip MOS"), ("single_ratings", "single ratings")):
        curve = record[case]["reliability"]
        if record[case]["n"]:
            ax.plot(
                [float(k) for k in curve],
                list(curve.values()),
                marker="o",
                label=f"{label} (n={record[case]['n']})",
            )
    ax.set_xlabel("nominal coverage of the central interval")
    ax.set_ylabel("observed coverage on test clips")
    ax.set_title(f"Reliability of the predicted spread ({record['distribution']})")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.legend(loc="lower right")
    return figure


def write_calibration(rows: Sequence[Mapping[str, Any]], distribution: str, out_dir: Path) -> dict[str, Any]:
    """Write `<out_dir>/calibration.json` and `<out_dir>/plots/reliability.png`; returns the record."""
    record = calibration(rows, distribution)
    atomic_write_json(out_dir / CALIBRATION_FILE, record)
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    save(reliability_figure(record), out_dir / "plots" / "reliability.png")
    return record


def summary(record: Mapping[str, Any]) -> str:
    """One line of a calibration record: 50 %/90 % coverage and NLL of the clip MOS and single ratings."""
    parts = []
    for case, label in (("clip_mos", "clip MOS"), ("single_ratings", "single ratings")):
        block = record[case]
        if block["n"]:
            parts.append(
                f"{label} (n={block['n']}): 50 % interval covers {block['coverage50']:.1%}, "
                f"90 % covers {block['coverage90']:.1%}, NLL {block['nll']:.3f}"
            )
    return "; ".join(parts)
