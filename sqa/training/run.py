"""One training run: build from a Hydra config, fit, test every test set, write results, export."""

from __future__ import annotations

import logging
import textwrap
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
from hydra.utils import instantiate
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from sqa.core.atomic import atomic_write_json, atomic_write_text
from sqa.core.renames import rename_targets
from sqa.core.run_folder import claimed, missing_folders, record_point, remove_unused, restore_previous
from sqa.core.run_lock import RunDirError
from sqa.data.corpus import format_counts
from sqa.data.valid_split import write_valid_split
from sqa.data.validate import CorpusProblems, format_report
from sqa.exports import format as export_format
from sqa.exports.format import export_predictor
from sqa.reports import learning
from sqa.reports.plots import CurveNames, write_curves
from sqa.training import candidates
from sqa.training.builder import ARCHITECTURES, HEAD_INITS, build, init_from, train_means
from sqa.training.callbacks import StartedOver
from sqa.training.checkpoint_io import AtomicCheckpointIO, checkpoint_step
from sqa.training.data_record import recorded_data
from sqa.training.datamodule import MOSDataModule
from sqa.training.experiment_loggers import hparam_metrics, log_figures, log_hparams
from sqa.training.retrieval import build_datastore
from sqa.training.run_callbacks import instantiate_callbacks
from sqa.training.run_dir import UNUSED, is_leader, log_to_file, made_for_run, run_inputs
from sqa.training.run_outputs import (
    curve_set_names,
    describe_objective,
    learning_check,
    objective_record,
    report_selection,
    run_info,
    run_sigma,
    scale_shift,
    stopped_before_unfreezing,
    training_end,
    write_test_outputs,
)
from sqa.training.run_settings import RunSettings
from sqa.training.selection import SelectionRule

# The paths users' code and configs name (`sqa.training.run.build`, ...): the build and the
# settings live in sqa.training.builder and sqa.training.run_settings, and stay importable here.
__all__ = [
    "ARCHITECTURES",
    "HEAD_INITS",
    "RunResult",
    "RunSettings",
    "build",
    "check_resumable",
    "init_from",
    "log_interval",
    "run",
    "train_means",
]

log = logging.getLogger(__name__)


def log_interval(cfg: DictConfig, datamodule: MOSDataModule) -> int:
    """`trainer.log_every_n_steps`, lowered to the training batches of one epoch where fewer.

    An interval longer than an epoch logs nothing per epoch (and draws Lightning's warning).
    """
    batches = len(datamodule.train_dataloader())
    devices, nodes = cfg.trainer.get("devices"), cfg.trainer.get("num_nodes", 1)
    if isinstance(devices, int) and isinstance(nodes, int) and devices > 0:
        batches //= devices * nodes
    return max(1, min(int(cfg.trainer.log_every_n_steps), batches))


def check_resumable(last: Path) -> None:
    """RunDirError naming `last` unless it reads as a checkpoint (tensors and plain data only)."""
    try:
        checkpoint_step(last)
    except Exception as err:  # noqa: BLE001 - any failure to read it means the same to the user
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise RunDirError(
            f"{last}: not a checkpoint this run can resume from ({reason[:200]}); nothing was changed: "
            "restore the file, or start over with overwrite=true"
        ) from None


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
    """Fit, select the best validation checkpoint, test it, write metrics and export it.

    The run owns `run_dir` while it runs (see `sqa.training.run_dir`): a directory in use by another run,
    or holding a previous run's outputs without `cfg.resume` or `cfg.overwrite`, is an error. A
    directory made for the run (here or by `ClaimRunDirectory`) is removed again if the run stops
    having written nothing of its own there (`remove_unused`).
    Under DDP only the first rank claims it; the other ranks write nothing there. `_target_`s
    that name sqa's old module paths are mapped to the current ones (`sqa.core.renames`).
    """
    rename_targets(cfg)
    if not is_leader():
        return _fit_test_export(cfg, Path(run_dir), overrides)
    settings = RunSettings.of(cfg)
    made = missing_folders(run_dir) or made_for_run(run_dir)
    try:
        with claimed(run_dir, settings.resume, settings.overwrite, run_inputs(cfg)), log_to_file(run_dir):
            return _fit_test_export(cfg, Path(run_dir), overrides)
    except BaseException:
        # A run that stopped before writing anything of its own leaves no folder behind.
        remove_unused(made, UNUSED)
        raise


