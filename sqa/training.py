"""One training run: build from a Hydra config, fit, test every test set, write results, export."""

from __future__ import annotations

import importlib.metadata
import logging
import math
import platform
import sys
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint, TQDMProgressBar
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from sqa import metrics, plots
from sqa.atomic import atomic_write, atomic_write_json, atomic_write_text
from sqa.data.corpus import CORPUS_READERS, CorpusError, count_labels, format_counts
from sqa.data.datamodule import MOSDataModule
from sqa.data.valid_split import write_valid_split
from sqa.data.validate import CorpusProblems, format_report
from sqa.export import export_predictor
from sqa.lit_module import MOSModule
from sqa.models.predictor import OVERALL
from sqa.predictions import write_predictions
from sqa.provenance import package_versions
from sqa.run_dir import is_leader, lock, log_to_file, prepare
from sqa.selection import SelectionRule, choose_rule, uninformative

log = logging.getLogger(__name__)


def default_precision() -> str:
    """bf16 mixed precision on GPUs that support it, fp16 mixed on other GPUs, fp32 on CPU."""
    if not torch.cuda.is_available():
        return "32-true"
    return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"


# The trainer config asks for `${sqa_precision:}`; registered here so that every composer of the
# config (train.py, sweeps, tests) has it once it imports this module.
OmegaConf.register_new_resolver("sqa_precision", default_precision, replace=True)


def build(cfg: DictConfig) -> tuple[MOSDataModule, MOSModule]:
    """Instantiate the data module and the Lightning module described by `cfg`."""
    # f0 is extracted only when the model has a pitch branch, per-judge items only when it has a
    # judge embedding; the domain count is the corpus's, the judge count the training split's.
    f0_extractor = instantiate(cfg.f0) if cfg.model.get("pitch") else None
    dimensions = list(cfg.model.get("dimensions") or [OVERALL])
    # Before the data module decodes every clip: a missing weights file is found at once.
    paths = {f"model.backbone.{k}": cfg.model.get("backbone", {}).get(k) for k in ("checkpoint", "path")}
    paths["init_from.checkpoint"] = cfg.init_from.checkpoint if cfg.get("init_from") else None
    for key, path in paths.items():
        if path and not Path(path).expanduser().exists():
            raise FileNotFoundError(f"{key}: {path} does not exist")
    try:
        datamodule: MOSDataModule = instantiate(
            cfg.data,
            f0_extractor=f0_extractor,
            dimensions=dimensions,
            judges=bool(cfg.model.get("judge_dim")),
        )
    except InstantiationException as err:
        # Hydra wraps the error in a one-line repr; a corpus report is multi-line text.
        if isinstance(err.__cause__, CorpusError):
            raise err.__cause__ from None
        raise
    predictor = instantiate(
        cfg.model, num_domains=len(datamodule.corpus.domains), num_judges=datamodule.num_judges
    )
    if cfg.get("init_from"):
        init_from(predictor, cfg.init_from.checkpoint, list(cfg.init_from.modules))
    if cfg.get("compile"):
        predictor.compile()
    # Decided from the validation labels alone, so before training: see sqa.selection.
    valid_counts = {name: count_labels(clips) for name, clips in datamodule.corpus.valid_sets().items()}
    module = MOSModule(
        predictor,
        loss=instantiate(cfg.loss),
        optimizer=instantiate(cfg.optim),
        valid_names=datamodule.valid_names,
        test_names=datamodule.test_names,
        seed=cfg.seed,
        bootstrap=cfg.bootstrap,
        selection=choose_rule(valid_counts, **cfg.get("selection", {})),
    )
    return datamodule, module


def log_interval(cfg: DictConfig, datamodule: MOSDataModule) -> int:
    """`trainer.log_every_n_steps`, lowered to the training batches of one epoch where fewer.

    An interval longer than an epoch logs nothing per epoch (and draws Lightning's warning).
    """
    batches = len(datamodule.train_dataloader())
    devices, nodes = cfg.trainer.get("devices"), cfg.trainer.get("num_nodes", 1)
    if isinstance(devices, int) and isinstance(nodes, int) and devices > 0:
        batches //= devices * nodes
    return max(1, min(int(cfg.trainer.log_every_n_steps), batches))


