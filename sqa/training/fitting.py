"""Step 2 of a run: fit one prepared model, with checkpoints, logs, curves and its stop rules."""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from sqa.core.run_lock import RunDirError
from sqa.training.callbacks import StartedOver
from sqa.training.checkpoint_io import AtomicCheckpointIO, checkpoint_step
from sqa.training.datamodule import MOSDataModule
from sqa.training.prepare import Prepared
from sqa.training.racing import FineTunePatience
from sqa.training.run_callbacks import instantiate_callbacks
from sqa.training.run_outputs import stopped_before_unfreezing, training_end

log = logging.getLogger(__name__)


class NoCheckpointError(RuntimeError):
    """Training stopped before any validation selected a checkpoint: nothing to test or export."""


class Fitted(NamedTuple):
    """A prepared model after fitting: its trainer, callbacks, logger and where training ended.

    The module holds the selected checkpoint's weights.
    """

    prepared: Prepared
    trainer: L.Trainer
    callbacks: dict[str, Any]
    logger: Any
    params: dict[str, Any]
    end: dict[str, Any]
    # Wall seconds of the fit, in this process.
    seconds: float = 0.0

    @property
    def history(self) -> dict[str, list[tuple[int, float]]]:
        """Every logged value of the run by name: [(step, value), ...]."""
        return self.callbacks["history"].history

    @property
    def best_path(self) -> str:
        """The selected checkpoint's file."""
        return self.callbacks["checkpoint"].best_model_path


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


def stop_rules(cfg: DictConfig, mode: str, race: L.Callback | None) -> list[L.Callback]:
    """The callbacks that may end training before its last step: the race, fine-tuning's patience."""
    rules = [race] if race is not None else []
    patience = (cfg.get("finetune") or {}).get("patience_steps")
    if patience is not None and (
        isinstance(patience, bool) or not isinstance(patience, int) or patience <= 0
    ):
        raise ValueError(
            f"finetune.patience_steps must be a number of steps above 0, or null, got {patience!r}"
        )
    freeze = int(cfg.finetune.get("freeze_backbone_steps") or 0) if cfg.get("finetune") else 0
    if patience and freeze:
        tolerance = float((cfg.get("selection") or {}).get("tie_tolerance", 1e-6))
        rules.append(FineTunePatience(freeze, int(patience), mode, tolerance))
    return rules


def fit(prepared: Prepared, race: L.Callback | None = None) -> Fitted:
    """Train the prepared model in its folder, resumed as set; its module ends with the selected weights.

    `race` (a `sqa.training.racing.Race`) may stop it early against a better candidate.
    NoCheckpointError (one line) where training stopped before any validation selected one.
    """
    start = time.perf_counter()
    cfg, settings, datamodule, module = prepared.cfg, prepared.settings, prepared.datamodule, prepared.module
    folder = prepared.folder
    last = folder / "checkpoints" / "last.ckpt"
    interval = log_interval(cfg, datamodule)
    callbacks = instantiate_callbacks(
        cfg, folder, module.selection.mode, interval, settings.early_stopping_patience
    )
    rules = stop_rules(cfg, module.selection.mode, race)
    logger = instantiate(cfg.logger, save_dir=str(folder)) if cfg.logger else False
    trainer: L.Trainer = instantiate(
        cfg.trainer,
        **first_validation(cfg),
        callbacks=[*callbacks.values(), *rules, StartedOver(folder)],
        logger=logger,
        default_root_dir=str(folder),
        plugins=[AtomicCheckpointIO()],
        log_every_n_steps=interval,
        enable_progress_bar="progress_bar" in callbacks,
    )
    params = OmegaConf.to_container(cfg, resolve=True)
    if logger:
        # The module saves no hyperparameters; the resolved configuration is the run's record. Logged
        # once the trainer is built, so that a trainer setting in error leaves no logger folder.
        logger.log_hyperparams(params)
    # Each model starts from the seed, whatever the models prepared or fitted before it drew.
    L.seed_everything(settings.seed, workers=True, verbose=False)
    # In train mode, as a module just built: Lightning keeps the modes it finds, and a module fitted
    # before (a frozen phase that cross-validation judged) was left in eval mode by its checks.
    module.train()
    with warnings.catch_warnings():
        # Lightning warns that a mid-epoch resume point needs a resumable loader: the training
        # sampler resumes itself (MOSDataModule._resume_point).
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before")
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(last) if settings.resume else None)
    end = training_end(trainer, callbacks.get("early_stopping"))
    stopper = next((rule for rule in rules if rule.stopped), None)
    if stopper is not None:
        end.update(stopped_by=stopper.kind, reason=stopper.stopped["why"])
    if trainer.is_global_zero:
        log.info("Training stopped at step %d: %s", end["step"], end["reason"])
        early = stopped_before_unfreezing(end, cfg.finetune.freeze_backbone_steps or 0, cfg.trainer.max_steps)
        if early is not None:
            log.warning(early)
    best_path = callbacks["checkpoint"].best_model_path
    if not best_path:
        raise NoCheckpointError(
            f"training stopped at step {end['step']} ({end['reason']}) before any validation "
            f"(trainer.val_check_interval={cfg.trainer.get('val_check_interval')}) selected a checkpoint; "
            "nothing was tested or exported: train for longer, or validate more often"
        )
    module.load_state_dict(torch.load(best_path, map_location="cpu", weights_only=True)["state_dict"])
    return Fitted(prepared, trainer, callbacks, logger, params, end, time.perf_counter() - start)
