"""Shared fixtures: offline mode, one intra-op thread, and the corpora, runs and exports shared by modules."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One intra-op thread in the test process and the processes it starts (set before torch is
# imported). The suite's models are small and the test machines have 2 shared cores: two threads
# per process ran a 40-step training 1.5-4x slower than one under load. Tests that compare a
# subprocess's numbers with the test process's need both on the same thread count anyway.
os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def no_network() -> Iterator[None]:
    """Any socket connection in the module's tests fails (tests that touch model hubs use it)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("network access attempted")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", refuse)
        patch.setattr(socket, "create_connection", refuse)
        yield


@pytest.fixture(scope="session")
def synthetic_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default synthetic corpus (seed 0), generated once into a session temp folder."""
    from sqa.data.synthetic import generate

    return generate(tmp_path_factory.mktemp("corpus") / "synthetic-seed0", seed=0)


# The small synthetic corpus: 150 clips (a test clip per system, test sets of 12/12/10 systems).
SMALL_CLIPS_PER_SYSTEM = 3


@pytest.fixture(scope="session")
def small_synthetic_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic corpus of seed 0 with 3 clips per system, in `<data dir>/synthetic-seed0-clips3`.

    For runs whose tests read their outputs but not their quality: validating and testing on it
    takes a fifth of the time the default corpus takes. Train with `small_corpus_overrides`.
    """
    from sqa.data.synthetic import generate

    data = tmp_path_factory.mktemp("small-corpus")
    return generate(data / "synthetic-seed0-clips3", seed=0, clips_per_system=SMALL_CLIPS_PER_SYSTEM)


def small_corpus_overrides(root: Path) -> list[str]:
    """Training overrides that read the small synthetic corpus at `root`."""
    return [f"data.corpus.root={root}", f"data.corpus.clips_per_system={SMALL_CLIPS_PER_SYSTEM}"]


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(manifest, run directory with its export) of the tiny log-mel run on the per-system CSV corpus.

    The run of `tests.training.test_selection.tiny_run_overrides` (24 Adam steps, validation every
    4), trained once for the modules that read its outputs.
    """
    from sqa.training.run import run
    from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus

    manifest = write_per_system_corpus(tmp_path_factory.mktemp("per-system-corpus"))
    run_dir = tmp_path_factory.mktemp("tiny-run")
    run(compose_train(tiny_run_overrides(manifest)), run_dir)
    return manifest, run_dir


@pytest.fixture(scope="session")
def default_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export of an untrained default log-mel predictor (for scorer plumbing tests)."""
    import torch

    from sqa.exports.format import export_predictor
    from sqa.models.backbone import LogMelBackbone
    from sqa.models.predictor import MOSPredictor

    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone())
    return export_predictor(model, tmp_path_factory.mktemp("export") / "export", 16000, ["d"])
