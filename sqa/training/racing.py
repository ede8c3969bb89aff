"""When a model stops before its last step: raced out by a better candidate, or its fine-tuning stalled.

Both are Lightning callbacks that judge at each validation check (a round: `val_check_interval`
steps) and set `trainer.should_stop`; each keeps `stopped`, `{"step", "why"}` for run_info.json,
and its state in the checkpoints, so a resumed run decides as an uninterrupted one.

- `Race`: candidates train one after the other, and each is judged against the leader, the best
  finished candidate on validation. A candidate whose best check so far is worse than the leader
  beyond both 95 % intervals (the intervals do not overlap) stops. Without intervals (bootstrap=0)
  nothing is proven and nothing stops. A candidate that fine-tunes a pretrained backbone is judged
  from its first check after the frozen steps: those cost a head's steps on frames computed once,
  and the race is there to save the steps that cost.
- `FineTunePatience`: after the backbone unfreezes (`finetune.freeze_backbone_steps`), training goes
  on only while validation improves: `finetune.patience_steps` steps without a new selected
  checkpoint end it. A run whose best checkpoint is frozen then pays for `patience_steps`
  fine-tuning steps, not for all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import lightning as L

from sqa import metrics
from sqa.core.prediction import OVERALL
from sqa.training.callbacks import logged_tiebreak
from sqa.training.prediction_rows import labelled
from sqa.training.selection import better as selection_better
from sqa.training.selection import selection_score

SELECTION_KEY = "val/selection"


@dataclass(frozen=True)
class Standing:
    """A model's validation score and its 95 % interval (None: no interval), on the comparison's metric."""

    value: float
    interval: tuple[float, float] | None

    def record(self) -> dict[str, Any]:
        """Plain values for run_info.json (NaN as null)."""
        value = self.value if math.isfinite(self.value) else None
        return {"value": value, "ci": list(self.interval) if self.interval else None}


def behind(candidate: Standing, leader: Standing, mode: str) -> bool:
    """Whether `candidate` is worse than `leader` beyond both intervals (`mode`: max | min)."""
    if candidate.interval is None or leader.interval is None:
        return False
    if mode == "max":
        return candidate.interval[1] < leader.interval[0]
    return candidate.interval[0] > leader.interval[1]


def standing(results: dict[str, Any], metric: str, level: str) -> Standing:
    """`metric` at `level` over the validation sets of `results` (weighted by size), with its interval."""
    sets = {name: block for name, block in results.items() if name != metrics.AVERAGE_KEY}
    value = selection_score(sets, metric, level)
    block = results.get(metrics.AVERAGE_KEY) if len(sets) > 1 else next(iter(sets.values()), None)
    ci = ((block or {}).get(metrics.CI_KEY) or {}).get(level, {}).get(metric)
    return Standing(value, (float(ci[0]), float(ci[1])) if ci else None)


def scored(rows_by_set: dict[str, list[dict[str, Any]]], bootstrap: int, seed: int) -> dict[str, Any]:
    """Metric blocks (per set and averaged, with intervals) of validation prediction rows by set."""
    rows = [{**r, "test_set": name} for name, group in rows_by_set.items() for r in group]
    return metrics.evaluate_sets(
        *labelled(rows, OVERALL), bootstrap=bootstrap, seed=seed, apart=metrics.ROLES
    )


def improves(value: float, than: float, mode: str) -> bool:
    """Whether `value` is better than `than` under `mode` (NaN is never better; anything beats NaN)."""
    if math.isnan(value):
        return False
    return math.isnan(than) or (value > than if mode == "max" else value < than)


class StopRule(L.Callback):
    """A rule that may end training at a validation check: `stopped` ({"step", "why"}) once it has.

    Its state is keyed by its class alone, so a resumed run finds it whatever its arguments; a run
    resumed from a checkpoint saved after the rule stopped it ends at once, where the
    uninterrupted run ended.
    """

    # How run_info.json's training_end names this stop.
    kind = ""
    stopped: dict[str, Any] | None = None

    @property
    def state_key(self) -> str:
        """The class's name: one rule of a kind per trainer."""
        return type(self).__qualname__

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """End at once a run resumed after this rule stopped it."""
        if self.stopped:
            trainer.should_stop = True

    @staticmethod
    def at_last_step(trainer: L.Trainer) -> bool:
        """Whether training ends at this check anyway (`max_steps` reached): no stop to record."""
        return 0 < (getattr(trainer, "max_steps", -1) or -1) <= trainer.global_step

    def stop(self, trainer: L.Trainer, why: str) -> None:
        """Stop training at this check for `why` (the fit's line "Training stopped at step N" says it)."""
        self.stopped = {"step": trainer.global_step, "why": why}
        trainer.should_stop = True