def _fit_test_export(cfg: DictConfig, run_dir: Path, overrides: Sequence[str] | None) -> RunResult:
    """The body of `run` in a claimed run directory: prepare -> fit -> test -> write and export.

    With `cfg.resume`, training continues from `<run_dir>/checkpoints/last.ckpt` (written after
    every validation) and ends exactly as an uninterrupted run with the same seed would. With
    `cfg.test_after_fit` false (a sweep's trials), the selected checkpoint is neither tested nor
    exported: the run writes its selection, objective and curves only. A train.py run whose
    command line chose no model trains the configured candidates instead (`sqa.training.candidates`).
    """
    settings = RunSettings.of(cfg)
    export_dir = run_dir / "export"
    last = run_dir / "checkpoints" / "last.ckpt"
    plan = candidates.plan(cfg, overrides)
    if settings.resume and not last.is_file():
        # With candidates, each resumes from its own folder's last checkpoint.
        own = sorted((run_dir / candidates.FOLDER).glob("*/checkpoints/last.ckpt"))
        if not plan.candidates or not own:
            where = run_dir / candidates.FOLDER / "<name>" / "checkpoints" if plan.candidates else last.parent
            raise FileNotFoundError(
                f"resume=true but {where / 'last.ckpt'} does not exist (no validation to resume from)"
            )
    if export_dir.exists() and not settings.overwrite_export:
        # Checked before training so that a long run never fails at its very end.
        raise FileExistsError(f"{export_dir} already exists; set overwrite_export=true to replace it")
    # Likewise whether the export may be replaced (sqa's own, holding none of the run's inputs).
    export_format.check_replaceable(export_dir, run_inputs(cfg))
    if settings.resume and last.is_file():
        check_resumable(last)
    if plan.line:
        log.info("%s", plan.line)
    log.info("Seed %d (initial weights, data order, crops, dropout)", settings.seed)
    if plan.candidates:
        return candidates.fit_select_export(plan, cfg, run_dir, _candidate_phases)
    prepared = prepare(cfg, run_dir)
    fitted = fit(prepared, run_dir)
    outcome = test(fitted)
    if fitted.trainer.is_global_zero:
        finish(fitted, outcome, run_dir, export_dir)
    return outcome


class Prepared(NamedTuple):
    """A run's configuration, data, model and run_info record, before training."""

    cfg: DictConfig
    settings: RunSettings
    datamodule: MOSDataModule
    module: Any
    info: dict[str, Any]


class Fitted(NamedTuple):
    """A prepared run after fitting: its trainer, callbacks, logger and where training ended."""

    prepared: Prepared
    trainer: L.Trainer
    callbacks: dict[str, Any]
    logger: Any
    params: dict[str, Any]
    end: dict[str, Any]

    @property
    def history(self) -> dict[str, list[tuple[int, float]]]:
        """Every logged value of the run by name: [(step, value), ...]."""
        return self.callbacks["history"].history

    @property
    def best_path(self) -> str:
        """The selected checkpoint's file."""
        return self.callbacks["checkpoint"].best_model_path


# The corpus table last logged for each run directory (its candidates share the run's).
CORPUS_LOGGED: dict[Path, str] = {}


