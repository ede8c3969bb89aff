"""One training run: prepare -> fit each model -> select -> test -> export.

A run is a plan of models (`sqa.training.plan`): the configured model alone, or the default
run's candidates, which cross-validation judges where validation is too small to choose
(`sqa.training.crossval`). `train` reads top to bottom through the five steps, each a
function of its own file: `prepare.prepare`, `fitting.fit`, `candidates.select`, `finish.test`
and `finish.export`. `run` claims the run directory around it (`sqa.training.run_dir`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from omegaconf import DictConfig

from sqa.core.renames import rename_targets
from sqa.core.run_folder import claimed, missing_folders, remove_unused
from sqa.exports import format as export_format
from sqa.training import candidates, crossval, finish
from sqa.training.builder import ARCHITECTURES, HEAD_INITS, build, init_from, train_means
from sqa.training.candidates import Tried
from sqa.training.fitting import NoCheckpointError, check_resumable, fit, log_interval
from sqa.training.frame_cache import FrameStore
from sqa.training.plan import FOLDER, Plan, plan
from sqa.training.prepare import prepare
from sqa.training.run_dir import UNUSED, is_leader, log_to_file, made_for_run, run_inputs
from sqa.training.run_settings import RunSettings

# The paths users' code and configs name (`sqa.training.run.build`, ...): the build and the
# settings live in sqa.training.builder and sqa.training.run_settings, and stay importable here.
__all__ = [
    "ARCHITECTURES",
    "HEAD_INITS",
    "NoCheckpointError",
    "RunResult",
    "RunSettings",
    "build",
    "check_resumable",
    "init_from",
    "log_interval",
    "run",
    "train",
    "train_means",
]

log = logging.getLogger(__name__)


class RunResult(NamedTuple):
    """Test metrics (per set and `avg`; none without testing), the best selection score and its mode."""

    test: dict[str, Any]
    val_selection: float
    selection_mode: str = "max"

    @property
    def objective(self) -> float:
        """The best selection score as a quantity to maximise (errors and losses negated), for sweeps."""
        return self.val_selection if self.selection_mode == "max" else -self.val_selection


def run(cfg: DictConfig, run_dir: str | Path, overrides: Sequence[str] | None = None) -> RunResult:
    """Claim `run_dir` and train in it (`train`); a run that wrote nothing of its own leaves no folder.

    The run owns `run_dir` while it runs (see `sqa.training.run_dir`): a directory in use by another run,
    or holding a previous run's outputs without `cfg.resume` or `cfg.overwrite`, is an error.
    Under DDP only the first rank claims it; the other ranks write nothing there. `_target_`s
    that name sqa's old module paths are mapped to the current ones (`sqa.core.renames`).
    """
    rename_targets(cfg)
    if not is_leader():
        return train(cfg, Path(run_dir), overrides)
    settings = RunSettings.of(cfg)
    made = missing_folders(run_dir) or made_for_run(run_dir)
    try:
        with claimed(run_dir, settings.resume, settings.overwrite, run_inputs(cfg)), log_to_file(run_dir):
            return train(cfg, Path(run_dir), overrides)
    except BaseException:
        # A run that stopped before writing anything of its own leaves no folder behind.
        remove_unused(made, UNUSED)
        raise


def train(cfg: DictConfig, run_dir: Path, overrides: Sequence[str] | None = None) -> RunResult:
    """Prepare every model of the run's plan, fit each (racing the best so far), select, test and export.

    With `cfg.resume`, each model continues from its folder's `checkpoints/last.ckpt` and the run
    ends exactly as an uninterrupted one with the same seed would. With `cfg.test_after_fit` false
    (a sweep's trials), the selected checkpoint is neither tested nor exported.
    """
    models = plan(cfg, overrides)
    check_start(cfg, run_dir, models)
    if models.line:
        log.info("%s", models.line)
    log.info("Seed %d (initial weights, data order, crops, dropout)", cfg.seed)
    prepared, skipped = prepare(cfg, run_dir, models)
    # Models over the same frozen network (distillmos_ft while frozen, calibrated) share its frames.
    store = FrameStore()
    # Where validation is too small to choose, cross-validation chooses; its fold 0 is each
    # candidate's own training, which only the winner's fine-tuning goes on from.
    record = run_dir / FOLDER / crossval.RECORD
    judged = crossval.cross_validate(prepared, models.folds, store, models.ensemble, record)
    tried: list[Tried] = []
    for number, model in enumerate(prepared, start=1):
        candidates.enter(model, number, len(prepared), store)
        fitted = crossval.finish_fit(model, judged) if judged else fit(model, candidates.race(tried, model))
        tried.append(candidates.entry(model, fitted))
    winner = candidates.select(tried, models.ensemble, judged.members if judged else ())
    finish.test(tried)
    if is_leader():
        finish.export(winner, tried, skipped, run_dir, models.peer, judged.record() if judged else None)
    return result(winner)


def result(winner: Tried) -> RunResult:
    """What the run returns: the winner's test metrics and validation score, in its mode."""
    outcome = winner.tested.test_results if winner.tested is not None else {}
    if winner.fitted is not None:
        checkpoint = winner.fitted.callbacks["checkpoint"]
        return RunResult(outcome, float(checkpoint.best_model_score), winner.prepared.module.selection.mode)
    return RunResult(outcome, winner.value, candidates.comparison(winner.prepared.module.selection)[2])


def check_start(cfg: DictConfig, run_dir: Path, models: Plan) -> None:
    """Refuse at once what would make the run fail at its end: a resume with nothing to resume, an export.

    A long run must never fail at its very end, so the export's folder is checked before training.
    """
    settings = RunSettings.of(cfg)
    last = run_dir / "checkpoints" / "last.ckpt"
    if settings.resume and not last.is_file():
        # With candidates, each resumes from its own folder's last checkpoint.
        own = sorted((run_dir / FOLDER).glob("*/checkpoints/last.ckpt"))
        if not models.candidates or not own:
            where = run_dir / FOLDER / "<name>" / "checkpoints" if models.candidates else last.parent
            raise FileNotFoundError(
                f"resume=true but {where / 'last.ckpt'} does not exist (no validation to resume from)"
            )
    export_dir = run_dir / "export"
    if export_dir.exists() and not settings.overwrite_export:
        raise FileExistsError(f"{export_dir} already exists; set overwrite_export=true to replace it")
    # Likewise whether the export may be replaced (sqa's own, holding none of the run's inputs).
    export_format.check_replaceable(export_dir, run_inputs(cfg))
    if settings.resume and last.is_file():
        check_resumable(last)
