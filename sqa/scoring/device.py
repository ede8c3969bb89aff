"""The torch device a `Scorer` runs on: "auto" resolved to the GPU where there is one, other names checked."""

from __future__ import annotations

import torch


def resolve_device(device: str | torch.device) -> torch.device:
    """`"auto"` -> the GPU when one is present, else the CPU; any other name must be usable here."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"unknown device {str(device)!r} ({err})") from err
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (resolved.index is not None and resolved.index >= count):
            raise ValueError(f"device {str(device)!r} is not available: this machine has {count} CUDA GPU(s)")
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {str(device)!r} is not available on this machine")
    return resolved
