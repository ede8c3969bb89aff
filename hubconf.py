"""torch.hub entry points: `torch.hub.load(<clone of this repository>, "load", path, source="local")`."""

from __future__ import annotations

from pathlib import Path

from sqa import load as _load
from sqa.scoring.scorer import Scorer

dependencies = ["torch", "numpy", "soundfile", "soxr", "yaml"]


def load(path: str | Path, device: str = "cpu", **kwargs: object) -> Scorer:
    """An sqa export (directory, run directory or model.pt), ready to `.score("song.wav")`."""
    return _load(path, device=device, **kwargs)
