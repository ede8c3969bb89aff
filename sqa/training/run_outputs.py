"""What a run writes beside its checkpoints: test outputs and run_info.json's records.

The export's record of the corpus is in `sqa.training.data_record`; what the experiment loggers
get (figures, hyperparameters with metrics) in `sqa.training.experiment_loggers`.
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import platform
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from lightning.pytorch.callbacks import EarlyStopping
from omegaconf import DictConfig

from sqa.core import artefacts
from sqa.core.atomic import atomic_write_json
from sqa.core.prediction import OVERALL
from sqa.core.provenance import package_versions
from sqa.data.corpus import ROLES
from sqa.exports import residual
from sqa.metrics import count_text
from sqa.reports import calibration, learning, plots, scale
from sqa.reports import preferences as pair_report
from sqa.reports.tables import format_table
from sqa.training.data_record import corpus_name, recorded_data
from sqa.training.datamodule import MOSDataModule
from sqa.training.experiment_loggers import hparam_metrics, log_figures, log_hparams
from sqa.training.lit_module import MOSModule
from sqa.training.prediction_rows import labelled
from sqa.training.selection import LOSS_SCORES, SelectionRule, uninformative, valid_set_name

# The records' writers live here; the export's data record and the loggers' records moved out and
# stay importable here.
__all__ = [
    "RECORDED_PACKAGES",
    "corpus_name",
    "corpus_summary",
    "curve_set_names",
    "describe_objective",
    "hparam_metrics",
    "learning_check",
    "log_figures",
    "log_hparams",
    "objective_record",
    "recorded_data",
    "report_selection",
    "run_info",
    "run_sigma",
    "scale_shift",
    "shift_record",
    "training_end",
    "write_test_outputs",
]

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
    """What a rerun needs to reproduce this run: seeds, versions, platform and corpus fingerprint."""
    corpus = corpus_summary(cfg, datamodule)
    return {
        "seed": cfg.seed,
        # The seed of the carved splits (beside the training seed since runs of seeds share them).
        "split_seed": datamodule.split_seed,
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


def stopped_before_unfreezing(end: dict[str, Any], freeze_steps: int, max_steps: int | None) -> str | None:
    """A warning where early stopping ended a run whose backbone was to learn before it could (else None).

    `end` is `training_end`'s record; a backbone frozen for the whole run by design
    (`max_steps` <= `freeze_steps`) is no such case.
    """
    planned = max_steps is None or max_steps < 0 or freeze_steps < max_steps
    if end["stopped_by"] != "early_stopping" or not 0 < end["step"] < freeze_steps or not planned:
        return None
    return (
        f"early stopping ended training at step {end['step']}, before "
        f"finetune.freeze_backbone_steps={freeze_steps}: the backbone never learned. "
        "early_stopping_patience=null (or a larger patience) lets it"
    )


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
    module: MOSModule,
    datamodule: MOSDataModule,
    history: plots.History,
    selected_step: int,
    peer: tuple[str, MOSModule] | None = None,
) -> dict[str, Any]:
    """The selected model against the constant training-mean predictor (`sqa.reports.learning`).

    The model's validation RMSE is that of the validation check at `selected_step` (pooled over
    every validation set's clips); its test RMSE and SRCC interval those of the test average.
    `peer` is (name, tested module) of the run's pretrained peer, whose ranking it is judged against.
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
    return constant_check(module, train_mean, valid, peer)


def constant_check(
    module: MOSModule,
    train_mean: float,
    valid: tuple[float, list[float]] | None,
    peer: tuple[str, MOSModule] | None = None,
) -> dict[str, Any]:
    """A tested model against the constant `train_mean`, and the ranking of a `peer` (`sqa.reports.learning`).

    `valid` is (the model's validation RMSE, the validation labels), None where unknown; `peer`
    (name, tested module) the run's pretrained peer, tested on the same clips (None: none).
    """
    pred, true, systems, sets = labelled(module.test_predictions, OVERALL)
    record = learning.check(train_mean, valid, module.test_results, true, sets, apart=ROLES)
    if peer is not None:
        name, other = peer
        _, pred_key = artefacts.score_columns(None)

        def clip(row: dict[str, Any]) -> tuple[str, str]:
            return row.get("test_set", ""), row["sample_id"]

        theirs = {clip(r): r[pred_key] for r in other.test_predictions}
        missing = [r["sample_id"] for r in module.test_predictions if clip(r) not in theirs]
        if missing:
            raise ValueError(
                f"the pretrained peer {name} was not tested on clip {missing[0]!r}, which the model was"
            )
        # The model's rows with the peer's predictions: `labelled` keeps the same rows in the same order.
        kept, *_ = labelled([{**r, pred_key: theirs[clip(r)]} for r in module.test_predictions], OVERALL)
        record["peer"] = learning.peer_record(name, pred, kept, true, systems, sets)
    return record


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
