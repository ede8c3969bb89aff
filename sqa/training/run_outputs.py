"""What a run writes beside its checkpoints: test outputs, run_info.json and the export's data record."""

from __future__ import annotations

import importlib.metadata
import logging
import math
import os
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.loggers import Logger, TensorBoardLogger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from sqa import metrics
from sqa.core import artefacts
from sqa.core.atomic import atomic_write_json
from sqa.core.prediction import OVERALL
from sqa.core.provenance import package_versions
from sqa.data.corpus import ROLES
from sqa.data.readers import CORPUS_READERS
from sqa.exports import residual
from sqa.metrics import count_text
from sqa.reports import calibration, learning, plots, scale
from sqa.reports import preferences as pair_report
from sqa.reports.tables import format_table
from sqa.training.datamodule import MOSDataModule
from sqa.training.lit_module import MOSModule, labelled
from sqa.training.selection import LOSS_SCORES, SelectionRule, uninformative, valid_set_name

log = logging.getLogger(__name__)

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
    "torchcrepe",
    "fairseq2",
    "s3prl",
    "transformers",
    "distillmos",
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
            **{valid_set_name(name): len(clips) for name, clips in corpus.valid_sets().items()},
            **{f"test/{name}": len(clips) for name, clips in corpus.test_sets().items()},
        },
        "systems": len({c.system_id for c in corpus.clips}),
        "domains": list(corpus.domains),
        "score_range": list(corpus.score_range),
    }


def curve_set_names(datamodule: MOSDataModule) -> dict[str, str]:
    """The curves' legend label of each validation set: its name, `(carved)` where carved from training."""
    carved = {c.domain for c in datamodule.carved_valid}
    return {
        name: f"{valid_set_name(name)} (carved)" if name in carved else valid_set_name(name)
        for name in datamodule.valid_names
    }


def write_test_outputs(
    module: MOSModule,
    out_dir: Path,
    history: plots.History | None = None,
    heading: str = "Test results",
    score_range: tuple[float, float] = plots.SCORE_RANGE,
    selected_step: int | None = None,
    names: plots.CurveNames | None = None,
    sigma: tuple[float | None, str] = (None, "no residual spread was given"),
) -> dict[str, Path]:
    """Write a test phase's metrics.json (metrics_<dim>.json), predictions.csv and plots; log them.

    A predictor with a spread also gets calibration.json and plots/reliability.png; test clips
    that name their songs, preferences.json (`sqa.reports.preferences.song_preferences` at the
    residual spread `sigma`: (σ or None, where it comes from or why there is none)).

    The one writer of test results: training runs and `eval.py` call it alike. With `history`,
    the training curves are drawn too (marking `selected_step`, naming things by `names`).
    Scatters span `score_range`. Returns the figures by tag.
    """
    results = module.test_results
    artefacts.write_metrics(out_dir, results, module.dimension_results)
    artefacts.write_predictions(out_dir, module.test_predictions, module.extra_dimensions)
    rows, plot_dir = module.test_predictions, out_dir / "plots"
    if history is not None:
        figures = plots.write_run_plots(rows, results, history, plot_dir, score_range, selected_step, names)
    else:
        paths = plots.write_test_plots(rows, results, plot_dir, score_range)
        figures = {f"plots/{path.stem}": path for path in paths}
    if rows and "spread" in rows[0]:
        record = calibration.write_calibration(rows, module.predictor.distribution, out_dir)
        figures["plots/reliability"] = out_dir / "plots" / "reliability.png"
        log.info("Calibration of the spread (calibration.json): %s", calibration.summary(record))
    distribution = module.predictor.distribution if rows and "spread" in rows[0] else None
    prefs = pair_report.song_preferences(rows, *sigma, distribution)
    if prefs is not None:
        atomic_write_json(out_dir / pair_report.PREFERENCES_FILE, prefs)
        log.info("Preferences (%s): %s", pair_report.PREFERENCES_FILE, pair_report.describe(prefs))
    log.info("%s:\n%s", heading, format_table(results))
    for dim, dim_results in module.dimension_results.items():
        log.info("%s, %s (clips with a %s score):\n%s", heading, dim, dim, format_table(dim_results))
    return figures


def run_sigma(check: Mapping[str, Any]) -> tuple[float | None, str]:
    """σ of a training run's preferences: its learning check's validation RMSE, and where it comes from.

    (None, why) where the check has none.
    """
    sigma = residual.check_sigma(check)
    if sigma is None:
        return None, "the run recorded no validation RMSE of its selected checkpoint (learning_check.valid)"
    return sigma, residual.VALID_RMSE_SOURCE


def corpus_name(cfg: DictConfig) -> str:
    """The corpus's name: the data config chosen (`data=synthetic`), else its reader's name."""
    try:
        choice = HydraConfig.get().runtime.choices.get("data")
    except ValueError:
        # Composed outside a Hydra application (tests, the API): no choices are recorded.
        choice = None
    return str(choice or str(cfg.data.corpus.get("_target_", "")).rpartition(".")[2])


