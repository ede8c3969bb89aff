"""Choosing among candidates where validation is too small to: grouped k-fold cross-validation.

Validation of two singers (or two songs) holds a few groups and few distinct labels: the
candidates' intervals on it overlap by most of their width, and which one wins is a coin toss.
Where the validation clips hold fewer groups than `selection.min_systems` or fewer distinct
labels than `selection.min_distinct_labels` (the counts the checkpoint selection already asks of
a set it ranks on), each candidate is judged instead by `candidates.folds`-fold cross-validation
over the training and validation clips together, grouped so that no group (a song, or a system
where the clips name no song or too few) is on both sides of a fold:

- Fold 0 is the run's own split: its validation clips are held out, as whole groups (where a
  validation group also trains, the folds could not be whole, and validation chooses as
  before). The other folds deal the training groups out among themselves.
- Each candidate trains on the other folds and is scored on the held-out fold: on the run's
  requested ranking metric where every fold can rank (`fold_comparison`), else on the run's own
  comparison (`candidates.comparison`): its fold values, their mean and the mean's 95 % t
  interval. A candidate that fine-tunes a pretrained backbone is cross-validated by its frozen
  phase (a head on frames computed once, shared across folds through the run's frame store).
- With `candidates.ensemble`, the mean of the two best is judged on the same folds.
- The winner is the best mean in list order, a later candidate replacing the best so far only
  when better by more than `selection.tie_tolerance` (`candidates.pick`, the tie rule).

Fold 0's fits are the candidates' own trainings, in their folders: nothing trains twice. The
winner's (an ensemble's members') fine-tuning then goes on from its frozen phase, with the fronts
that phase kept (`MOSModule.fine_tunes_later`), its checkpoint selected on validation as before;
the others keep their frozen phase. Folds 1 and on train in
`<candidate folder>/folds/<k>/`; each fold's values are kept in `candidates/folds.json`, so
that a resumed run decides as an uninterrupted one did.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf
from scipy import stats

from sqa import metrics
from sqa.core import signals
from sqa.core.atomic import atomic_write_json
from sqa.core.run_lock import RunDirError
from sqa.data.corpus import Corpus, count_labels
from sqa.training.candidates import ENSEMBLE, describe, host_of, mean_of, pick, ranked, tested_on
from sqa.training.fitting import Fitted, fit
from sqa.training.folds import deal, fold_comparison, fold_corpus, grouping, own_fold, too_small
from sqa.training.frame_cache import FrameStore
from sqa.training.prepare import Prepared, prepare_model
from sqa.training.racing import Standing, standing
from sqa.training.run_settings import RunSettings

log = logging.getLogger(__name__)

# The folder, inside a candidate's folder, of its fold fits (one per fold after fold 0: 1, 2, ...).
FOLDS_FOLDER = "folds"
# The file, in the candidates' folder, of each fold's values (no candidate's name holds a dot).
RECORD = "folds.json"


def frozen_steps(cfg: DictConfig) -> int | None:
    """The steps of a fine-tuning candidate's frozen phase (None: it does not fine-tune a backbone)."""
    freeze = int((cfg.get("finetune") or {}).get("freeze_backbone_steps") or 0)
    steps = cfg.trainer.get("max_steps") or -1
    return freeze if freeze > 0 and (steps < 0 or freeze < steps) else None


def fold_config(cfg: DictConfig, folder: Path) -> DictConfig:
    """A candidate's configuration for a fold: its frozen phase alone, the fold's splits, resumed."""
    own = copy.deepcopy(cfg)
    OmegaConf.set_struct(own, False)
    steps = frozen_steps(own)
    if steps is not None:
        own.trainer.max_steps = steps
    # The fold's splits are given by its corpus, not read again from the run's split files.
    own.data.valid_split_csv = None
    own.data.test_split_csv = None
    own.resume = bool(cfg.get("resume")) and (folder / "checkpoints" / "last.ckpt").is_file()
    return own


@dataclass(frozen=True)
class Judged:
    """A candidate's fold values on the comparison, in fold order (NaN: undefined on that fold).

    `bounds` are the metric's own (a correlation's -1 and 1, an error's 0): the interval stays in them.
    """

    name: str
    values: tuple[float, ...]
    bounds: tuple[float, float] = (-math.inf, math.inf)
    # The candidates an ensemble's mean is of (none: a single candidate).
    members: tuple[str, ...] = ()

    @property
    def value(self) -> float:
        """The mean fold value (NaN: none defined)."""
        return self.standing.value

    @property
    def standing(self) -> Standing:
        """The mean of the defined fold values, its 95 % t interval within `bounds` (none from 1 value)."""
        defined = [v for v in self.values if math.isfinite(v)]
        if not defined:
            return Standing(math.nan, None)
        mean = statistics.fmean(defined)
        if len(defined) < 2:
            return Standing(mean, None)
        t = float(stats.t.ppf(0.975, len(defined) - 1))
        half = t * statistics.stdev(defined) / math.sqrt(len(defined))
        low, high = self.bounds
        return Standing(mean, (max(mean - half, low), min(mean + half, high)))