def recorded_data(cfg: DictConfig) -> dict[str, Any] | None:
    """The corpus of this run as plain values for an export (None for a reader outside sqa's).

    Interpolations are resolved and the readers' `root`/`path` made absolute, so that
    `eval.py export=<dir>` finds the same clips from any working directory.
    """
    corpus = OmegaConf.to_container(cfg.data.corpus, resolve=True)
    if corpus.get("_target_") not in CORPUS_READERS:
        return None
    for key in ("root", "path"):
        if isinstance(corpus.get(key), str):
            corpus[key] = str(Path(corpus[key]).resolve())
    return {"corpus": corpus, "eval_batch_size": int(cfg.data.eval_batch_size)}


def write_test_outputs(
    module: MOSModule,
    out_dir: Path,
    history: plots.History | None = None,
    heading: str = "Test results",
    score_range: tuple[float, float] = plots.SCORE_RANGE,
    selected_step: int | None = None,
) -> dict[str, Path]:
    """Write a test phase's metrics.json (metrics_<dim>.json), predictions.csv and plots; log them.

    The one writer of test results: training runs and `eval.py` call it alike. With `history`,
    the training curves are drawn too (marking `selected_step`). Scatters span `score_range`.
    Returns the figures by tag.
    """
    results = module.test_results
    atomic_write_json(out_dir / "metrics.json", results)
    for dim, dim_results in module.dimension_results.items():
        atomic_write_json(out_dir / f"metrics_{dim}.json", dim_results)
    write_predictions(module.test_predictions, out_dir / "predictions.csv", module.extra_dimensions)
    rows, plot_dir = module.test_predictions, out_dir / "plots"
    if history is not None:
        figures = plots.write_run_plots(rows, results, history, plot_dir, score_range, selected_step)
    else:
        paths = plots.write_test_plots(rows, results, plot_dir, score_range)
        figures = {f"plots/{path.stem}": path for path in paths}
    log.info("%s:\n%s", heading, metrics.format_table(results))
    for dim, dim_results in module.dimension_results.items():
        log.info("%s, %s (clips with a %s score):\n%s", heading, dim, dim, metrics.format_table(dim_results))
    return figures


def progress_bar(cfg: DictConfig, interval: int | None = None) -> list[L.Callback]:
    """The progress bar, redrawn every `interval` (default `log_every_n_steps`) steps ([] when off).

    Redrawing every step (Lightning's default) costs about 10 ms, a fifth of a log-mel step. The
    bar is drawn on a terminal only: redirected to a file, its control codes are noise
    (`ValidationLog` reports progress there).
    """
    if not cfg.trainer.get("enable_progress_bar", True) or not sys.stderr.isatty():
        return []
    return [TQDMProgressBar(refresh_rate=interval or cfg.trainer.log_every_n_steps)]


def init_from(predictor: torch.nn.Module, checkpoint: str | Path, modules: list[str]) -> None:
    """Copy the weights of the named top-level submodules from an export (or its model.pt).

    Used for multi-dataset finetuning: stage 2 starts from stage 1's backbone and head. A named
    module that the checkpoint does not hold, or whose shapes differ, is an error.
    """
    path = Path(checkpoint)
    path = path / "model.pt" if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"init_from: {path} not found (give an export directory or its model.pt)")
    state = torch.load(path, map_location="cpu", weights_only=True)
    own = predictor.state_dict()
    for module in modules:
        keys = [k for k in own if k.startswith(f"{module}.")]
        if not keys or not all(k in state for k in keys):
            raise ValueError(f"init_from: {path} has no complete weights for module {module!r}")
        for key in keys:
            if state[key].shape != own[key].shape:
                raise ValueError(
                    f"init_from: {key} has shape {tuple(state[key].shape)} in {path}, "
                    f"{tuple(own[key].shape)} in this model"
                )
            own[key] = state[key]
    predictor.load_state_dict(own)


RECORDED_PACKAGES = (
    "torch",
    "torchaudio",
    "lightning",
    "hydra-core",
    "omegaconf",
    "numpy",
    "scipy",
    "soundfile",
    "soxr",
    "pyworld",
    "torchfcpe",
    "fairseq2",
    "s3prl",
    "transformers",
)


