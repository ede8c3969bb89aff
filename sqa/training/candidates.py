"""Step 3 of a run: select among its candidates on validation; the race that stops hopeless ones early.

Each trained candidate is scored on the validation clips with a bootstrap interval, on the
run's own selection rule (`comparison`). The list order is the order of simplicity: a candidate
replaces the best so far only when it is better by more than `selection.tie_tolerance`. With
`candidates.ensemble` on, the mean of the two best is a candidate too, after every single one.
Candidates train one after the other and race the best finished one (`race`,
`sqa.training.racing`). Every candidate's validation score, test metrics, stop and wall seconds
go to run_info.json (`candidates`) and the export's model card (`record`).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqa.core import signals
from sqa.models.ensemble import EnsemblePredictor
from sqa.training.evaluation import tested
from sqa.training.fitting import Fitted
from sqa.training.frame_cache import FrameStore
from sqa.training.plan import FOLDER
from sqa.training.prepare import Prepared
from sqa.training.racing import Race, Standing, standing
from sqa.training.selection import LOSS_SCORES, SelectionRule

log = logging.getLogger(__name__)

# The name of the mean of the two best candidates: ensemble(<first>, <second>).
ENSEMBLE = "ensemble"
# Candidates compare on this where the run selects checkpoints on a loss (not comparable across
# models): the validation clips' utterance-level RMSE.
LOSS_FALLBACK = ("rmse", "utt")


class Valued(Protocol):
    """Anything judged by one score: a tried model (validation), a cross-validated one (its folds' mean)."""

    @property
    def value(self) -> float:
        """The score (NaN: none)."""
        ...


V = TypeVar("V", bound=Valued)


@dataclass
class Tried:
    """A model of the run after fitting: its predictor, validation standing, test and wall seconds.

    `prepared` is its prepared run (the ensemble: the member whose data it is scored on), `fitted`
    its fit (the ensemble: None), `valid` its validation results, `tested` its tested module once
    the test step has run, `members` the ensemble's members by name, in its order.
    """

    name: str
    prepared: Prepared
    fitted: Fitted | None
    predictor: Any
    standing: Standing = Standing(math.nan, None)
    clips: int = 0
    valid: dict[str, Any] | None = None
    seconds: float = 0.0
    members: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()
    tested: Any = None

    @contextmanager
    def timed(self) -> Iterator[None]:
        """Add the wall seconds of the block to the entry's `seconds`."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds += time.perf_counter() - start

    @property
    def value(self) -> float:
        """Its validation score on the comparison's metric (NaN: unscored)."""
        return self.standing.value

    @property
    def stopped(self) -> tuple[int | None, str | None]:
        """Where a stop rule ended its training early, and why ((None, None): it ran to its end)."""
        end = self.fitted.end if self.fitted else {}
        if end.get("stopped_by", "max_steps") in ("max_steps", "max_epochs"):
            return None, None
        return end["step"], end["reason"]


def comparison(rule: SelectionRule) -> tuple[str, str, str]:
    """The metric, level and mode candidates are compared on under `rule` (a loss rule: utterance RMSE)."""
    if rule.metric in LOSS_SCORES:
        metric, level = LOSS_FALLBACK
        return metric, level, "min"
    return rule.metric, str(rule.level), rule.mode


def validation_score(results: dict[str, Any], metric: str, level: str) -> tuple[float, list[float] | None]:
    """`metric` at `level` over the validation sets of `results` (weighted), and its interval if any."""
    scored = standing(results, metric, level)
    return scored.value, (list(scored.interval) if scored.interval else None)


def tested_on(predictor: Any, prepared: Prepared, corpus: Any) -> Any:
    """`predictor` run over the test sets of `corpus` with the prepared run's rate, batch and bootstrap."""
    datamodule, settings = prepared.datamodule, prepared.settings
    config = {
        "sample_rate": datamodule.sample_rate,
        "domains": list(datamodule.corpus.domains),
        "vocal_only": datamodule.vocal_only,
    }
    return tested(
        predictor,
        corpus,
        config,
        datamodule.f0_extractor,
        datamodule.eval_batch_size,
        settings.seed,
        settings.bootstrap,
        frame_store=prepared.module.frame_store,
    )


def enter(prepared: Prepared, number: int, total: int, store: FrameStore) -> None:
    """Say which candidate trains now, and let it share the frames of the run's frozen networks."""
    name = f"candidate {number} of {total}, {prepared.name}" if prepared.candidate else "the model"
    signals.stage(f"fitting {name}")
    if prepared.candidate is None:
        return
    what = " ".join(prepared.candidate.overrides) or "the configuration as given"
    log.info("candidate %d of %d: %s (%s) in %s", number, total, prepared.name, what, prepared.folder)
    prepared.module.share_frames(store)


def entry(prepared: Prepared, fitted: Fitted) -> Tried:
    """A fitted model as an entry of the run; a candidate is scored on validation, the model alone is not."""
    candidate = prepared.candidate
    made = Tried(
        prepared.name or "model",
        prepared,
        fitted,
        prepared.module.predictor,
        seconds=prepared.seconds + fitted.seconds,
        overrides=candidate.overrides if candidate else (),
    )
    return scored(made) if candidate is not None else made


def scored(entry: Tried) -> Tried:
    """`entry` scored on its validation clips on the comparison's metric, with its interval."""
    prepared = entry.prepared
    metric, level, _ = comparison(prepared.module.selection)
    with entry.timed():
        module = tested_on(entry.predictor, prepared, prepared.datamodule.corpus.valid_as_test())
    entry.standing = standing(module.test_results, metric, level)
    entry.clips, entry.valid = len(module.test_predictions), module.test_results
    return entry


def ranked(tried: Sequence[V], mode: str) -> list[V]:
    """The scored entries of `tried`, best first on validation in `mode` (unscored ones left out)."""
    return sorted((t for t in tried if math.isfinite(t.value)), key=lambda t: t.value, reverse=mode == "max")


def leader(tried: Sequence[Tried], mode: str) -> Tried | None:
    """The best of `tried` on validation (None: none scored)."""
    return next(iter(ranked(tried, mode)), None)


def race(tried: Sequence[Tried], prepared: Prepared) -> Race | None:
    """The race `prepared` runs against the best of `tried` (None: no finished candidate to race).

    A candidate that fine-tunes its backbone is judged from the end of its frozen steps.
    """
    metric, level, mode = comparison(prepared.module.selection)
    best = leader(tried, mode)
    if best is None:
        return None
    freeze = int(prepared.cfg.finetune.get("freeze_backbone_steps") or 0)
    max_steps = prepared.cfg.trainer.get("max_steps") or -1
    start = freeze if max_steps < 0 or freeze < max_steps else 0
    settings = prepared.settings
    return Race(best.standing, best.name, metric, level, mode, start, settings.bootstrap, settings.seed)


def ensemble_of_best(tried: Sequence[Tried], mode: str) -> Tried | None:
    """The mean of the two best of `tried` on validation as a candidate, scored; None if they cannot join."""
    return ensemble_of(ranked(tried, mode)[:2])


def ensemble_of(best: Sequence[Tried]) -> Tried | None:
    """The mean of the two entries `best` as a candidate, scored on validation; None if they cannot join.

    Its validation and test clips are those of the member with a pitch extractor, if one has.
    """
    if len(best) < 2:
        return None
    try:
        ensemble = mean_of([t.predictor for t in best])
    except ValueError as err:
        log.info("candidates: no ensemble of %s and %s (%s)", best[0].name, best[1].name, err)
        return None
    log.info(
        "candidates: the mean of %s and %s is scored on the validation and test clips",
        best[0].name,
        best[1].name,
    )
    name = f"{ENSEMBLE}({best[0].name}, {best[1].name})"
    joined = Tried(
        name, host_of([t.prepared for t in best]), None, ensemble, members=tuple(t.name for t in best)
    )
    return scored(joined)


def mean_of(predictors: Sequence[Any]) -> EnsemblePredictor:
    """The mean of two predictors' scores per dimension, in eval mode; ValueError where they cannot join."""
    dims = len(predictors[0].dimensions)
    return EnsemblePredictor(predictors, [[0.5, 0.5]] * dims, [0.0] * dims).eval()


def host_of(members: Sequence[Prepared]) -> Prepared:
    """Where an ensemble of `members` is scored: the member with pitch features brings its f0 extractor."""
    return next((m for m in members if m.datamodule.f0_extractor is not None), members[0])


def pick(tried: Sequence[V], mode: str, tolerance: float) -> V:
    """The best of `tried` in list order: a later one wins only when better by more than `tolerance`.

    A NaN score never wins; if every score is NaN the first candidate stays.
    """
    best = tried[0]
    for entry in tried[1:]:
        if math.isnan(entry.value):
            continue
        if math.isnan(best.value) or (
            abs(entry.value - best.value) > tolerance
            and (entry.value > best.value if mode == "max" else entry.value < best.value)
        ):
            best = entry
    return best


def select(tried: list[Tried], ensemble: bool, chosen: Sequence[str] = ()) -> Tried:
    """The winner of `tried` on validation; with `ensemble`, the mean of the two best joins `tried` first.

    A plan of one (a single model, no candidates) is its own winner. `chosen` names the winner
    that cross-validation chose instead (`sqa.training.crossval`): one entry, or the two members
    of an ensemble, which then joins `tried`.
    """
    if len(tried) == 1 and tried[0].fitted and tried[0].prepared.name is None:
        return tried[0]
    if chosen:
        by_name = {t.name: t for t in tried}
        if len(chosen) == 1:
            return by_name[chosen[0]]
        joined = ensemble_of([by_name[name] for name in chosen])
        if joined is None:
            raise ValueError(f"cross-validation chose the mean of {', '.join(chosen)}, which cannot be built")
        tried.append(joined)
        return joined
    rule = tried[0].prepared.module.selection
    _, _, mode = comparison(rule)
    if ensemble:
        joined = ensemble_of_best(tried, mode)
        tried += [joined] if joined else []
    return pick(tried, mode, rule.tie_tolerance)


def _test_summary(test: dict[str, Any]) -> dict[str, Any]:
    """The test average's utterance- and system-level RMSE and SRCC of a candidate (null where undefined)."""
    avg = test.get("avg") or {}

    def value(level: str, name: str) -> float | None:
        v = (avg.get(level) or {}).get(name)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    return {level: {name: value(level, name) for name in ("rmse", "srcc")} for level in ("utt", "sys")}


def record(
    tried: Sequence[Tried],
    winner: Tried,
    skipped: dict[str, str],
    cross_validation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The candidates' record for run_info.json and the model card (with the cross-validation that chose)."""
    metric, level, mode = comparison(tried[0].prepared.module.selection)
    return {
        "compared_on": (cross_validation or {}).get("compared_on") or f"validation {level} {metric} ({mode})",
        "metric": metric,
        "level": level,
        "mode": mode,
        "winner": winner.name,
        "entries": [
            {
                "name": t.name,
                "overrides": list(t.overrides),
                "folder": None if t.members else f"{FOLDER}/{t.name}",
                "valid": {**t.standing.record(), "clips": t.clips},
                "test": _test_summary(t.tested.test_results),
                "stopped_at": t.stopped[0],
                "why_stopped": t.stopped[1],
                "seconds": round(t.seconds, 1),
            }
            for t in tried
        ],
        "skipped": dict(skipped),
        "cross_validation": cross_validation,
    }


def member_record(winner: Tried, tried: Sequence[Tried]) -> dict[str, Any]:
    """The `ensemble` record of an ensemble winner: its method and each member's test SRCC."""
    by_name = {t.name: t for t in tried}
    return {
        "method": "mean",
        "members": [
            {
                "name": name,
                "backbone": type(by_name[name].predictor.backbone).__name__,
                "seed": winner.prepared.settings.seed,
                **{
                    f"{level}_srcc": _test_summary(by_name[name].tested.test_results)[level]["srcc"]
                    for level in ("utt", "sys")
                },
            }
            for name in winner.members
        ],
    }


def describe(rec: dict[str, Any]) -> str:
    """One line: which candidate won, on what, by how much, against each other.

    Where cross-validation chose, its mean fold values are the ones compared.
    """
    cv = rec.get("cross_validation")
    scores = {e["name"]: e for e in cv["entries"]} if cv else {e["name"]: e["valid"] for e in rec["entries"]}
    win = scores[rec["winner"]]

    def shown(entry: dict[str, Any]) -> str:
        value, ci = entry["value"], entry["ci"]
        text = "n/a" if value is None else f"{value:.4g}"
        return text + (f" [{ci[0]:.4g}, {ci[1]:.4g}]" if ci else "")

    parts = []
    for name, other in scores.items():
        if name == rec["winner"]:
            continue
        both = win["value"] is not None and other["value"] is not None
        by = f", by {abs(win['value'] - other['value']):.4g}" if both else ""
        parts.append(f"{name} {shown(other)}{by}")
    against = f" against {'; '.join(parts)}" if parts else ""
    return f"candidates: {rec['winner']} won on {rec['compared_on']}: {shown(win)}{against}"