@dataclass
class CrossValidation:
    """The run's cross-validation: why, its folds' groups, each candidate's fold values and the winner."""

    why: str
    by: str
    groups: list[list[str]]
    metric: str
    level: str
    mode: str
    judged: list[Judged] = field(default_factory=list)
    winner: str = ""
    frozen: tuple[str, ...] = ()
    # Each candidate's fit on fold 0, the run's own split: its own training.
    fitted: dict[str, Fitted] = field(default_factory=dict)
    # Each candidate's wall seconds on the other folds (fold 0 counts in its own entry).
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def members(self) -> tuple[str, ...]:
        """The candidates the winner is made of (itself, or an ensemble's two members)."""
        won = next(j for j in self.judged if j.name == self.winner)
        return won.members or (won.name,)

    def record(self) -> dict[str, Any]:
        """Plain values for run_info.json and the model card."""
        return {
            "why": self.why,
            "folds": len(self.groups),
            "grouped_by": self.by,
            "groups": self.groups,
            "compared_on": (
                f"{len(self.groups)}-fold cross-validation grouped by {self.by}: "
                f"{self.level} {self.metric} ({self.mode}), the mean over folds"
            ),
            "frozen_phase_only": list(self.frozen),
            "winner": self.winner,
            "entries": [
                {
                    "name": j.name,
                    "folds": [v if math.isfinite(v) else None for v in j.values],
                    **j.standing.record(),
                    **({"seconds": round(self.seconds[j.name], 1)} if j.name in self.seconds else {}),
                }
                for j in self.judged
            ],
        }


def cross_validate(
    prepared: Sequence[Prepared], folds: int, store: FrameStore, ensemble: bool, record: Path
) -> CrossValidation | None:
    """Each candidate judged on `folds` grouped folds, where validation is too small to choose (else None).

    None also where there is one candidate, `folds` is under 2, the clips hold fewer than `folds`
    songs and systems, or a validation group also trains. `store` shares the frozen networks'
    frames across folds; each fold's values are kept in the JSON file `record` as it ends.
    """
    if len(prepared) < 2 or folds < 2:
        return None
    first = prepared[0]
    corpus = first.datamodule.corpus
    pool = [c for c in corpus.clips if c.split in ("train", "valid")]
    grouped = grouping(pool, folds)
    if grouped is None:
        return None
    by, groups = grouped
    why = too_small([c for clips in corpus.valid_sets().values() for c in clips], groups, by, first.cfg)
    if why is None:
        return None
    own = own_fold(corpus, groups)
    if own is None:
        log.info("candidates: %s, but a validation %s also trains: validation chooses all the same", why, by)
        return None
    log.info(
        "candidates: %s; each is judged by %d-fold cross-validation over the %d training and validation "
        "clips, grouped by %s, fold 0 the run's own split (docs/selection.md#cross-validation)",
        why,
        folds,
        len(pool),
        by,
    )
    training = {i: g for i, g in groups.items() if i not in own}
    held = [own, *deal(training, folds - 1, first.datamodule.split_seed)]
    counts = [count_labels([c for c in pool if c.sample_id in fold and not c.role]) for fold in held]
    metric, level, mode = fold_comparison(first.cfg, first.module.selection, counts)
    values: dict[str, list[float]] = {}
    fitted: dict[str, Fitted] = {}
    seconds: dict[str, float] = {}
    done = read_folds(record)
    for k, held_out in enumerate(held):
        recorded = done.get(str(k))
        scored: dict[str, tuple[Prepared, Any]] = {}
        for model in prepared:
            if k > 0 and recorded is not None:
                continue
            signals.stage(f"cross-validating {model.name}, fold {k} of {folds - 1}")
            start = time.perf_counter()
            fold, fit_ = _fitted_fold(model, corpus, held_out, k, store)
            if k == 0:
                fitted[str(model.name)] = fit_
            else:
                seconds[str(model.name)] = seconds.get(str(model.name), 0.0) + time.perf_counter() - start
            scored[str(model.name)] = (fold, fold.module.predictor)
        fold_values = recorded or _fold_values(scored, metric, level, ensemble)
        if recorded is None:
            done[str(k)] = fold_values
            atomic_write_json(record, done)
        for name, value in fold_values.items():
            values.setdefault(name, []).append(math.nan if value is None else float(value))
    bounds = (-1.0, 1.0) if metric in metrics.RANKING_METRICS else (0.0, math.inf)
    judged = [Judged(str(p.name), tuple(values[str(p.name)]), bounds) for p in prepared]
    if ensemble:
        best = [j.name for j in ranked(judged, mode)][:2]
        if len(best) == 2 and any(math.isfinite(v) for v in values.get(_pair(*best), [])):
            name = f"{ENSEMBLE}({best[0]}, {best[1]})"
            judged.append(Judged(name, tuple(values[_pair(*best)]), bounds, tuple(best)))
    winner = pick(judged, mode, first.module.selection.tie_tolerance)
    result = CrossValidation(
        why,
        by,
        [sorted({groups[i] for i in held_out}) for held_out in held],
        metric,
        level,
        mode,
        judged,
        winner.name,
        tuple(str(p.name) for p in prepared if frozen_steps(p.cfg) is not None),
        fitted,
        seconds,
    )
    summary = result.record()
    log.info("%s", describe({"winner": winner.name, **summary, "cross_validation": summary}))
    return result


