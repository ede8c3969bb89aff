"""Shared fixtures: offline mode and a small synthetic corpus generated once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default synthetic corpus (seed 0), generated once into a session temp folder."""
    from sqa.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("corpus") / "synthetic-seed0", seed=0)
