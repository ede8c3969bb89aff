"""What a run records of its end: why training stopped, the selected step, and how curves name things."""

from __future__ import annotations

import json
import logging
import re
from types import SimpleNamespace

import pytest
from lightning.pytorch.callbacks import EarlyStopping

from sqa.reports import plots
from sqa.training.run import run
from sqa.training.run_outputs import stopped_before_unfreezing, training_end
from sqa.training.selection import TIEBREAK_KEY
from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus


def trainer(step: int, epoch: int, max_steps: int = -1, max_epochs: int | None = 60) -> SimpleNamespace:
    return SimpleNamespace(global_step=step, current_epoch=epoch, max_steps=max_steps, max_epochs=max_epochs)


def stopper(wait_count: int, patience: int = 3) -> EarlyStopping:
    callback = EarlyStopping(monitor="val/selection", patience=patience)
    callback.wait_count = wait_count
    return callback


PER_SET_PANELS = ["system-level SRCC per validation set", "utterance-level RMSE per validation set"]


def test_the_curves_never_draw_the_selection_tiebreak_as_a_panel():
    history = {
        "val/selection": [(4, 0.5), (8, 0.4)],
        "val/p1/sys_srcc": [(4, 0.1), (8, 0.3)],
        "val/p1/utt_rmse": [(4, 0.6), (8, 0.5)],
        TIEBREAK_KEY: [(4, 0.6), (8, 0.5)],
        "train/lr": [(2, 0.01)],
    }
    titles = [panel.title for panel in plots.curve_panels(history, plots.CurveNames("system-level SRCC"))]
    assert titles == ["selection score: system-level SRCC", *PER_SET_PANELS, "train/lr"]


def test_training_end_says_which_limit_or_callback_stopped_training():
    patience = training_end(trainer(75, 2, max_steps=75), stopper(3))
    assert patience == {
        "step": 75,
        "stopped_by": "early_stopping",
        "reason": "early stopping: val/selection did not improve in 3 validation checks",
    }
    # One check short of the patience: the limit that was reached.
    steps = training_end(trainer(75, 2, max_steps=75), stopper(2))
    assert (steps["stopped_by"], steps["reason"]) == ("max_steps", "trainer.max_steps=75 reached")
    assert training_end(trainer(74, 2, max_steps=75), None)["stopped_by"] == "callback"
    epochs = training_end(trainer(900, 60, max_epochs=60), stopper(0))
    assert (epochs["stopped_by"], epochs["reason"]) == ("max_epochs", "trainer.max_epochs=60 reached")
    assert training_end(trainer(900, 59, max_epochs=60), None)["stopped_by"] == "callback"
    # Early stopping for another reason (a non-finite score) says it in Lightning's words.
    nan = stopper(0)
    nan.stopping_reason_message = "Monitored metric val/selection = nan is not finite."
    assert training_end(trainer(50, 1), nan)["reason"] == (
        "early stopping: Monitored metric val/selection = nan is not finite."
    )


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return write_per_system_corpus(tmp_path_factory.mktemp("per_system"))


def test_a_run_records_its_selected_step_and_why_it_stopped_and_names_its_curves(
    manifest, tmp_path, monkeypatch
):
    drawn = []
    real = plots.curves
    monkeypatch.setattr(plots, "curves", lambda *args: drawn.append(args) or real(*args))
    run(compose_train([*tiny_run_overrides(manifest), "trainer.max_steps=12"]), tmp_path)
    info = json.loads((tmp_path / "run_info.json").read_text())
    assert info["training_end"] == {
        "step": 12,
        "stopped_by": "max_steps",
        "reason": "trainer.max_steps=12 reached",
    }
    step = info["selection"]["selected_step"]
    assert info["selection"]["best_checkpoint"] == f"best-step={step}.ckpt"
    card = (tmp_path / "export" / "README.md").read_text()
    assert f"- exported weights: step {step} (`best-step={step}.ckpt`)" in card
    assert "- training stopped at step 12: trainer.max_steps=12 reached" in card
    # Two validation systems: the rule falls back to utterance RMSE; the manifest's set has no domain.
    ((history, selected, names),) = drawn
    assert selected == step
    assert names == plots.CurveNames("utterance-level RMSE", {"default": "valid/default"})
    # Selecting on utterance RMSE, the tiebreak is the selection score again: recorded, not drawn.
    assert history[TIEBREAK_KEY] == history["val/selection"]
    titles = [panel.title for panel in plots.curve_panels(history, names)]
    assert titles == ["loss", "selection score: utterance-level RMSE", *PER_SET_PANELS]
    log = (tmp_path / "train.log").read_text()
    assert "Model summary:" in log and "Total params" in log and "FLOPs" not in log
    assert "Training stopped at step 12: trainer.max_steps=12 reached" in log
    # One name for the validation set on the console, in run_info.json, the model card and the plots.
    assert re.search(r"^valid/default +8 ", log, flags=re.MULTILINE)
    assert "utterance-level rmse over valid/default (min)" in log
    assert info["splits"]["valid/default"]["clips"] == info["corpus"]["clips"]["valid/default"] == 8
    assert list(info["corpus"]["clips"]) == ["train", "valid/default", "test/test"]
    assert "- valid/default: 8 clips" in card and "- test/test: 9 clips" in card


@pytest.mark.parametrize("freeze", [0, 20])
def test_a_run_that_stops_early_says_so(freeze, manifest, tmp_path, caplog):
    # No learning: the selection score never improves, so patience 1 stops at the second check.
    overrides = ["optim.lr=0", "early_stopping_patience=1", "trainer.max_steps=40"]
    overrides.append(f"finetune.freeze_backbone_steps={freeze}")
    with caplog.at_level(logging.WARNING, logger="sqa.training.run"):
        run(compose_train([*tiny_run_overrides(manifest), *overrides]), tmp_path)
    end = json.loads((tmp_path / "run_info.json").read_text())["training_end"]
    assert (end["step"], end["stopped_by"]) == (8, "early_stopping")
    assert end["reason"] == "early stopping: val/selection did not improve in 1 validation check"
    # With the backbone still frozen at step 8 of 40, the run says it never learned.
    never = [m for m in caplog.messages if "the backbone never learned" in m]
    assert never == ([stopped_before_unfreezing(end, 20, 40)] if freeze else [])


@pytest.mark.parametrize(
    ("stopped_by", "step", "freeze", "max_steps", "warned"),
    [
        ("early_stopping", 350, 400, 500, True),
        ("early_stopping", 350, 400, -1, True),  # trained by epochs: the backbone was to learn
        ("early_stopping", 350, 400, None, True),
        ("early_stopping", 400, 400, 500, False),  # the step it unfroze: it had its turn
        ("early_stopping", 350, 400, 400, False),  # frozen for the whole run by design
        ("early_stopping", 350, 0, 500, False),  # never frozen
        ("max_steps", 350, 400, 500, False),
    ],
)
def test_a_run_stopped_early_before_its_backbone_unfroze_is_warned(
    stopped_by, step, freeze, max_steps, warned
):
    end = {"step": step, "stopped_by": stopped_by, "reason": ""}
    warning = stopped_before_unfreezing(end, freeze, max_steps)
    assert (warning is not None) == warned
    if warned:
        assert warning == (
            f"early stopping ended training at step {step}, before finetune.freeze_backbone_steps={freeze}: "
            "the backbone never learned. early_stopping_patience=null (or a larger patience) lets it"
        )
