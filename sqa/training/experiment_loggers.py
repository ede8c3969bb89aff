"""What a run gives its experiment logger (TensorBoard, wandb): figures, and hyperparameters with metrics."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import Logger, TensorBoardLogger, WandbLogger

from sqa import metrics
from sqa.reports import plots


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