def prepare(cfg: DictConfig, run_dir: Path, report_dir: Path | None = None) -> Prepared:
    """Seed, build the data and model of `cfg` and write config.yaml, run_info.json and the splits.

    A corpus with problems is a `CorpusProblems` whose report is also written to `report_dir`
    (None: `run_dir`; a candidate's: the run directory it belongs to), as is the report of the
    clips skipped with data.on_error=skip.
    """
    report_dir = report_dir or run_dir
    settings = RunSettings.of(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    # Lightning's own "Seed set to" line left out: the run says its seed once (`_fit_test_export`).
    L.seed_everything(settings.seed, workers=True, verbose=False)
    # Under DDP every rank runs this function; rank_zero_only.rank (from the launcher's
    # environment) lets only the first write the run's files.
    leader = rank_zero_only.rank == 0
    if leader:
        atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
        # Recorded at once (with Hydra's files): a run killed while it builds is still sqa's to resume.
        record_point(run_dir)
    try:
        datamodule, module = build(cfg)
    except CorpusProblems as err:
        if leader:
            # The previous run set aside by overwrite=true comes back first, whole: its own
            # report, if it had one, is kept rather than replaced by this one.
            restored = restore_previous(report_dir)
            report = report_dir / "data_problems.txt"
            try:
                atomic_write_text(report, format_report(err.problems) + "\n", exclusive=restored)
                err.add_note(f"(this report is also in {report})")
            except FileExistsError:
                err.add_note(f"({report} is the previous run's report, kept)")
        raise
    rule: SelectionRule = module.selection
    info = run_info(cfg, datamodule) if leader else {}
    if leader:
        counts = datamodule.label_counts()
        table = format_counts(counts)
        # Candidates of one run read the same corpus: its table is logged once, then referred to.
        if CORPUS_LOGGED.get(report_dir) == table:
            log.info("Corpus: the same clips and splits as above")
        else:
            log.info("Corpus:\n%s", table)
            CORPUS_LOGGED[report_dir] = table
        if rule.warning:
            # Indented lines of at most 100 characters: the warning names every set and its counts.
            wrapped = textwrap.fill(rule.warning, 100, subsequent_indent="  ", break_on_hyphens=False)
            log.warning("selection: %s", wrapped)
        log.info("Selecting checkpoints on %s", rule.describe())
        info["splits"] = {name: vars(c) for name, c in counts.items()}
        info["selection"] = rule.record()
        if datamodule.carved_valid:
            write_valid_split(datamodule.carved_valid, run_dir / "valid_split.csv")
            # Relative to the run directory (and the export, which holds a copy).
            info["valid_split_csv"] = "valid_split.csv"
        if datamodule.carved_test:
            write_valid_split(datamodule.carved_test, run_dir / "test_split.csv")
            info["test_split_csv"] = "test_split.csv"
        atomic_write_json(run_dir / "run_info.json", info)
        if datamodule.problems:
            atomic_write_text(report_dir / "data_problems.txt", format_report(datamodule.problems) + "\n")
        record_point(run_dir)
    return Prepared(cfg, settings, datamodule, module, info)


def fit(prepared: Prepared, run_dir: Path) -> Fitted:
    """Train the prepared model with checkpoints, logs and curves under `run_dir`; resumes as set."""
    cfg, settings, datamodule, module = prepared.cfg, prepared.settings, prepared.datamodule, prepared.module
    last = run_dir / "checkpoints" / "last.ckpt"
    interval = log_interval(cfg, datamodule)
    callbacks = instantiate_callbacks(
        cfg, run_dir, module.selection.mode, interval, settings.early_stopping_patience
    )
    logger = instantiate(cfg.logger, save_dir=str(run_dir)) if cfg.logger else False
    trainer: L.Trainer = instantiate(
        cfg.trainer,
        **first_validation(cfg),
        callbacks=[*callbacks.values(), StartedOver(run_dir)],
        logger=logger,
        default_root_dir=str(run_dir),
        plugins=[AtomicCheckpointIO()],
        log_every_n_steps=interval,
        enable_progress_bar="progress_bar" in callbacks,
    )
    params = OmegaConf.to_container(cfg, resolve=True)
    if logger:
        # The module saves no hyperparameters; the resolved configuration is the run's record. Logged
        # once the trainer is built, so that a trainer setting in error leaves no logger folder.
        logger.log_hyperparams(params)
    with warnings.catch_warnings():
        # Lightning warns that a mid-epoch resume point needs a resumable loader: the training
        # sampler resumes itself (MOSDataModule._resume_point).
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(last) if settings.resume else None)
    end = training_end(trainer, callbacks.get("early_stopping"))
    if trainer.is_global_zero:
        log.info("Training stopped at step %d: %s", end["step"], end["reason"])
        early = stopped_before_unfreezing(end, cfg.finetune.freeze_backbone_steps or 0, cfg.trainer.max_steps)
        if early is not None:
            log.warning(early)
    return Fitted(prepared, trainer, callbacks, logger, params, end)


class NoCheckpointError(RuntimeError):
    """Training stopped before any validation selected a checkpoint: nothing to test or export."""


def first_validation(cfg: DictConfig) -> dict[str, int]:
    """`val_check_interval` lowered to `max_steps` where training would stop before validating ({}: kept).

    A run validates every `val_check_interval` steps and tests and exports the checkpoint that
    validation selected: a shorter run (a smoke test's `trainer.max_steps=2`) would select none.
    """
    interval, steps = cfg.trainer.get("val_check_interval"), cfg.trainer.get("max_steps") or -1
    if isinstance(interval, bool) or not isinstance(interval, int) or not 0 < steps < interval:
        return {}
    log.info(
        "trainer.max_steps=%d ends training before its first validation (trainer.val_check_interval=%d): "
        "validating at step %d instead, so that a checkpoint is selected",
        steps,
        interval,
        steps,
    )
    return {"val_check_interval": steps}


