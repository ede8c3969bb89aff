"""Local weight files of the SSL backbones: the path checked, unpickled safely, loaded with clear errors.

Every function raises an error naming the file and what was expected there.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn


def existing(path: str | Path, what: str) -> Path:
    """`path` as a Path, or FileNotFoundError naming it and what was expected there."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected {what}")
    return path


def load_torch_file(path: Path, expected: str) -> Any:
    """`torch.load(path, weights_only=True)` on CPU; ValueError naming `path` if it cannot be read."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise ValueError(f"{path} cannot be read as {expected}: {error}") from error


def load_weights_into(model: nn.Module, state: Mapping[str, Any], path: Path | str, what: str) -> None:
    """`model.load_state_dict(state)`; ValueError naming `path` when it does not match `what`."""
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"{path} does not match {what}: {error}") from error
