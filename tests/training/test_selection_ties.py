"""Tied selection scores: ordered by the utterance RMSE for the best checkpoint and early stopping."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from sqa.training.callbacks import SelectionCheckpoint, SelectionEarlyStopping, instantiate_callbacks
from sqa.training.run import build
from sqa.training.selection import TIEBREAK_KEY, better
from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus

# Validation checks every EVERY training steps.
EVERY = 2


def test_a_tie_goes_to_the_lower_tiebreak_and_a_non_tie_to_the_better_score():
    # Ties: either mode, the lower tiebreak (utterance RMSE) wins; equal tiebreaks keep the best.
    assert better(0.5, 0.4, 0.5, 0.9, "max", 1e-6)
    assert not better(0.5, 0.9, 0.5, 0.4, "max", 1e-6)
    assert better(0.3, 0.4, 0.3, 0.9, "min", 1e-6)
    assert not better(0.5, 0.4, 0.5, 0.4, "max", 1e-6)
    # Not a tie: the score decides, whatever the tiebreak.
    assert better(0.75, 0.9, 0.5, 0.1, "max", 1e-6)
    assert not better(0.25, 0.1, 0.5, 0.9, "max", 1e-6)
    assert better(0.25, 0.9, 0.5, 0.1, "min", 1e-6)
    # The tolerance: a difference of exactly the tolerance ties, a larger one does not.
    assert better(0.5, 0.1, 0.75, 0.9, "max", 0.25)
    assert not better(0.5, 0.1, 0.8125, 0.9, "max", 0.25)
    assert better(0.75, 0.1, 0.5, 0.9, "min", 0.25)
    assert not better(0.8125, 0.1, 0.5, 0.9, "min", 0.25)
    # NaN: never beats the best; any number beats a NaN best; a NaN tiebreak never wins a tie.
    assert not better(math.nan, 0.1, 0.5, 0.9, "max", 1e-6)
    assert better(0.1, 0.9, math.nan, 0.1, "max", 1e-6)
    assert not better(0.5, math.nan, 0.5, 0.9, "max", 1e-6)
    assert better(0.5, 0.9, 0.5, math.nan, "max", 1e-6)


class Scripted(L.LightningModule):
    """Logs a given selection score and tiebreak at each validation check (its weight never moves)."""

    def __init__(self, scores: list[float], tiebreaks: list[float]) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(1))
        self.scores, self.tiebreaks, self.checks = scores, tiebreaks, 0

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        return (self.weight * batch[0]).sum()

    def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
        return None

    def on_validation_epoch_end(self) -> None:
        self.log("val/selection", self.scores[self.checks])
        self.log(TIEBREAK_KEY, self.tiebreaks[self.checks])
        self.checks += 1

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)


def fit(scores: list[float], tiebreaks: list[float], callbacks: list[L.Callback], root: Path) -> Scripted:
    """Train the scripted module through one check per score."""
    module = Scripted(scores, tiebreaks)
    ones = TensorDataset(torch.ones(EVERY * len(scores), 1))
    L.Trainer(
        max_steps=EVERY * len(scores),
        val_check_interval=EVERY,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        default_root_dir=root,
        accelerator="cpu",
    ).fit(module, DataLoader(ones, batch_size=1), DataLoader(TensorDataset(torch.ones(1, 1))))
    return module


def chosen_check(callback: ModelCheckpoint) -> int:
    """The index of the check whose checkpoint `callback` holds as best (files are best-step=N)."""
    return int(Path(callback.best_model_path).stem.split("=")[1]) // EVERY - 1


def checkpoint(tmp_path: Path, mode: str = "max", **kwargs) -> SelectionCheckpoint:
    return SelectionCheckpoint(
        dirpath=tmp_path, filename="best-{step}", monitor="val/selection", mode=mode, **kwargs
    )


@pytest.mark.parametrize(
    ("mode", "scores", "tiebreaks", "chosen"),
    [
        # Three tied scores: the lowest tiebreak wins (Lightning's own keeps the first).
        ("max", [0.5, 0.5, 0.5], [0.9, 0.4, 0.6], 1),
        ("min", [0.7, 0.7, 0.7], [0.9, 0.8, 0.3], 2),
        # No tie: the better score wins with a worse tiebreak.
        ("max", [0.5, 0.625, 0.5625], [0.1, 0.9, 0.05], 1),
        ("min", [0.5, 0.375, 0.5], [0.1, 0.9, 0.05], 1),
        # A full tie keeps the earlier check; a NaN tiebreak never wins a tie.
        ("max", [0.5, 0.5], [0.3, 0.3], 0),
        ("max", [0.5, 0.5, 0.5], [0.3, math.nan, 0.4], 0),
    ],
)
def test_the_best_checkpoint_follows_the_tie_rule(tmp_path, mode, scores, tiebreaks, chosen):
    callback = checkpoint(tmp_path / "tie", mode)
    fit(scores, tiebreaks, [callback], tmp_path)
    assert chosen_check(callback) == chosen
    assert callback.tiebreaks[callback.best_model_path] == pytest.approx(tiebreaks[chosen], nan_ok=True)
    assert [p.name for p in (tmp_path / "tie").iterdir()] == [Path(callback.best_model_path).name]
    # Lightning's own checkpoint callback keeps the first of equal scores.
    plain = ModelCheckpoint(
        dirpath=tmp_path / "plain", filename="best-{step}", monitor="val/selection", mode=mode
    )
    fit(scores, tiebreaks, [plain], tmp_path)
    first_of_best = scores.index(max(scores) if mode == "max" else min(scores))
    assert chosen_check(plain) == first_of_best


def test_kept_checkpoints_are_ordered_by_the_tie_rule(tmp_path):
    callback = checkpoint(tmp_path, save_top_k=2)
    fit([0.5, 0.5, 0.5, 0.25], [0.9, 0.4, 0.6, 0.1], [callback], tmp_path)
    # The first check (tiebreak 0.9) was dropped for the third; the fourth never entered.
    assert chosen_check(callback) == 1
    assert sorted(p.name for p in tmp_path.glob("*.ckpt")) == ["best-step=4.ckpt", "best-step=6.ckpt"]
    assert Path(callback.kth_best_model_path).name == "best-step=6.ckpt"


def test_the_tie_state_travels_in_checkpoints_under_lightnings_key(tmp_path):
    callback = checkpoint(tmp_path)
    fit([0.5, 0.5], [0.9, 0.4], [callback], tmp_path)
    restored = checkpoint(tmp_path)
    restored.load_state_dict(callback.state_dict())
    assert restored.tiebreaks == callback.tiebreaks and restored.best_model_path == callback.best_model_path
    # A run saved before the tie rule (ModelCheckpoint, EarlyStopping) resumes into these callbacks.
    plain = ModelCheckpoint(dirpath=tmp_path, filename="best-{step}", monitor="val/selection", mode="max")
    assert restored.state_key == plain.state_key
    stopping = SelectionEarlyStopping(monitor="val/selection", mode="max", patience=2)
    assert stopping.state_key == EarlyStopping(monitor="val/selection", mode="max", patience=2).state_key
    old = plain.state_dict()
    restored.load_state_dict(old)
    assert restored.tiebreaks == {}


@pytest.mark.parametrize(
    ("scores", "tiebreaks", "checks"),
    [
        # Tied scores with a falling RMSE keep improving the selected checkpoint: no stop.
        ([0.5] * 5, [0.9, 0.8, 0.7, 0.6, 0.5], 5),
        # Tied scores with a rising RMSE improve nothing: stop after the patience of 2.
        ([0.5] * 5, [0.5, 0.6, 0.7, 0.8, 0.9], 3),
        # A better score is an improvement, whatever its RMSE.
        ([0.5, 0.625, 0.75, 0.875, 1.0], [0.1, 0.5, 0.6, 0.7, 0.8], 5),
    ],
)
def test_early_stopping_counts_a_won_tie_as_an_improvement(tmp_path, scores, tiebreaks, checks):
    stopping = SelectionEarlyStopping(monitor="val/selection", mode="max", patience=2, tie_tolerance=1e-6)
    assert fit(scores, tiebreaks, [stopping], tmp_path).checks == checks
    # Lightning's own counts every tie as no improvement.
    plain = EarlyStopping(monitor="val/selection", mode="max", patience=2)
    assert fit(scores, tiebreaks, [plain], tmp_path).checks == (5 if scores[1] > scores[0] else 3)


def validation_predictions(module: L.LightningModule, loaders: list[DataLoader]) -> list[float]:
    """The module's predictions for every validation clip, on the corpus's scale."""
    module.eval()
    with torch.no_grad():
        return [
            float(score)
            for loader in loaders
            for batch in loader
            for score in module.predictor.to_scale(module(batch).scores.float())[:, 0]
        ]


def test_a_constant_first_model_does_not_win_a_tie_over_a_better_later_one(tmp_path):
    # Two validation systems: the system-level SRCC is undefined (counted 0) at every check, so
    # every score ties. The model starts as the constant predictor (the head's output layer at
    # zero: 2·tanh(0) + 3 = 3 for every clip), so the first check's model is nearly constant.
    manifest = write_per_system_corpus(tmp_path / "corpus")
    cfg = compose_train(
        [*tiny_run_overrides(manifest), "selection.fallback=null", "+callbacks.checkpoint.save_top_k=-1"]
    )
    L.seed_everything(0)
    datamodule, module = build(cfg)
    torch.nn.init.zeros_(module.predictor.head[-1].weight)
    torch.nn.init.zeros_(module.predictor.head[-1].bias)
    callbacks = instantiate_callbacks(cfg, tmp_path / "run", module.selection.mode, 1, patience=None)
    L.Trainer(
        max_steps=30,
        val_check_interval=EVERY,
        num_sanity_val_steps=0,
        callbacks=list(callbacks.values()),
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
    ).fit(module, datamodule=datamodule)
    history, chosen = callbacks["history"].history, callbacks["checkpoint"]
    assert len({value for _, value in history["val/selection"]}) == 1 and len(history["val/selection"]) > 5
    rmse = dict(history[TIEBREAK_KEY])
    steps = sorted(rmse)
    best_step = int(Path(chosen.best_model_path).stem.split("=")[1])
    assert rmse[best_step] == min(rmse.values()) < rmse[steps[0]]
    # The first check's model is nearly constant; the chosen one spreads its predictions out.
    loaders = datamodule.val_dataloader()
    spread = {}
    for step in (steps[0], best_step):
        state = torch.load(tmp_path / "run" / "checkpoints" / f"best-step={step}.ckpt", weights_only=False)
        module.load_state_dict(state["state_dict"])
        spread[step] = statistics.pstdev(validation_predictions(module, loaders))
    assert spread[steps[0]] < 0.1 and spread[best_step] > 3 * spread[steps[0]]
