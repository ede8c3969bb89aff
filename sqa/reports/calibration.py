"""Calibration of predicted spreads on test clips: interval coverage, NLL, a reliability plot.

For a predictor with a spread (`sqa.models.uncertainty`) the test rows carry `pred`, `spread`
and the listeners' `ratings`. A spread is that of one listener's rating, so its central
intervals are checked against single ratings (each rating one case) and against the clip MOS
(each clip one case). A calibrated model covers about the nominal share of single ratings; the
clip MOS, being a mean of ratings, is covered at least as often where the model is calibrated.

The spread ranking checks that the spread tells systems apart: per test system (a system within
a test set), the mean predicted spread against the observed rater spread, the mean within-clip
standard deviation of its listeners' ratings, and the Spearman correlation of the two.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from scipy import stats

from sqa.core.atomic import atomic_write_json
from sqa.core.spread import INTERVAL_LEVELS, interval, nll
from sqa.metrics import undefined_reasons
from sqa.reports.plots import DPI, save

CALIBRATION_FILE = "calibration.json"
# Nominal levels of the reliability plot.
RELIABILITY_LEVELS = tuple(round(0.1 * k, 1) for k in range(1, 10))
# Fewest ratings of a clip with an observed spread (a sample standard deviation needs two).
MIN_SPREAD_RATINGS = 2


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


def spread_ranking(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per test system, mean predicted spread against observed rater spread, and their SRCC.

    A clip's observed spread is the sample standard deviation (ddof 1) of its ratings; clips with
    fewer than `MIN_SPREAD_RATINGS` ratings are left out of both means, and a system left with
    no clip is left out (counted under `left_out`). Systems are keyed by (test set, system), as
    each test set has its own listeners. `srcc` is None, with the reason under `undefined`,
    where it does not exist (fewer than 3 systems, or constant spreads).
    """
    groups: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        key = (str(r.get("test_set", "")), str(r.get("system_id", "")))
        ratings = np.asarray(r.get("ratings", ()), dtype=np.float64)
        kept = groups.setdefault(key, [])
        if ratings.size >= MIN_SPREAD_RATINGS:
            kept.append((float(r["spread"]), float(np.std(ratings, ddof=1))))
    systems = [
        {
            "test_set": test_set,
            "system_id": system_id,
            "clips": len(clips),
            "pred_spread": float(np.mean([c[0] for c in clips])),
            "rater_spread": float(np.mean([c[1] for c in clips])),
        }
        for (test_set, system_id), clips in sorted(groups.items())
        if clips
    ]
    pred = np.array([s["pred_spread"] for s in systems], dtype=np.float64)
    true = np.array([s["rater_spread"] for s in systems], dtype=np.float64)
    reasons = undefined_reasons(pred, true, "system", ("srcc",))
    out: dict[str, Any] = {
        "n_systems": len(systems),
        "left_out": len(groups) - len(systems),
        "srcc": None if reasons else float(stats.spearmanr(pred, true)[0]),
    }
    if reasons:
        out["undefined"] = reasons["srcc"]
    out["systems"] = systems
    return out


def calibration(rows: Sequence[Mapping[str, Any]], distribution: str) -> dict[str, Any]:
    """calibration.json's content: per case, count, 50 %/90 % coverage, mean NLL, reliability curve.

    Plus `spread_ranking` (see `spread_ranking`) over all test clips.
    """
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
    out["spread_ranking"] = spread_ranking(rows)
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
    """One line of a calibration record: coverage and NLL of clip MOS and single ratings, spread SRCC."""
    parts = []
    for case, label in (("clip_mos", "clip MOS"), ("single_ratings", "single ratings")):
        block = record[case]
        if block["n"]:
            parts.append(
                f"{label} (n={block['n']}): 50 % interval covers {block['coverage50']:.1%}, "
                f"90 % covers {block['coverage90']:.1%}, NLL {block['nll']:.3f}"
            )
    ranking = record.get("spread_ranking")
    if ranking is not None:
        srcc = ranking["srcc"]
        parts.append(
            f"spread ranks {ranking['n_systems']} systems by rater spread with SRCC "
            + (f"{srcc:.3f}" if srcc is not None else f"undefined ({ranking['undefined']})")
        )
    return "; ".join(parts)
