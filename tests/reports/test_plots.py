"""Scatter plots, curves and the metric history callback."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from lightning.pytorch.trainer.states import TrainerFn
from matplotlib.image import imread

from sqa import metrics
from sqa.reports import plots
from sqa.training.callbacks import MetricHistory

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def rows() -> list[dict]:
    """Prediction rows of two test sets with a few systems each."""
    rng = np.random.default_rng(0)
    out = []
    for test_set, n_systems in (("test1", 5), ("test2", 4)):
        for s in range(n_systems):
            for u in range(6):
                mos = float(rng.uniform(1, 5))
                out.append(
                    {
                        "sample_id": f"{test_set}-sys{s}-utt{u}",
                        "system_id": f"sys{s}",
                        "test_set": test_set,
                        "mos": mos,
                        "pred": mos + float(rng.normal(0, 0.5)),
                    }
                )
    return out


def evaluate_rows(rows: list[dict]) -> dict:
    return metrics.evaluate_sets(
        [r["pred"] for r in rows],
        [r["mos"] for r in rows],
        [r["system_id"] for r in rows],
        [r["test_set"] for r in rows],
    )


def test_scatter_pngs_are_written_and_readable(rows, tmp_path):
    paths = plots.write_test_plots(rows, evaluate_rows(rows), tmp_path)
    names = ["test1_utt.png", "test1_sys.png", "test2_utt.png", "test2_sys.png"]
    assert sorted(p.name for p in paths) == sorted(names)
    width, height = (int(v * plots.DPI) for v in plots.SCATTER_SIZE)
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == PNG_SIGNATURE
        assert imread(tmp_path / name).shape[:2] == (height, width)
    assert not list(tmp_path.glob(".*")), "no temporary files are left behind"


def test_titles_hold_the_metrics_of_the_plotted_points(rows):
    figures = plots.scatter_figures(rows, evaluate_rows(rows))
    for test_set in ("test1", "test2"):
        part = [r for r in rows if r["test_set"] == test_set]
        expected = metrics.evaluate(
            [r["pred"] for r in part], [r["mos"] for r in part], [r["system_id"] for r in part]
        )
        for level in ("utt", "sys"):
            title = figures[f"{test_set}_{level}"].axes[0].get_title()
            assert test_set in title and f"n={expected[level]['n']}" in title
            for name in metrics.METRIC_NAMES:
                assert f"{name.upper()} {expected[level][name]:.3f}" in title


def test_scatter_draws_the_points_and_the_identity_line_on_the_score_range():
    pred = np.array([2.5, 3.0, 4.6, 1.8])
    true = np.array([1.2, 3.3, 4.0, 2.0])
    ax = plots.scatter(pred, true, "t").axes[0]
    np.testing.assert_allclose(ax.collections[0].get_offsets(), np.column_stack([true, pred]))
    (line,) = ax.lines
    np.testing.assert_allclose(line.get_xdata(), [1.0, 5.0])
    np.testing.assert_allclose(line.get_ydata(), [1.0, 5.0])
    # Fixed axes, whatever the points: runs and test sets compare at a glance.
    np.testing.assert_allclose(ax.get_xlim(), [0.8, 5.2])
    np.testing.assert_allclose(ax.get_ylim(), [0.8, 5.2])


def test_scatter_axes_widen_only_to_show_points_outside_the_range():
    ax = plots.scatter([5.8, 3.0], [4.0, 3.0], "t", score_range=(1.0, 5.0)).axes[0]
    np.testing.assert_allclose(ax.lines[0].get_xdata(), [1.0, 5.8])
    ax = plots.scatter([50.0, 30.0], [40.0, 30.0], "t", score_range=(0.0, 100.0)).axes[0]
    np.testing.assert_allclose(ax.get_xlim(), [-5.0, 105.0])


def test_system_scatter_plots_per_system_means(rows):
    figures = plots.scatter_figures(rows, evaluate_rows(rows))
    part = [r for r in rows if r["test_set"] == "test2"]
    sys_pred, sys_true, _ = metrics.system_means(
        [r["pred"] for r in part], [r["mos"] for r in part], [r["system_id"] for r in part]
    )
    offsets = figures["test2_sys"].axes[0].collections[0].get_offsets()
    np.testing.assert_allclose(offsets, np.column_stack([sys_true, sys_pred]))


def test_scatter_survives_non_finite_predictions(tmp_path):
    figure = plots.scatter([np.nan, 3.0, np.inf, 2.0], [1.0, 3.5, 2.0, 4.0], "diverged")
    np.testing.assert_allclose(figure.axes[0].lines[0].get_xdata(), [1.0, 5.0])
    assert plots.save(figure, tmp_path / "x.png").read_bytes()[:8] == PNG_SIGNATURE


def fake_trainer(**kwargs) -> SimpleNamespace:
    defaults = {
        "global_step": 0,
        "log_every_n_steps": 10,
        "callback_metrics": {},
        "sanity_checking": False,
        "state": SimpleNamespace(fn=TrainerFn.FITTING),
    }
    return SimpleNamespace(**{**defaults, **kwargs})


def test_history_records_train_values_at_the_logging_interval_and_val_after_validation():
    history = MetricHistory()
    trainer = fake_trainer()
    for step in range(1, 26):
        trainer.global_step = step
        trainer.callback_metrics = {"train/loss": torch.tensor(1.0 / step), "val/old": torch.tensor(0.1)}
        history.on_train_batch_end(trainer, None, None, None, step - 1)
    # A repeated global step (gradient accumulation) is recorded once.
    history.on_train_batch_end(trainer, None, None, None, 25)
    assert history.history == {"train/loss": [(10, pytest.approx(0.1)), (20, pytest.approx(0.05))]}

    trainer.callback_metrics = {"train/loss": torch.tensor(0.3), "val/selection": torch.tensor(0.5)}
    history.on_validation_end(SimpleNamespace(**{**vars(trainer), "sanity_checking": True}), None)
    assert "val/selection" not in history.history
    history.on_validation_end(trainer, None)
    assert history.history["val/selection"] == [(25, 0.5)]
    assert len(history.history["train/loss"]) == 2


def test_history_is_restored_when_resuming_a_fit_but_not_when_testing():
    saved = MetricHistory()
    saved.history = {"train/loss": [(10, 0.5)], "val/selection": [(25, 0.4)]}
    checkpoint = {"callbacks": {saved.state_key: saved.state_dict()}}

    current = {"train/loss": [(10, 0.5), (20, 0.3)]}
    tested = MetricHistory()
    tested.history = dict(current)
    tested.on_load_checkpoint(fake_trainer(state=SimpleNamespace(fn=TrainerFn.TESTING)), None, checkpoint)
    assert tested.history == current

    resumed = MetricHistory()
    resumed.on_load_checkpoint(fake_trainer(), None, checkpoint)
    assert resumed.history == saved.history


def test_scatter_titles_fit_inside_the_figure(rows):
    # A long test-set name too: the heading wraps rather than running off the figure.
    long = [{**r, "test_set": "singmospro-listening-test-batch-2024-unseen-systems"} for r in rows[:24]]
    figures = {
        **plots.scatter_figures(rows, evaluate_rows(rows)),
        **plots.scatter_figures(long, evaluate_rows(long)),
    }
    for name, figure in figures.items():
        figure.canvas.draw()
        box = figure.axes[0].title.get_window_extent(figure.canvas.get_renderer())
        assert box.x0 >= 0 and box.x1 <= figure.bbox.width, name
        assert box.y0 >= 0 and box.y1 <= figure.bbox.height, name
    title = figures["test1_sys"].axes[0].get_title()
    assert title.splitlines()[0] == "test1, system level (n=5)"
    assert len(title.splitlines()) == 1 + len(metrics.METRIC_NAMES) // plots.METRICS_PER_LINE


def panels(figure) -> list[tuple[str, str, list[str]]]:
    """(title, y label, legend labels of the data lines) of every panel, top to bottom."""
    return [
        (
            ax.get_title(),
            ax.get_ylabel(),
            [line.get_label() for line in ax.lines if line.get_label() != plots.SELECTED_LABEL],
        )
        for ax in figure.axes
    ]


def test_curves_panels_have_titles_y_labels_and_a_fixed_order_whatever_the_recording_order():
    history = {
        "val/lyrics/valid1/sys_srcc": [(25, 0.1)],
        "val/valid1/utt_rmse": [(25, 0.9), (50, 0.7)],
        "val/valid1/sys_srcc": [(25, 0.2), (50, 0.4)],
        "train/lr": [(10, 0.01)],
        "val/selection": [(25, 0.3), (50, 0.5)],
        "val/loss": [(25, 0.9), (50, 0.8)],
        "val/valid2/sys_srcc": [(25, 0.4), (50, 0.6)],
        "train/loss": [(10, 1.0), (20, 0.8)],
    }
    names = plots.CurveNames("system-level SRCC", {"valid1": "validation (carved)"})
    expected = [
        ("loss", "loss", ["training", "validation"]),
        ("selection score: system-level SRCC", "system-level SRCC", ["selection score"]),
        ("system-level SRCC per validation set", "SRCC", ["validation (carved)", "valid2"]),
        ("utterance-level RMSE per validation set", "RMSE", ["validation (carved)"]),
        ("lyrics: system-level SRCC per validation set", "SRCC", ["validation (carved)"]),
        ("train/lr", "lr", ["lr"]),
    ]
    assert panels(plots.curves(history, names=names)) == expected
    # Panels keep their order; series keep the order the sets were recorded in (the loss's: fixed).
    reordered = panels(plots.curves(dict(reversed(history.items())), names=names))
    assert [(title, ylabel) for title, ylabel, _ in reordered] == [(t, y) for t, y, _ in expected]
    assert reordered[0][2] == ["training", "validation"]
    # Unnamed: the selection score and the sets keep generic names.
    unnamed = panels(plots.curves(history))
    assert unnamed[1] == ("selection score", "selection score", ["selection score"])
    assert unnamed[2][2] == ["valid1", "valid2"]


def test_curves_draw_each_series_on_its_panel(tmp_path):
    history = {
        "train/loss": [(10, 1.0), (20, 0.8)],
        "val/loss": [(25, 0.9), (50, 0.7)],
        "val/valid1/sys_srcc": [(25, 0.2), (50, 0.4)],
        "val/valid2/sys_srcc": [(25, 0.4), (50, 0.6)],
    }
    loss, srcc = plots.curves(history).axes
    np.testing.assert_allclose(loss.lines[0].get_xdata(), [10, 20])
    np.testing.assert_allclose(loss.lines[1].get_ydata(), [0.9, 0.7])
    np.testing.assert_allclose(srcc.lines[1].get_ydata(), [0.4, 0.6])
    path = plots.write_curves(history, tmp_path, names=plots.CurveNames("x", {"valid1": "v"}))
    assert path == tmp_path / "curves.png" and path.read_bytes()[:8] == PNG_SIGNATURE


def test_curves_mark_the_selected_checkpoint_on_every_panel():
    history = {"train/loss": [(10, 1.0), (20, 0.8)], "val/selection": [(25, 0.3), (50, 0.5)]}
    for ax in plots.curves(history, selected_step=25).axes:
        marks = [line for line in ax.lines if line.get_label() == plots.SELECTED_LABEL]
        assert len(marks) == 1 and list(marks[0].get_xdata()) == [25, 25]
        assert plots.SELECTED_LABEL in [t.get_text() for t in ax.get_legend().get_texts()]
    assert not any(line.get_label() == plots.SELECTED_LABEL for line in plots.curves(history).axes[0].lines)


def test_empty_history_still_gives_a_curves_file(tmp_path):
    assert plots.write_curves({}, tmp_path).read_bytes()[:8] == PNG_SIGNATURE


def test_plotting_leaves_pyplot_untouched(rows):
    import matplotlib
    import matplotlib.pyplot as plt

    backend = matplotlib.get_backend()
    plots.scatter_figures(rows, evaluate_rows(rows))
    plots.curves({"train/loss": [(1, 1.0)]})
    assert plt.get_fignums() == []
    assert matplotlib.get_backend() == backend