def recorded_data(
    cfg: DictConfig, export_dir: str | Path, test_split: str | None = None
) -> dict[str, Any] | None:
    """The corpus of this run as plain values for an export (None for a reader outside sqa's).

    Interpolations are resolved. No absolute path is recorded: the corpus folder (`root`; a CSV
    manifest's folder unless a root is set) relative to `export_dir`, and a manifest's `path`
    relative to that folder, so that the export and the corpus can move together, and a user
    whose corpus lies elsewhere names its folder (`eval.py export=E data.corpus.root=DIR`).
    `test_split` names the export's copy of a carved test split (`test_split.csv`).
    """
    corpus = OmegaConf.to_container(cfg.data.corpus, resolve=True)
    if corpus.get("_target_") not in CORPUS_READERS:
        return None
    root = corpus.get("root")
    if isinstance(corpus.get("path"), str):
        path = (Path(root) / corpus["path"] if root is not None else Path(corpus["path"])).resolve()
        root = path.parent if root is None else root
        corpus["path"] = os.path.relpath(path, Path(root).resolve())
    if root is not None:
        corpus["root"] = os.path.relpath(Path(root).resolve(), Path(export_dir).resolve())
    data = {"name": corpus_name(cfg), "corpus": corpus, "eval_batch_size": int(cfg.data.eval_batch_size)}
    if test_split is not None:
        data["test_split_csv"] = test_split
    return data


def training_end(trainer: L.Trainer, early_stopping: EarlyStopping | None) -> dict[str, Any]:
    """Where and why fitting ended, for run_info.json: `step`, `stopped_by` and `reason`.

    `stopped_by` is early_stopping, max_steps, max_epochs or callback (another callback set
    `trainer.should_stop`); `reason` says it in words.
    """
    step, epoch = trainer.global_step, trainer.current_epoch
    # The epoch tells only whether max_epochs was reached: after a stop within an epoch Lightning
    # counts that epoch as done, one more than the validation log's last epoch, so it is not recorded.
    # Lightning 2.6 says why early stopping stopped; its patience count says it in any version.
    message = getattr(early_stopping, "stopping_reason_message", None)
    if early_stopping is not None and early_stopping.wait_count >= early_stopping.patience:
        stopped_by = "early_stopping"
        checks = count_text(early_stopping.patience, "validation check")
        reason = f"early stopping: {early_stopping.monitor} did not improve in {checks}"
    elif message:
        stopped_by, reason = "early_stopping", f"early stopping: {message}"
    # A limit of -1 (or None for epochs) is none.
    elif trainer.max_steps is not None and 0 <= trainer.max_steps <= step:
        stopped_by, reason = "max_steps", f"trainer.max_steps={trainer.max_steps} reached"
    elif trainer.max_epochs is not None and 0 <= trainer.max_epochs <= epoch:
        stopped_by, reason = "max_epochs", f"trainer.max_epochs={trainer.max_epochs} reached"
    else:
        stopped_by, reason = "callback", "a callback stopped training (trainer.should_stop)"
    return {"step": step, "stopped_by": stopped_by, "reason": reason}


def report_selection(
    info: dict[str, Any], scores: list[tuple[int, float]], best: str, selected_step: int, run_dir: Path
) -> None:
    """Add the selection's outcome to run_info.json; warn when its score never changed.

    `scores` are the (step, val/selection) pairs of every validation check; `best` is the
    selected checkpoint's file name, saved at `selected_step`.
    """
    values = [value for _, value in scores]
    flat = uninformative(values)
    # NaN (a diverged check) is not JSON: written as null.
    points = [[step, None if math.isnan(value) else value] for step, value in scores]
    info["selection"].update(
        checks=len(values),
        scores=points,
        best_checkpoint=best,
        selected_step=selected_step,
        uninformative=flat,
    )
    if flat:
        log.warning(
            "selection was uninformative: val/selection (%s) stayed at %.4g over all %d validation "
            "checks, so the tie rule chose the checkpoint with the lowest utterance-level rmse (%s); "
            "select on an error measure (selection.metric=rmse) or use more validation systems",
            info["selection"]["rule"],
            values[0],
            len(values),
            best,
        )
    atomic_write_json(run_dir / "run_info.json", info)


