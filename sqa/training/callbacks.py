"""sqa's training callbacks: the classes that `conf/callbacks/` names, and `StartedOver`.

The best checkpoint and early stopping follow the selection rule's tie rule
(`SelectionCheckpoint`, `SelectionEarlyStopping`). `sqa.training.run_callbacks` builds a run's
callbacks from the `callbacks` config group; `sqa.training.checkpoint_io` writes and reads the
checkpoint files; `sqa.training.model_summary` lays out `ParameterSummary`'s table.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, ModelSummary
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from sqa.core.run_folder import discard_previous, record_point
from sqa.core.run_lock import claim_holding
from sqa.reports.plots import History
from sqa.training.checkpoint_io import AtomicCheckpointIO, checkpoint_step
from sqa.training.model_summary import summary_table
from sqa.training.run_callbacks import (
    CHECKPOINTS,
    REQUIRED,
    SELECTION_WATCHERS,
    instantiate_callbacks,
    progress_bar,
)
from sqa.training.selection import LEVEL_NAMES, TIEBREAK_KEY, TIEBREAK_LEVEL, TIEBREAK_METRIC, better

# The callback classes configs name live here; the helpers that moved out stay importable here.
__all__ = [
    "CHECKPOINTS",
    "REQUIRED",
    "SELECTION_WATCHERS",
    "AtomicCheckpointIO",
    "MetricHistory",
    "ParameterSummary",
    "SelectionCheckpoint",
    "SelectionEarlyStopping",
    "StartedOver",
    "ValidationLog",
    "checkpoint_step",
    "instantiate_callbacks",
    "logged_tiebreak",
    "progress_bar",
    "summary_table",
]

log = logging.getLogger(__name__)


class ParameterSummary(ModelSummary):
    """Lightning's layer and parameter summary, logged (so also in train.log), less FLOPs not counted.

    Lightning counts FLOPs only on a module's `example_input_array`, which MOSModule has none of
    (clips differ in length), so its FLOPs column and "Total FLOPs" would read 0.
    """

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int = 0,
        **summarize_kwargs: Any,
    ) -> None:
        """Log the summary table (Lightning before 2.5.2 passes no `total_flops`)."""
        table = summary_table(summary_data, trainable_parameters, total_parameters, model_size, total_flops)
        log.info("Model summary:\n%s", table)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """The summary, then what of its trainable count a frozen backbone holds, and for how long."""
        super().on_fit_start(trainer, pl_module)
        note = frozen_note(pl_module, trainer.max_steps)
        if note is not None and trainer.is_global_zero:
            log.info("%s", note)


def frozen_note(module: L.LightningModule, max_steps: int) -> str | None:
    """The backbone's trainable parameters frozen for `freeze_backbone_steps`, in a line; None if none.

    Lightning counts them trainable (they are, once unfrozen); a frozen backbone beside "2.5 M
    Trainable params" reads as a contradiction without it.
    """
    steps = int(getattr(module, "freeze_backbone_steps", 0) or 0)
    backbone = getattr(getattr(module, "predictor", None), "backbone", None)
    if steps <= 0 or backbone is None:
        return None
    count = sum(p.numel() for p in backbone.parameters() if p.requires_grad)
    if count == 0:
        return None
    human = get_human_readable_count(count).strip()
    rest = sum(p.numel() for p in module.parameters() if p.requires_grad) - count
    if 0 < max_steps <= steps:
        when = f"frozen for the whole run ({max_steps} steps)"
    else:
        when = f"frozen for the first {steps} steps, then trained"
    return (
        f"Of the trainable params, the backbone's {human} are {when}; "
        f"{get_human_readable_count(rest).strip()} (head and branches) train from the first step"
    )


def logged_tiebreak(values: Mapping[str, Any]) -> float:
    """The tiebreak value of the latest validation among logged `values` (NaN where none was logged)."""
    value = values.get(TIEBREAK_KEY)
    return math.nan if value is None else float(value)


class SelectionCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose equal scores are ordered by the utterance RMSE (`selection.better`).

    Lightning's own keeps the earlier of two equal scores, so a nearly constant first model wins
    every tie of a coarse ranking score. Here a check whose score is within `tie_tolerance`
    (`selection.tie_tolerance`) of a kept one beats it when its logged `val/selection_tiebreak`
    is lower. Overrides Lightning 2.6's `check_monitor_top_k` and `_update_best_and_save`.
    """

    def __init__(self, *args: Any, tie_tolerance: float = 1e-6, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tie_tolerance = tie_tolerance
        # The tiebreak value of every kept checkpoint, by path, as `best_k_models` holds scores.
        self.tiebreaks: dict[str, float] = {}

    @property
    def state_key(self) -> str:
        """ModelCheckpoint's key: run directories saved before the tie rule resume with their best."""
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)

    def _beats(self, score: float, tiebreak: float, path: str) -> bool:
        """Whether (score, tiebreak) beats the kept checkpoint at `path`."""
        kept = float(self.best_k_models[path])
        return better(
            score, tiebreak, kept, self.tiebreaks.get(path, math.nan), self.mode, self.tie_tolerance
        )

    def check_monitor_top_k(self, trainer: L.Trainer, current: torch.Tensor | None = None) -> bool:
        """Whether this check's score (and tiebreak) enters the kept checkpoints."""
        if current is None:
            return False
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        decision = self._beats(
            float(current), logged_tiebreak(trainer.callback_metrics), self.kth_best_model_path
        )
        return trainer.strategy.reduce_boolean_decision(decision)

    def _update_best_and_save(
        self, current: torch.Tensor, trainer: L.Trainer, monitor_candidates: dict[str, torch.Tensor]
    ) -> None:
        """Save this check, dropping the worst kept one if full, and name the best and worst anew."""
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        del_filepath = None
        if len(self.best_k_models) == k and k > 0:
            del_filepath = self.kth_best_model_path
            self.best_k_models.pop(del_filepath)
            self.tiebreaks.pop(del_filepath, None)
        if torch.isnan(current):
            # As Lightning does: a NaN score is kept as the worst possible one.
            current = torch.tensor(float("inf" if self.mode == "min" else "-inf"), device=current.device)
        filepath = self._get_metric_interpolated_filepath_name(monitor_candidates, trainer, del_filepath)
        self.current_score = current
        self.best_k_models[filepath] = current
        self.tiebreaks[filepath] = logged_tiebreak(monitor_candidates)
        # In the order the checks were kept: a full tie leaves the earlier one best.
        paths = list(self.best_k_models)
        best = worst = paths[0]
        for path in paths[1:]:
            score, tiebreak = float(self.best_k_models[path]), self.tiebreaks[path]
            if self._beats(score, tiebreak, best):
                best = path
            if not self._beats(score, tiebreak, worst):
                worst = path
        if len(self.best_k_models) == k:
            self.kth_best_model_path, self.kth_value = worst, self.best_k_models[worst]
        self.best_model_path, self.best_model_score = best, self.best_k_models[best]
        if self.verbose:
            rank_zero_info(
                f"step {trainer.global_step}: {self.monitor!r} reached {float(current):0.5f} "
                f"(best {float(self.best_model_score):0.5f}), saving model to {filepath!r}"
            )
        self._save_checkpoint(trainer, filepath)
        if del_filepath and self._should_remove_checkpoint(trainer, del_filepath, filepath):
            self._remove_checkpoint(trainer, del_filepath)

    def state_dict(self) -> dict[str, Any]:
        """ModelCheckpoint's state and the kept checkpoints' tiebreak values."""
        return {**super().state_dict(), "tiebreaks": dict(self.tiebreaks)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state; a checkpoint saved before the tie rule has no tiebreak values (NaN)."""
        super().load_state_dict(state_dict)
        if state_dict.get("dirpath", self.dirpath) == self.dirpath:
            self.tiebreaks = dict(state_dict.get("tiebreaks", {}))


class SelectionEarlyStopping(EarlyStopping):
    """EarlyStopping under `SelectionCheckpoint`'s tie rule.

    A check whose score ties the best within `tie_tolerance` and has a lower utterance RMSE
    becomes the selected checkpoint, so it counts as an improvement and patience restarts; a tie
    without a lower RMSE counts as none. Overrides Lightning 2.6's `_run_early_stopping_check`
    and `_evaluate_stopping_criteria`.
    """

    def __init__(self, *args: Any, tie_tolerance: float = 1e-6, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tie_tolerance = tie_tolerance
        self.best_tiebreak = math.nan
        self._tiebreak = math.nan

    @property
    def state_key(self) -> str:
        """EarlyStopping's key: run directories saved before the tie rule resume with their count."""
        return super().state_key.replace(type(self).__qualname__, EarlyStopping.__qualname__, 1)

    def _run_early_stopping_check(self, trainer: L.Trainer) -> None:
        """Read this check's tiebreak value, then decide as EarlyStopping does."""
        self._tiebreak = logged_tiebreak(trainer.callback_metrics)
        super()._run_early_stopping_check(trainer)

    def _evaluate_stopping_criteria(self, current: torch.Tensor) -> tuple[bool, str | None]:
        """EarlyStopping's decision, with ties within `tie_tolerance` decided by the tiebreak."""
        score, best = float(current), float(self.best_score)
        if math.isfinite(score) and math.isfinite(best) and abs(score - best) <= self.tie_tolerance:
            if better(score, self._tiebreak, best, self.best_tiebreak, self.mode, self.tie_tolerance):
                self.best_score, self.best_tiebreak, self.wait_count = current, self._tiebreak, 0
                reason = (
                    f"Metric {self.monitor} tied the best score {best:.4f} with a lower "
                    f"{LEVEL_NAMES[TIEBREAK_LEVEL]}-level {TIEBREAK_METRIC} ({self._tiebreak:.4f})"
                )
                return False, reason
            # A tie that does not win is no improvement: judged as the best score itself would be.
            current = self.best_score.to(current.device)
        before = self.best_score
        should_stop, reason = super()._evaluate_stopping_criteria(current)
        if self.best_score is not before:
            self.best_tiebreak = self._tiebreak
        return should_stop, reason

    def state_dict(self) -> dict[str, Any]:
        """EarlyStopping's state and the best check's tiebreak value."""
        return {**super().state_dict(), "best_tiebreak": self.best_tiebreak}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state; a checkpoint saved before the tie rule has no tiebreak value (NaN)."""
        super().load_state_dict(state_dict)
        self.best_tiebreak = float(state_dict.get("best_tiebreak", math.nan))


class ValidationLog(L.Callback):
    """Logs the step, epoch, training loss and selection score after every validation."""

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """One line per validation, for the console and train.log."""
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        values = ", ".join(
            f"{key} {float(value):.4f}"
            for key, value in sorted(trainer.callback_metrics.items())
            if key in ("train/loss", "val/selection")
        )
        log.info("step %d (epoch %d): %s", trainer.global_step, trainer.current_epoch, values)


# Steps between the records of what a run has created (a listing of its directory each).
RECORD_EVERY = 50


class StartedOver(L.Callback):
    """Removes the previous run's outputs that `overwrite=true` set aside, once training starts.

    By then every part of the configuration has been built and used (model, data loaders,
    optimizer), so a run that fails on its configuration never costs the previous run. After
    each validation and every RECORD_EVERY steps it records what the run has created so far
    (`sqa.core.run_lock.record_point`), so that a run killed later leaves its checkpoints and logs
    recorded as sqa's, for `resume=true` to continue. A candidate trains in a folder inside the
    claimed run directory (`<run dir>/candidates/<name>/`) and acts on that directory's claim: the
    first candidate to start training discards the previous run.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir

    def claimed(self) -> Path:
        """The claimed folder the run writes in: its run directory, or the one holding a candidate's."""
        return claim_holding(self.run_dir) or self.run_dir

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Discard the set-aside outputs (first rank only: the others own nothing)."""
        if trainer.is_global_zero:
            discard_previous(self.claimed())

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record the run's new entries as sqa's (first rank only)."""
        if trainer.is_global_zero:
            record_point(self.claimed())

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        """Record the run's new entries (its logger folders) every RECORD_EVERY steps (first rank only)."""
        if trainer.is_global_zero and trainer.global_step % RECORD_EVERY == 1:
            record_point(self.run_dir)


class MetricHistory(L.Callback):
    """Records `train/*` values every `every_n_steps` steps and `val/*` values after each validation.

    Works with any logger or none, as it reads `trainer.callback_metrics`. The history travels in
    checkpoints, so a resumed run draws its curves from the first step.
    """

    def __init__(self, every_n_steps: int | None = None) -> None:
        self.every_n_steps = every_n_steps
        self.history: History = {}
        self._last_train_step = -1

    def _record(self, trainer: L.Trainer, prefix: str) -> None:
        step = trainer.global_step
        for key, value in trainer.callback_metrics.items():
            if key.startswith(prefix):
                self.history.setdefault(key, []).append((step, float(value)))

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        """Record the training values at the logging interval (reading them syncs with the device)."""
        every = self.every_n_steps or trainer.log_every_n_steps
        step = trainer.global_step
        # Gradient accumulation repeats a global step over several batches; record each step once.
        if step % every == 0 and step != self._last_train_step:
            self._last_train_step = step
            self._record(trainer, "train/")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Record the validation values (hooked here because epoch-end callbacks run before logging)."""
        if not trainer.sanity_checking:
            self._record(trainer, "val/")

    def state_dict(self) -> dict[str, Any]:
        """The recorded history, saved with each checkpoint."""
        return {"history": {key: [list(point) for point in values] for key, values in self.history.items()}}

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Restore the history when resuming a fit."""
        # Testing from the best checkpoint restores callbacks too; that must not cut the history.
        state = checkpoint.get("callbacks", {}).get(self.state_key)
        if trainer.state.fn == TrainerFn.FITTING and state:
            self.history = {
                key: [(int(s), float(v)) for s, v in values] for key, values in state["history"].items()
            }
