"""Checkpoint selection: the validation score the best checkpoint is chosen on, and its guard.

A ranking metric (SRCC, LCC, KTAU, pair accuracy) can only choose between checkpoints where the
validation data can rank: with two validation systems the system-level SRCC is ±1 at every
check, with system means of one or two clips each it is noise, and with two distinct labels the
utterance-level one barely moves, so the first checkpoint wins. `choose_rule` decides from the
validation labels alone, before training, which sets a ranking metric is used on, and falls back
to an error measure (at utterance level) where none can rank. Checks whose scores tie are told
apart by the utterance-level RMSE (`better`), so that a nearly constant early model does not
win a tie. `uninformative` tells afterwards whether the score ever changed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqa import metrics
from sqa.data.corpus import LabelCounts

LOSS_SCORES = ("loss", "train_loss")
SELECTION_METRICS = (*metrics.RANKING_METRICS, *metrics.ERROR_METRICS, *LOSS_SCORES)
FALLBACK_METRICS = (*metrics.ERROR_METRICS, "loss")
# An error measure needs no ranking: the fallback is computed over clips, the more numerous unit.
FALLBACK_LEVEL = "utt"
LEVEL_NAMES = {"utt": "utterance", "sys": "system"}
# Checks whose selection scores tie are ordered by this error measure over the rule's sets.
TIEBREAK_METRIC, TIEBREAK_LEVEL = "rmse", "utt"
# The logged key of that tiebreak value, read by the selection callbacks.
TIEBREAK_KEY = "val/selection_tiebreak"


def valid_set_name(domain: str) -> str:
    """What every output calls the validation set of `domain`: `valid/<domain>` (`valid/default`)."""
    return f"valid/{domain}"


@dataclass(frozen=True)
class SelectionRule:
    """The score checkpoints are selected (and early stopping decided) on.

    `metric` at `level` (None for the losses) averaged over the validation `sets`, weighted by
    their clip or system counts; `mode` is max for ranking metrics, min for errors and losses.
    `warning` explains a fallback or a forced ranking metric (None when the request was usable).
    Scores within `tie_tolerance` of each other tie (see `better`).
    """

    metric: str
    level: str | None
    sets: tuple[str, ...]
    requested: str
    fallback_used: bool = False
    warning: str | None = None
    counts: Mapping[str, LabelCounts] = field(default_factory=dict)
    tie_tolerance: float = 1e-6

    @property
    def mode(self) -> str:
        """`max` for ranking metrics, `min` for error measures and losses."""
        return "max" if self.metric in metrics.RANKING_METRICS else "min"

    @property
    def label(self) -> str:
        """The score in a few words, e.g. `system-level SRCC` (the curves' axis)."""
        if self.metric in LOSS_SCORES:
            return "training loss" if self.metric == "train_loss" else "validation loss"
        return f"{LEVEL_NAMES[self.level]}-level {self.metric.upper()}"

    def describe(self) -> str:
        """One line, e.g. `system-level srcc over valid/p1, valid/p2 (max)`."""
        if self.metric == "train_loss":
            return "training loss since the previous validation (min)"
        what = (
            "validation loss" if self.metric == "loss" else f"{LEVEL_NAMES[self.level]}-level {self.metric}"
        )
        return f"{what} over {', '.join(map(valid_set_name, self.sets))} ({self.mode})"

    def score(
        self,
        blocks: Mapping[str, Mapping[str, Any]],
        val_loss: float = math.nan,
        train_loss: float = math.nan,
    ) -> float:
        """The selection score of one validation run from its per-set metric blocks or losses."""
        if self.metric == "loss":
            return val_loss
        if self.metric == "train_loss":
            return train_loss
        used = {name: block for name, block in blocks.items() if name in self.sets}
        return selection_score(used, self.metric, self.level)

    def tiebreak(self, blocks: Mapping[str, Mapping[str, Any]]) -> float:
        """The utterance-level RMSE over the rule's sets, which orders checks whose scores tie."""
        used = {name: block for name, block in blocks.items() if name in self.sets}
        return selection_score(used, TIEBREAK_METRIC, TIEBREAK_LEVEL)

    def record(self) -> dict[str, Any]:
        """Plain values for run_info.json: the rule used, the request and the sets' counts."""
        return {
            "rule": self.describe(),
            "metric": self.metric,
            "level": self.level,
            "mode": self.mode,
            "sets": [valid_set_name(name) for name in self.sets],
            "requested": self.requested,
            "fallback_used": self.fallback_used,
            "warning": self.warning,
            "tie_rule": (
                f"scores within {self.tie_tolerance:g} tie; the lower "
                f"{LEVEL_NAMES[TIEBREAK_LEVEL]}-level {TIEBREAK_METRIC} wins, the earlier check on a full tie"
            ),
            "valid_sets": {valid_set_name(name): vars(c) for name, c in self.counts.items()},
        }


def can_rank(
    counts: LabelCounts,
    level: str,
    min_systems: int,
    min_distinct_labels: int,
    min_clips_per_system: float,
) -> bool:
    """Whether a validation set can rank checkpoints at `level`.

    System level needs `min_systems` systems with distinct mean labels, each mean over a median
    of at least `min_clips_per_system` clips; utterance level `min_distinct_labels` distinct
    clip labels.
    """
    if level == "sys":
        return counts.system_labels >= min_systems and counts.clips_per_system >= min_clips_per_system
    return counts.labels >= min_distinct_labels


def choose_rule(
    valid_sets: Mapping[str, LabelCounts],
    metric: str = "srcc",
    level: str = "sys",
    fallback: str | None = "rmse",
    min_systems: int = 5,
    min_distinct_labels: int = 5,
    min_clips_per_system: float = 3,
    tie_tolerance: float = 1e-6,
) -> SelectionRule:
    """The selection rule for validation sets with these label counts (the `selection` config).

    A ranking metric is averaged over the sets that can rank (`can_rank`); where none can, the
    `fallback` error measure (utterance level) or validation loss over every set is used
    instead. `fallback=None` keeps the ranking metric on every set. Errors and losses are used
    as asked. Scores within `tie_tolerance` tie (`better`).
    """
    if metric not in SELECTION_METRICS:
        raise ValueError(f"selection.metric must be one of {list(SELECTION_METRICS)}, got {metric!r}")
    if level not in LEVEL_NAMES:
        raise ValueError(f"selection.level must be 'utt' or 'sys', got {level!r}")
    if fallback is not None and fallback not in FALLBACK_METRICS:
        raise ValueError(
            f"selection.fallback must be one of {list(FALLBACK_METRICS)} or null, got {fallback!r}"
        )
    if min_clips_per_system < 1:
        raise ValueError(f"selection.min_clips_per_system must be at least 1, got {min_clips_per_system!r}")
    if not tie_tolerance >= 0:
        raise ValueError(f"selection.tie_tolerance must be 0 or more, got {tie_tolerance!r}")
    names = tuple(valid_sets)
    requested = metric if metric in LOSS_SCORES else f"{level} {metric}"
    common = {"requested": requested, "counts": dict(valid_sets), "tie_tolerance": tie_tolerance}
    if metric in LOSS_SCORES:
        return SelectionRule(metric, None, names, **common)
    if metric in metrics.ERROR_METRICS:
        return SelectionRule(metric, level, names, **common)
    ranking = tuple(
        n
        for n in names
        if can_rank(valid_sets[n], level, min_systems, min_distinct_labels, min_clips_per_system)
    )
    if ranking == names:
        return SelectionRule(metric, level, names, **common)
    need = (
        f"at least {min_systems} systems with distinct mean labels and a median of at least "
        f"{min_clips_per_system:g} clips per system"
        if level == "sys"
        else f"at least {min_distinct_labels} distinct labels"
    )
    unfit = "; ".join(f"{valid_set_name(n)!r}: {valid_sets[n].describe()}" for n in names if n not in ranking)
    cannot = (
        f"{LEVEL_NAMES[level]}-level {metric} cannot rank checkpoints on validation set(s) {unfit} "
        f"(needs {need})"
    )
    if fallback is None:
        warning = f"{cannot}; selection.fallback=null keeps {metric} on every set (may be uninformative)"
        return SelectionRule(metric, level, names, warning=warning, **common)
    if ranking:
        warning = f"{cannot}; they are left out of the selection score"
        return SelectionRule(metric, level, ranking, warning=warning, **common)
    fallback_level = None if fallback == "loss" else FALLBACK_LEVEL
    what = "validation loss" if fallback == "loss" else f"{LEVEL_NAMES[FALLBACK_LEVEL]}-level {fallback}"
    warning = f"{cannot}; selecting on {what} over all validation clips instead"
    return SelectionRule(fallback, fallback_level, names, fallback_used=True, warning=warning, **common)


def better(
    score: float, tiebreak: float, best_score: float, best_tiebreak: float, mode: str, tolerance: float
) -> bool:
    """Whether a check (`score`, `tiebreak`) beats the best so far under a rule of this `mode`.

    Scores within `tolerance` of each other tie, and the tie goes to the lower tiebreak (the
    utterance-level RMSE); on a full tie the earlier check stays best. A NaN score never beats
    the best, any number beats a NaN best; a NaN tiebreak never wins a tie.
    """
    if math.isnan(score):
        return False
    if math.isnan(best_score):
        return True
    if abs(score - best_score) <= tolerance:
        return not math.isnan(tiebreak) and (math.isnan(best_tiebreak) or tiebreak < best_tiebreak)
    return score > best_score if mode == "max" else score < best_score


def uninformative(values: Sequence[float]) -> bool:
    """Whether a run's selection scores (one per validation check, two or more) never changed."""
    if len(values) < 2:
        return False
    first = values[0]
    if math.isnan(first):
        return all(math.isnan(v) for v in values)
    return all(not math.isnan(v) and math.isclose(v, first, rel_tol=1e-9, abs_tol=1e-12) for v in values)


def selection_score(
    blocks: Mapping[str, Mapping[str, Mapping[str, float]]], metric: str = "srcc", level: str = "sys"
) -> float:
    """`metric` at `level` averaged over the sets' blocks, weighted by their count `n` at that level.

    An undefined ranking metric counts as 0 (chance); an undefined error makes the score NaN,
    which checkpointing ranks last.
    """
    total = sum(int(b[level]["n"]) for b in blocks.values())
    if total == 0:
        return math.nan
    acc = 0.0
    for b in blocks.values():
        value = b[level][metric]
        if not metrics.defined(value):
            if metric not in metrics.RANKING_METRICS:
                return math.nan
            value = 0.0
        acc += value * b[level]["n"]
    return acc / total
