"""A run's callbacks by name, built from the `callbacks` config group with what only the run knows.

`conf/callbacks/` holds one file per callback; `instantiate_callbacks` adds the run's directory,
the selection rule's mode and the log interval, and leaves out the progress bar off a terminal and
early stopping without a patience. The callback classes themselves are in `sqa.training.callbacks`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig

# The callbacks a training run reads back after fitting: it must have them.
REQUIRED = ("checkpoint", "resume_point", "history")
# Those that save checkpoints, into <run dir>/checkpoints.
CHECKPOINTS = ("checkpoint", "resume_point")
# Those that watch val/selection, in the selection rule's mode.
SELECTION_WATCHERS = ("checkpoint", "early_stopping")


def progress_bar(cfg: DictConfig, interval: int | None = None) -> list[L.Callback]:
    """The `callbacks.progress_bar`, redrawn every `interval` (default `log_every_n_steps`) steps.

    [] when the trainer's progress bar is off or stderr is not a terminal: redirected to a file,
    its control codes are noise (`ValidationLog` reports progress there).
    """
    spec = cfg.get("callbacks", {}).get("progress_bar")
    if spec is None or not cfg.trainer.get("enable_progress_bar", True) or not sys.stderr.isatty():
        return []
    return [instantiate(spec, refresh_rate=interval or cfg.trainer.log_every_n_steps)]


def instantiate_callbacks(
    cfg: DictConfig, run_dir: Path, mode: str, interval: int, patience: int | None
) -> dict[str, L.Callback]:
    """The run's callbacks by name, in the order of `cfg.callbacks`.

    `mode` is the selection rule's (max | min), `interval` the log interval in steps, `patience`
    early stopping's (0 or None: no early stopping).
    """
    specs = cfg.get("callbacks") or {}
    missing = [name for name in REQUIRED if name not in specs]
    if missing:
        raise ValueError(
            f"callbacks: a training run needs {', '.join(missing)} (see conf/callbacks/default.yaml)"
        )
    callbacks: dict[str, L.Callback] = {}
    for name, spec in specs.items():
        overrides: dict[str, Any] = {}
        if name in CHECKPOINTS:
            overrides["dirpath"] = str(run_dir / "checkpoints")
        if name in SELECTION_WATCHERS:
            overrides["mode"] = mode
        if name == "progress_bar":
            callbacks.update((name, bar) for bar in progress_bar(cfg, interval))
        elif name == "early_stopping":
            if patience:
                callbacks[name] = instantiate(spec, **overrides, patience=patience)
        else:
            callbacks[name] = instantiate(spec, **overrides)
    return callbacks