class Race(StopRule):
    """Stops a candidate at a validation check once its best so far is behind `leader` beyond both intervals.

    `name` is the leader's, `metric`/`level`/`mode` the candidates' comparison, `start_step` the
    first step at which it judges, `bootstrap` and `seed` those of the intervals.
    """

    kind = "race"

    def __init__(
        self,
        leader: Standing,
        name: str,
        metric: str,
        level: str,
        mode: str,
        start_step: int = 0,
        bootstrap: int = 1000,
        seed: int = 0,
    ) -> None:
        self.leader, self.name = leader, name
        self.metric, self.level, self.mode = metric, level, mode
        self.start_step, self.bootstrap, self.seed = start_step, bootstrap, seed
        self.best: Standing | None = None
        self.stopped = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Judge this check: keep the best standing so far; stop where it is behind the leader."""
        rows = getattr(pl_module, "valid_rows", None)
        if trainer.sanity_checking or not rows:
            return
        now = standing(scored(rows, self.bootstrap, self.seed), self.metric, self.level)
        if self.best is None or improves(now.value, self.best.value, self.mode):
            self.best = now
        step = trainer.global_step
        if step < self.start_step or self.stopped or self.at_last_step(trainer):
            return
        if not behind(self.best, self.leader, self.mode):
            return
        lo, hi = self.best.interval or (math.nan, math.nan)
        llo, lhi = self.leader.interval or (math.nan, math.nan)
        why = (
            f"behind {self.name} beyond both intervals: validation {self.level} {self.metric} "
            f"{self.best.value:.4g} [{lo:.4g}, {hi:.4g}] "
            f"against {self.leader.value:.4g} [{llo:.4g}, {lhi:.4g}]"
        )
        self.stop(trainer, why)

    def state_dict(self) -> dict[str, Any]:
        """The best standing so far and the stop, if any."""
        best = None if self.best is None else [self.best.value, list(self.best.interval or [])]
        return {"best": best, "stopped": self.stopped}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the best standing and the stop."""
        best = state_dict.get("best")
        if best is not None:
            value, ci = best
            self.best = Standing(float(value), (float(ci[0]), float(ci[1])) if ci else None)
        self.stopped = state_dict.get("stopped")


class FineTunePatience(StopRule):
    """Ends training `patience_steps` steps after the later of unfreezing and the last improvement.

    An improvement is a check that `SelectionCheckpoint` selects: a better `val/selection` in
    `mode`, ties within `tolerance` won by the lower utterance RMSE (`selection.better`). It is
    judged here, before the checkpoint callbacks run (Lightning calls them last), so the decision
    is in the checkpoint saved at this check.
    """

    kind = "finetune_patience"

    def __init__(self, freeze_steps: int, patience_steps: int, mode: str, tolerance: float = 1e-6) -> None:
        if patience_steps <= 0:
            raise ValueError(
                f"finetune.patience_steps must be a number of steps above 0, got {patience_steps}"
            )
        self.freeze_steps, self.patience_steps = int(freeze_steps), int(patience_steps)
        self.mode, self.tolerance = mode, tolerance
        self.best, self.best_tiebreak = math.nan, math.nan
        self.improved_at = 0
        self.stopped = None

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Note an improvement; stop where fine-tuning has gone `patience_steps` without one."""
        if trainer.sanity_checking or SELECTION_KEY not in trainer.callback_metrics:
            return
        step = trainer.global_step
        score = float(trainer.callback_metrics[SELECTION_KEY])
        tiebreak = logged_tiebreak(trainer.callback_metrics)
        if selection_better(score, tiebreak, self.best, self.best_tiebreak, self.mode, self.tolerance):
            self.best, self.best_tiebreak, self.improved_at = score, tiebreak, step
        since = max(self.improved_at, self.freeze_steps)
        if step <= self.freeze_steps or self.stopped or self.at_last_step(trainer):
            return
        if step - since < self.patience_steps:
            return
        why = (
            f"fine-tuning did not improve validation in {step - since} steps "
            f"(finetune.patience_steps={self.patience_steps}); the best check is step {self.improved_at}'s"
        )
        self.stop(trainer, why)

    def state_dict(self) -> dict[str, Any]:
        """The best check's score, tiebreak and step, and the stop, if any."""
        return {
            "best": self.best,
            "best_tiebreak": self.best_tiebreak,
            "improved_at": self.improved_at,
            "stopped": self.stopped,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what `state_dict` saved."""
        self.best = float(state_dict.get("best", math.nan))
        self.best_tiebreak = float(state_dict.get("best_tiebreak", math.nan))
        self.improved_at = int(state_dict.get("improved_at", 0))
        self.stopped = state_dict.get("stopped")
