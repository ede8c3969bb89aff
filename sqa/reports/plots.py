"""Pictures of a run: predicted against true MOS per test set, and training/validation curves.

Figures are drawn on `matplotlib.figure.Figure` with an Agg canvas, never through pyplot, so no
global backend is switched and no figure outlives its caller. Every number in a scatter's title
comes from `sqa.metrics` (via the run's results), never from a second computation here.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from sqa import metrics
from sqa.core.atomic import atomic_write

# Pixel size of every figure is figsize × DPI: no tight bounding box, so sizes are predictable.
DPI = 100
SCATTER_SIZE = (5.0, 5.0)
LEVEL_NAMES = {"utt": "utterance", "sys": "system"}
# The MOS scale of the corpora sqa reads (Corpus.score_range).
SCORE_RANGE = (1.0, 5.0)
SELECTED_LABEL = "selected checkpoint"
# The curves' width in inches: the panels and their legends beside them.
CURVES_WIDTH = 8.0
# A scatter's title: the heading wrapped at this many characters, then this many metrics a line,
# so that the title fits the figure's width.
TITLE_WIDTH = 48
METRICS_PER_LINE = 3
# The curves' keys (`sqa.training.callbacks.MetricHistory`): the two losses share the first panel.
LOSS_SERIES = {"train/loss": "training", "val/loss": "validation"}
SELECTION_KEY = "val/selection"
# Recorded only to order tied checks, never drawn: it is the selection score itself when selecting
# on utterance RMSE, and otherwise the per-set utterance RMSE panel's values averaged over the sets.
TIEBREAK_KEY = "val/selection_tiebreak"
# Metrics logged per validation set (`val/<set>/<key>`, `val/<dim>/<set>/<key>` for another score
# dimension), in panel order: their panel's title and y label.
SET_METRICS = {"sys_srcc": ("system-level SRCC", "SRCC"), "utt_rmse": ("utterance-level RMSE", "RMSE")}

History = dict[str, list[tuple[int, float]]]


def _figure(size: tuple[float, float]) -> Figure:
    figure = Figure(figsize=size, dpi=DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure


def metric_title(heading: str, block: Mapping[str, float]) -> str:
    """`heading (n=N)` (wrapped) over lines of `RMSE .. MSE .. LCC ..` (n/a where undefined)."""
    values = [
        f"{name.upper()} {block[name]:.3f}" if metrics.defined(block[name]) else f"{name.upper()} n/a"
        for name in metrics.METRIC_NAMES
    ]
    lines = textwrap.wrap(f"{heading} (n={int(block['n'])})", TITLE_WIDTH)
    lines += ["  ".join(values[i : i + METRICS_PER_LINE]) for i in range(0, len(values), METRICS_PER_LINE)]
    return "\n".join(lines)


def scatter(
    pred: Sequence[float],
    true: Sequence[float],
    title: str,
    score_range: tuple[float, float] = SCORE_RANGE,
) -> Figure:
    """Predicted (y) against true (x) MOS on both axes spanning `score_range`, with the identity line.

    Fixed axes make the plots of runs and test sets comparable at a glance; they widen only to
    show a point outside the range.
    """
    pred = np.asarray(pred, dtype=np.float64)
    true = np.asarray(true, dtype=np.float64)
    figure = _figure(SCATTER_SIZE)
    ax = figure.add_subplot()
    # Fainter, smaller points when there are many (utterances), clearer ones for a few (systems).
    many = pred.size > 100
    ax.scatter(true, pred, s=8 if many else 24, alpha=0.4 if many else 0.8, linewidths=0)
    # A diverged model may predict NaN or inf; such points must not break the axis limits (or the run).
    finite = np.isfinite(pred) & np.isfinite(true)
    lo, hi = (float(v) for v in score_range)
    if finite.any():
        lo = min(lo, float(pred[finite].min()), float(true[finite].min()))
        hi = max(hi, float(pred[finite].max()), float(true[finite].max()))
    ax.plot([lo, hi], [lo, hi], color="0.3", linestyle="--", linewidth=1, label="identity")
    ax.set_xlim(lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    ax.set_ylim(ax.get_xlim())
    ax.set_aspect("equal", adjustable="box")
    ax.set_xlabel("true MOS")
    ax.set_ylabel("predicted MOS")
    ax.set_title(title, fontsize=9)
    return figure


def scatter_figures(
    rows: Sequence[Mapping[str, Any]],
    results: Mapping[str, Any],
    score_range: tuple[float, float] = SCORE_RANGE,
) -> dict[str, Figure]:
    """Scatters `<test_set>_utt` and `<test_set>_sys` for every test set in `rows`."""
    figures = {}
    for test_set in sorted({r["test_set"] for r in rows}):
        part = [r for r in rows if r["test_set"] == test_set]
        pred = [float(r["pred"]) for r in part]
        true = [float(r["mos"]) for r in part]
        sys_pred, sys_true, _ = metrics.system_means(pred, true, [r["system_id"] for r in part])
        points = {"utt": (pred, true), "sys": (sys_pred, sys_true)}
        for level, (p, t) in points.items():
            title = metric_title(f"{test_set}, {LEVEL_NAMES[level]} level", results[test_set][level])
            figures[f"{test_set}_{level}"] = scatter(p, t, title, score_range)
    return figures


def save(figure: Figure, path: Path) -> Path:
    """Write `figure` as a PNG to `path` atomically."""
    atomic_write(path, lambda fh: figure.savefig(fh, format="png"))
    return path


def write_test_plots(
    rows: Sequence[Mapping[str, Any]],
    results: Mapping[str, Any],
    out_dir: str | Path,
    score_range: tuple[float, float] = SCORE_RANGE,
) -> list[Path]:
    """Write `<test_set>_utt.png` and `<test_set>_sys.png` for every test set into `out_dir`."""
    figures = scatter_figures(rows, results, score_range)
    return [save(fig, Path(out_dir) / f"{safe_file_name(name)}.png") for name, fig in figures.items()]


def safe_file_name(name: str) -> str:
    """`name` as a file name inside its folder: `../../x/evil` -> `_.._.._x_evil`.

    Characters other than ASCII letters, digits, `.`, `-` and `_` become `_`; a leading dot is
    prefixed, so the name is never `..` or hidden.
    """
    safe = re.sub(r"[^\w.-]", "_", name, flags=re.ASCII)
    return f"_{safe}" if safe.startswith(".") or not safe else safe


@dataclass(frozen=True)
class CurveNames:
    """What the curves call the selection score (e.g. "system-level SRCC") and each validation set.

    `sets` maps a validation set's name (its domain) to its legend label; unnamed sets keep theirs.
    """

    selection: str | None = None
    sets: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Panel:
    """One panel of the curves: its title, y label and (step, value) series by legend label."""

    title: str
    ylabel: str
    series: dict[str, Sequence[tuple[int, float]]] = field(default_factory=dict)


def curve_panels(
    history: Mapping[str, Sequence[tuple[int, float]]], names: CurveNames | None = None
) -> list[Panel]:
    """The panels of `history` in a fixed order, whatever order the keys were recorded in.

    1. loss: training and validation; 2. the selection score; 3. per validation set, each
    metric of `SET_METRICS` of the overall MOS, then of every other score dimension (by name);
    4. any other recorded key (by key) but the selection's tiebreak.
    """
    names = names or CurveNames()
    panels: dict[tuple, Panel] = {}
    # The loss series first, so that the loss legend reads training, validation.
    drawn = [key for key in history if key != TIEBREAK_KEY]
    keys = sorted(drawn, key=lambda k: list(LOSS_SERIES).index(k) if k in LOSS_SERIES else len(LOSS_SERIES))
    for key in keys:
        parts = key.split("/")
        if key in LOSS_SERIES:
            order, title, ylabel, label = (0,), "loss", "loss", LOSS_SERIES[key]
        elif key == SELECTION_KEY:
            order, ylabel, label = (1,), names.selection or "selection score", "selection score"
            title = f"selection score: {names.selection}" if names.selection else "selection score"
        elif parts[0] == "val" and len(parts) in (3, 4) and parts[-1] in SET_METRICS:
            dimension = parts[1] if len(parts) == 4 else ""
            metric, ylabel = SET_METRICS[parts[-1]]
            order = (2, dimension, list(SET_METRICS).index(parts[-1]))
            title = f"{dimension}: {metric}" if dimension else metric
            title += " per validation set"
            label = names.sets.get(parts[-2], parts[-2])
        else:
            order, title, ylabel, label = (3, key), key, parts[-1], parts[-1]
        panels.setdefault(order, Panel(title, ylabel)).series[label] = history[key]
    return [panels[order] for order in sorted(panels)]


def curves(
    history: Mapping[str, Sequence[tuple[int, float]]],
    selected_step: int | None = None,
    names: CurveNames | None = None,
) -> Figure:
    """One panel per quantity over steps (`curve_panels`); per-set validation series share one.

    With `selected_step`, every panel marks the step of the selected (tested and exported)
    checkpoint with a vertical line.
    """
    panels = curve_panels(history, names)
    figure = _figure((CURVES_WIDTH, 2.5 * max(len(panels), 1)))
    if not panels:
        figure.text(0.5, 0.5, "no values recorded", ha="center", va="center")
        return figure
    axes = figure.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, panel in zip(axes, panels, strict=True):
        for label, points in panel.series.items():
            steps = [s for s, _ in points]
            values = [v for _, v in points]
            ax.plot(steps, values, marker="." if len(points) < 50 else None, label=label)
        if selected_step is not None:
            ax.axvline(selected_step, color="0.4", linestyle=":", linewidth=1, label=SELECTED_LABEL)
        ax.set_title(panel.title, fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        if len(panel.series) > 1 or selected_step is not None:
            # Beside the panel, never over the curves (constrained layout narrows the axes for it).
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return figure


def write_curves(
    history: Mapping[str, Sequence[tuple[int, float]]],
    out_dir: str | Path,
    selected_step: int | None = None,
    names: CurveNames | None = None,
) -> Path:
    """Write the training/validation curves to `<out_dir>/curves.png`."""
    return save(curves(history, selected_step, names), Path(out_dir) / "curves.png")


def write_run_plots(
    rows: Sequence[Mapping[str, Any]],
    results: Mapping[str, Any],
    history: Mapping[str, Sequence[tuple[int, float]]],
    out_dir: str | Path,
    score_range: tuple[float, float] = SCORE_RANGE,
    selected_step: int | None = None,
    names: CurveNames | None = None,
) -> dict[str, Path]:
    """Write the test scatters and the curves into `out_dir`; return them by tag `plots/<name>`."""
    paths = [
        *write_test_plots(rows, results, out_dir, score_range),
        write_curves(history, out_dir, selected_step, names),
    ]
    return {f"plots/{path.stem}": path for path in paths}