def read_folds(path: Path) -> dict[str, dict[str, float | None]]:
    """The values of the folds a run recorded, by fold number, then candidate or pair ({}: none yet).

    A record that is not one is a RunDirError naming it: a resumed run decides on what it wrote.
    """
    if not path.is_file():
        return {}
    try:
        folds = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(folds, dict) or not all(
            isinstance(fold, dict) and all(map(_number_or_none, fold.values())) for fold in folds.values()
        ):
            raise ValueError("not a mapping of folds to the values of their candidates")
    except ValueError as err:
        raise RunDirError(
            f"{path}: not a record of folds this run can resume from ({str(err)[:200]}); nothing was "
            "changed: restore the file, or start over with overwrite=true"
        ) from None
    return folds


def _number_or_none(value: Any) -> bool:
    """Whether `value` is a recorded fold value: a number (not a bool) or None."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def finish_fit(model: Prepared, judged: CrossValidation) -> Fitted:
    """A candidate's own training once cross-validation chose: its fold-0 fit, fine-tuned on if it won.

    A winning candidate (or ensemble member) that fine-tunes goes on from its frozen phase's last
    checkpoint to its own end, its checkpoint selected on validation as in any run.
    """
    own = judged.fitted[str(model.name)]
    if frozen_steps(model.cfg) is None:
        return own
    # Fine-tuned or not, the frozen phase is over: its kept fronts go with the fit that needs them.
    model.module.fine_tunes_later = False
    if model.name not in judged.members:
        model.module.keep_fronts(0)
        why = f"cross-validation chose {judged.winner}: judged by its frozen phase, not fine-tuned"
        return own._replace(end={**own.end, "stopped_by": "cross_validation", "reason": why})
    cfg = copy.deepcopy(model.cfg)
    cfg.resume = True
    on = fit(model._replace(cfg=cfg, settings=RunSettings.of(cfg)))
    return on._replace(seconds=own.seconds + on.seconds)


def _fitted_fold(
    model: Prepared, corpus: Corpus, held_out: frozenset[str], k: int, store: FrameStore
) -> tuple[Prepared, Fitted]:
    """`model` fitted on fold `k` (0: in its own folder, on its own data), its selected weights loaded."""
    if k == 0:
        fold = model._replace(cfg=(own := fold_config(model.cfg, model.folder)), settings=RunSettings.of(own))
        # Its fine-tuning, if it wins, goes on from this fit and reads the fronts it computes.
        fold.module.fine_tunes_later = frozen_steps(model.cfg) is not None
    else:
        folder = model.folder / FOLDS_FOLDER / str(k)
        split = fold_corpus(corpus, held_out)
        fold = prepare_model(fold_config(model.cfg, folder), folder, corpus=split, quiet=True)
    fold.module.share_frames(store)
    return fold, fit(fold)


def _fold_values(
    scored: Mapping[str, tuple[Prepared, Any]], metric: str, level: str, ensemble: bool
) -> dict[str, float | None]:
    """Each fold predictor's value on its held-out clips and, with `ensemble`, each pair's mean's."""
    values = {name: _value(predictor, fold, metric, level) for name, (fold, predictor) in scored.items()}
    if ensemble:
        for a, b in combinations(scored, 2):
            values[_pair(a, b)] = _pair_value(scored[a], scored[b], metric, level)
    return {name: v if math.isfinite(v) else None for name, v in values.items()}


def _value(predictor: Any, fold: Prepared, metric: str, level: str) -> float:
    """`predictor`'s value on the comparison over the fold's held-out clips (its validation)."""
    module = tested_on(predictor, fold, fold.datamodule.corpus.valid_as_test())
    return standing(module.test_results, metric, level).value


def _pair(a: str, b: str) -> str:
    """The key of the pair of `a` and `b`, whatever their order."""
    return " + ".join(sorted((a, b)))


def _pair_value(a: tuple[Prepared, Any], b: tuple[Prepared, Any], metric: str, level: str) -> float:
    """The mean of two fold predictors on the held-out clips, as the run's own (NaN: they cannot join)."""
    try:
        joined = mean_of([a[1], b[1]])
    except ValueError:
        return math.nan
    return _value(joined, host_of([a[0], b[0]]), metric, level)