def test(fitted: Fitted) -> RunResult:
    """Test the selected checkpoint on every test set (unless test_after_fit is false).

    NoCheckpointError (one line) where training stopped before any validation selected one.
    """
    module, settings = fitted.prepared.module, fitted.prepared.settings
    if not fitted.best_path:
        interval = fitted.prepared.cfg.trainer.get("val_check_interval")
        raise NoCheckpointError(
            f"training stopped at step {fitted.end['step']} ({fitted.end['reason']}) before any validation "
            f"(trainer.val_check_interval={interval}) selected a checkpoint; nothing was tested or "
            "exported: train for longer, or validate more often"
        )
    if settings.test_after_fit:
        fitted.trainer.test(
            module, datamodule=fitted.prepared.datamodule, ckpt_path=fitted.best_path, verbose=False
        )
    results = module.test_results if settings.test_after_fit else {}
    score = float(fitted.callbacks["checkpoint"].best_model_score)
    return RunResult(results, score, module.selection.mode)


def finish(
    fitted: Fitted,
    outcome: RunResult,
    run_dir: Path,
    export_dir: Path | None,
    record: dict[str, Any] | None = None,
    result: bool = True,
) -> dict[str, Any]:
    """Write the run's selection, curves, test outputs and learning check; export to `export_dir`.

    `record` is added to run_info.json (and the export's card); `export_dir` None writes no export.
    `result` marks the run's own result: it alone gets a retrieval datastore and says the learning
    check as the run's last line (a candidate's folder: false). Returns the run_info record written.
    """
    cfg, settings, datamodule, module = (
        fitted.prepared.cfg,
        fitted.prepared.settings,
        fitted.prepared.datamodule,
        fitted.prepared.module,
    )
    rule: SelectionRule = module.selection
    trainer, logger, params, history = fitted.trainer, fitted.logger, fitted.params, fitted.history
    info = {**fitted.prepared.info, "selection": dict(fitted.prepared.info["selection"]), **(record or {})}
    best = Path(fitted.best_path).name
    selected_step = checkpoint_step(fitted.best_path)
    info["training_end"] = fitted.end
    info["objective"] = objective_record(rule, outcome.objective)
    names = CurveNames(rule.label, curve_set_names(datamodule))
    if not settings.test_after_fit:
        # A sweep's trial: chosen on validation alone, so the test set is left unseen until the
        # chosen settings are run once with testing.
        report_selection(info, history.get("val/selection", []), best, selected_step, run_dir)
        curves = write_curves(history, run_dir / "plots", selected_step, names)
        log_figures(logger, {"plots/curves": curves}, step=trainer.global_step)
        log_hparams(logger, params, hparam_metrics(history, selected_step), trainer.global_step)
        log.info("Validation only (test_after_fit=false): %s was neither tested nor exported", best)
        log.info("Objective (what a sweep maximises): %s", describe_objective(info["objective"]))
        return info
    info["scale_shift"] = scale_shift(datamodule)
    info["learning_check"] = learning_check(module, datamodule, history, selected_step)
    datastore = None
    if export_dir is not None and result and (cfg.get("retrieval") or {}).get("datastore"):
        # The selected model's embeddings of the training clips, for kNN and fusion scoring.
        datastore, info["retrieval"] = build_datastore(module.predictor, datamodule)
    report_selection(info, history.get("val/selection", []), best, selected_step, run_dir)
    results = outcome.test
    figures = write_test_outputs(
        module,
        run_dir,
        history,
        heading=f"Test results (best checkpoint {best})",
        score_range=datamodule.corpus.score_range,
        selected_step=selected_step,
        names=names,
        sigma=run_sigma(info["learning_check"]),
    )
    log_figures(logger, figures, step=trainer.global_step)
    log_hparams(logger, params, hparam_metrics(history, selected_step, results), trainer.global_step)
    if export_dir is None:
        return info
    export_predictor(
        module.predictor,
        export_dir,
        sample_rate=datamodule.sample_rate,
        domains=datamodule.corpus.domains,
        metrics=results,
        dimension_metrics=module.dimension_results,
        overwrite=settings.overwrite_export,
        f0_extractor=datamodule.f0_extractor,
        data=recorded_data(cfg, export_dir, info.get("test_split_csv")),
        test={"seed": settings.seed, "bootstrap": settings.bootstrap},
        run_info=info,
        training=OmegaConf.to_container(cfg, resolve=True),
        files=[run_dir / info[key] for key in ("valid_split_csv", "test_split_csv") if key in info],
        inputs=run_inputs(cfg),
        vocal_only=datamodule.vocal_only,
        datastore=datastore,
    )
    log.info("Exported the best model to %s", export_dir)
    if result:
        # The run's last line: whether the model beats predicting the training mean.
        check = info["learning_check"]
        (log.info if check["verdict"] == "better" else log.warning)("%s", learning.sentence(check))
    return info


_candidate_phases = candidates.Phases(prepare, fit, test, finish, RunResult)