def run_info(cfg: DictConfig, datamodule: MOSDataModule) -> dict[str, Any]:
    """What a rerun needs to reproduce this run: seed, versions, platform and corpus fingerprint."""
    corpus = corpus_summary(cfg, datamodule)
    return {
        "seed": cfg.seed,
        "sqa": importlib.metadata.version("sqa"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(RECORDED_PACKAGES),
        "corpus_fingerprint": corpus["fingerprint"],
        "corpus_clips": len(datamodule.corpus.clips),
        "corpus": corpus,
    }


def corpus_summary(cfg: DictConfig, datamodule: MOSDataModule) -> dict[str, Any]:
    """What the model card says about the data: reader, clip counts per split, systems, domains."""
    corpus = datamodule.corpus
    return {
        "reader": cfg.data.corpus.get("_target_"),
        "fingerprint": corpus.fingerprint(),
        "clips": {
            "train": len(datamodule.train_clips),
            **{f"valid ({name})": len(clips) for name, clips in corpus.valid_sets().items()},
            **{f"test ({name})": len(clips) for name, clips in corpus.test_sets().items()},
        },
        "systems": len({c.system_id for c in corpus.clips}),
        "domains": list(corpus.domains),
        "score_range": list(corpus.score_range),
    }


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning checkpoint I/O that writes each checkpoint atomically (temporary file, rename)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        """Write `checkpoint` to `path`; a kill leaves the previous file or the complete new one."""
        atomic_write(path, lambda fh: torch.save(checkpoint, fh))


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


def checkpoint_step(path: str | Path) -> int:
    """The global step at which a Lightning checkpoint was saved (read without loading its tensors)."""
    return int(torch.load(path, map_location="cpu", weights_only=True, mmap=True)["global_step"])


class RunResult(NamedTuple):
    """Test metrics (per set and `avg`), the best validation selection score and its mode."""

    test: dict[str, Any]
    val_selection: float
    selection_mode: str = "max"

    @property
    def objective(self) -> float:
        """The best selection score as a quantity to maximise (errors and losses negated), for sweeps."""
        return self.val_selection if self.selection_mode == "max" else -self.val_selection


def run(cfg: DictConfig, run_dir: str | Path) -> RunResult:
    """Fit, select the best validation checkpoint, test it, write metrics and export it.

    The run owns `run_dir` while it runs (see `sqa.run_dir`): a directory in use by another run,
    or holding a previous run's outputs without `cfg.resume` or `cfg.overwrite`, is an error.
    Under DDP only the first rank claims it; the other ranks write nothing there.
    """
    if not is_leader():
        return _fit_test_export(cfg, Path(run_dir))
    with lock(run_dir):
        prepare(run_dir, cfg.resume, cfg.overwrite)
        with log_to_file(run_dir):
            return _fit_test_export(cfg, Path(run_dir))


def _fit_test_export(cfg: DictConfig, run_dir: Path) -> RunResult:
    """The body of `run` in a claimed run directory.

    With `cfg.resume`, training continues from `<run_dir>/checkpoints/last.ckpt` (written after
    every validation) and ends exactly as an uninterrupted run with the same seed would.
    """
    export_dir = run_dir / "export"
    last = run_dir / "checkpoints" / "last.ckpt"
    if cfg.resume and not last.is_file():
        raise FileNotFoundError(f"resume=true but {last} does not exist (no validation to resume from)")
    if export_dir.exists() and not cfg.overwrite_export:
        # Checked before training so that a long run never fails at its very end.
        raise FileExistsError(f"{export_dir} already exists; set overwrite_export=true to replace it")
    run_dir.mkdir(parents=True, exist_ok=True)
    L.seed_everything(cfg.seed, workers=True)
    # Under DDP every rank runs this function; rank_zero_only.rank (from the launcher's
    # environment) lets only the first write the run's files.
    leader = rank_zero_only.rank == 0
    if leader:
        atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    try:
        datamodule, module = build(cfg)
    except CorpusProblems as err:
        if leader:
            report = run_dir / "data_problems.txt"
            atomic_write_text(report, format_report(err.problems) + "\n")
            err.add_note(f"(this report is also in {report})")
        raise
    rule: SelectionRule = module.selection
    info = run_info(cfg, datamodule) if leader else {}
    if leader:
        counts = datamodule.label_counts()
        log.info("Corpus:\n%s", format_counts(counts))
        if rule.warning:
            log.warning("selection: %s", rule.warning)
        log.info("Selecting checkpoints on %s", rule.describe())
        info["splits"] = {name: vars(c) for name, c in counts.items()}
        info["selection"] = rule.record()
        if datamodule.carved_valid:
            write_valid_split(datamodule.carved_valid, run_dir / "valid_split.csv")
            info["valid_split_csv"] = str(run_dir / "valid_split.csv")
        atomic_write_json(run_dir / "run_info.json", info)
        if datamodule.problems:
            atomic_write_text(run_dir / "data_problems.txt", format_report(datamodule.problems) + "\n")
    checkpoint = ModelCheckpoint(
        dirpath=run_dir / "checkpoints",
        filename="best-{step}",
        monitor="val/selection",
        mode=rule.mode,
        enable_version_counter=False,
    )
    # The resume point: saved after every validation (after the selection callbacks have seen
    # it), never at an epoch end, which Lightning restores one batch off under max_steps. Data
    # order and crops are functions of (seed, epoch), dropout of (seed, step), and the resumed
    # sampler skips the batches already trained, so a resumed run continues exactly.
    resume_point = ModelCheckpoint(
        dirpath=run_dir / "checkpoints",
        filename="last",
        save_on_train_epoch_end=False,
        enable_version_counter=False,
    )
    history = plots.MetricHistory()
    interval = log_interval(cfg, datamodule)
    bar = progress_bar(cfg, interval)
    callbacks: list[L.Callback] = [checkpoint, resume_point, history, ValidationLog(), *bar]
    if cfg.early_stopping_patience:
        callbacks.append(EarlyStopping("val/selection", mode=rule.mode, patience=cfg.early_stopping_patience))
    logger = instantiate(cfg.logger, save_dir=str(run_dir)) if cfg.logger else False
    if logger:
        # The module saves no hyperparameters; the resolved configuration is the run's record.
        logger.log_hyperparams(OmegaConf.to_container(cfg, resolve=True))
    trainer: L.Trainer = instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=logger,
        default_root_dir=str(run_dir),
        plugins=[AtomicCheckpointIO()],
        log_every_n_steps=interval,
        enable_progress_bar=bool(bar),
    )
    with warnings.catch_warnings():
        # Lightning warns that a mid-epoch resume point needs a resumable loader: the training
        # sampler resumes itself (MOSDataModule._resume_point).
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(last) if cfg.resume else None)
    trainer.test(module, datamodule=datamodule, ckpt_path=checkpoint.best_model_path, verbose=False)
    results = module.test_results
    outcome = RunResult(results, float(checkpoint.best_model_score), rule.mode)
    if not trainer.is_global_zero:
        # The metrics were gathered from every rank; the first rank writes and exports them.
        return outcome
    best = Path(checkpoint.best_model_path).name
    report_selection(info, history.history.get("val/selection", []), best, run_dir)
    figures = write_test_outputs(
        module,
        run_dir,
        history.history,
        heading=f"Test results (best checkpoint {best})",
        score_range=datamodule.corpus.score_range,
        selected_step=checkpoint_step(checkpoint.best_model_path),
    )
    plots.log_figures(logger, figures, step=trainer.global_step)
    export_predictor(
        module.predictor,
        export_dir,
        sample_rate=datamodule.sample_rate,
        domains=datamodule.corpus.domains,
        metrics=results,
        dimension_metrics=module.dimension_results,
        overwrite=cfg.overwrite_export,
        f0_extractor=datamodule.f0_extractor,
        data=recorded_data(cfg),
        test={"seed": int(cfg.seed), "bootstrap": int(cfg.bootstrap)},
        run_info=info,
        training=OmegaConf.to_container(cfg, resolve=True),
    )
    log.info("Exported the best model to %s", export_dir)
    return outcome


def report_selection(info: dict[str, Any], scores: list[tuple[int, float]], best: str, run_dir: Path) -> None:
    """Add the selection's outcome to run_info.json; warn when its score never changed.

    `scores` are the (step, val/selection) pairs of every validation check.
    """
    values = [value for _, value in scores]
    flat = uninformative(values)
    # NaN (a diverged check) is not JSON: written as null.
    points = [[step, None if math.isnan(value) else value] for step, value in scores]
    info["selection"].update(checks=len(values), scores=points, best_checkpoint=best, uninformative=flat)
    if flat:
        log.warning(
            "selection was uninformative: val/selection (%s) stayed at %.4g over all %d validation "
            "checks, so the first checkpoint (%s) was kept; select on an error measure "
            "(selection.metric=rmse) or use more validation systems",
            info["selection"]["rule"],
            values[0],
            len(values),
            best,
        )
    atomic_write_json(run_dir / "run_info.json", info)