def learning_check(
    module: MOSModule, datamodule: MOSDataModule, history: plots.History, selected_step: int
) -> dict[str, Any]:
    """The selected model against the constant training-mean predictor (`sqa.reports.learning`).

    The model's validation RMSE is that of the validation check at `selected_step` (pooled over
    every validation set's clips); its test RMSE and SRCC interval those of the test average.
    """
    train_mean = float(np.mean([c.mos for c in datamodule.train_clips]))
    valid_sets = datamodule.corpus.valid_sets()
    squares, labels = 0.0, []
    for name, clips in valid_sets.items():
        at_step = [value for step, value in history.get(f"val/{name}/utt_rmse", []) if step == selected_step]
        if not at_step:
            squares = math.nan
            break
        squares += at_step[-1] ** 2 * len(clips)
        labels.extend(c.mos for c in clips)
    valid = (math.sqrt(squares / len(labels)), labels) if labels and math.isfinite(squares) else None
    _, true, _, sets = labelled(module.test_predictions, OVERALL)
    return learning.check(train_mean, valid, module.test_results, true, sets, apart=ROLES)


def scale_shift(datamodule: MOSDataModule) -> dict[str, Any]:
    """The training labels' mean and SD and each test set's shift from them (`shift_record`).

    References and anchors are left out, as from the test average.
    """
    train = [c.mos for c in datamodule.train_clips]
    sets = {
        name: [c.mos for c in clips]
        for name, clips in datamodule.corpus.test_sets().items()
        if name not in ROLES
    }
    return shift_record(float(np.mean(train)), float(np.std(train)), sets)


def shift_record(mean: float, sd: float, sets: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """Each set's label shift from training labels of `mean` and `sd` (`sqa.reports.scale`), logged.

    The record of run_info.json and eval_info.json; each shifted set is also a warning.
    """
    record = {"train_mean": mean, "train_sd": sd, "sets": scale.label_shift(mean, sd, sets)}
    for name, shift in record["sets"].items():
        if shift["shifted"]:
            log.warning("%s", scale.describe(name, shift, mean, sd))
    return record


def log_figures(logger: Logger | bool | None, figures: Mapping[str, Path], step: int = 0) -> None:
    """Log PNG files by tag to TensorBoard or wandb; other loggers keep the files as the record."""
    if isinstance(logger, TensorBoardLogger):
        from matplotlib.image import imread

        for tag, path in figures.items():
            logger.experiment.add_image(tag, imread(path), step, dataformats="HWC")
        # The trainer has already finalized the logger; without a flush the images could stay buffered.
        logger.experiment.flush()
    elif isinstance(logger, WandbLogger):
        import wandb

        logger.experiment.log(
            {**{tag: wandb.Image(str(path)) for tag, path in figures.items()}, "trainer/global_step": step}
        )


def objective_record(rule: SelectionRule, objective: float) -> dict[str, Any]:
    """What a sweep maximises, for run_info.json: `objective` (`RunResult.objective`) and what it is.

    `value` is what train.py returns to the sweeper, `quantity` the selection score's name,
    `negated` whether `value` is minus that score (an error measure or a loss, under rule `rule`).
    """
    quantity = rule.label if rule.metric in LOSS_SCORES else f"validation {rule.label}"
    return {"value": objective, "quantity": quantity, "negated": rule.mode == "min"}


def describe_objective(record: Mapping[str, Any]) -> str:
    """An `objective_record` in words, e.g. `-0.655 = minus the validation utterance-level RMSE 0.655`."""
    value = record["value"]
    if record["negated"]:
        return f"{value:.4g} = minus the {record['quantity']} {-value:.4g}"
    return f"{value:.4g} = the {record['quantity']}"


def hparam_metrics(
    history: plots.History, selected_step: int, results: Mapping[str, Any] | None = None
) -> dict[str, float]:
    """The run's metrics for the loggers' hyperparameter views, under `hp/`.

    `hp/val/...`: every validation value of the selected check (`selected_step`), the tiebreak
    aside; `hp/test/<set>/<level>_<metric>`: the test `results` as in metrics.json, undefined ones
    left out.
    """
    found = {}
    for key, points in history.items():
        at_step = [value for step, value in points if step == selected_step]
        if key.startswith("val/") and key != plots.TIEBREAK_KEY and at_step:
            found[f"hp/{key}"] = at_step[-1]
    for name, block in (results or {}).items():
        for level in ("utt", "sys"):
            for metric in metrics.METRIC_NAMES:
                value = block[level][metric]
                if metrics.defined(value):
                    found[f"hp/test/{name}/{level}_{metric}"] = float(value)
    return found


def log_hparams(
    logger: Logger | bool | None, params: Mapping[str, Any], values: Mapping[str, float], step: int
) -> None:
    """Give the loggers the hyperparameters `params` with the metrics `values` (`hparam_metrics`) at `step`.

    TensorBoard's HParams tab shows them together; wandb keeps the metrics in the run's summary,
    beside its config; other loggers have metrics.json and run_info.json as the record.
    """
    if isinstance(logger, TensorBoardLogger):
        logger.log_hyperparams(dict(params), metrics=dict(values), step=step)
        # The trainer has already finalized the logger; without a flush the values could stay buffered.
        logger.experiment.flush()
    elif isinstance(logger, WandbLogger):
        logger.experiment.summary.update(dict(values))
