"""Shared fixtures: offline mode, one intra-op thread, and the corpora, runs and exports shared by modules."""

from __future__ import annotations

import logging
import os
import socket
import sys
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


def _torch_settings() -> tuple | None:
    """torch's process-wide settings that a test may change (None: torch not imported yet)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return (
        torch.get_num_threads(),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
        torch.is_grad_enabled(),
    )


def _logger_settings() -> dict[str, tuple[int, bool, bool]]:
    """Level, propagation and disabled flag of every named logger."""
    return {
        name: (logger.level, logger.propagate, logger.disabled)
        for name, logger in logging.Logger.manager.loggerDict.items()
        if isinstance(logger, logging.Logger)
    }


@pytest.fixture(autouse=True)
def restore_process_state() -> Iterator[None]:
    """Each test leaves the process as it found it: environment, working folder, loggers, torch settings.

    Libraries change them inside a test: Lightning's DDP set-up sets LOCAL_RANK, NODE_RANK,
    MASTER_ADDR and MASTER_PORT (fairseq2 then refused to start in a later test: "LOCAL_RANK and
    LOCAL_WORLD_SIZE ... together"), `seed_everything` PL_GLOBAL_SEED and PL_SEED_WORKERS, wandb
    WANDB_MODE (offline to dryrun) and WANDB_SERVICE, fairseq2's import a logger's level. Restored
    after every test, so that no test depends on the order. Handlers are left alone: a library
    that closed one of its own (wandb) must not get it back.
    """
    environ = dict(os.environ)
    cwd = os.getcwd()
    root_level = logging.getLogger().level
    loggers = _logger_settings()
    disabled = logging.root.manager.disable
    torch_settings = _torch_settings()
    yield
    for key in set(os.environ) - set(environ):
        del os.environ[key]
    os.environ.update({k: v for k, v in environ.items() if os.environ.get(k) != v})
    os.chdir(cwd)
    logging.getLogger().setLevel(root_level)
    for name, (level, propagate, was_disabled) in loggers.items():
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.propagate, logger.disabled = propagate, was_disabled
    logging.disable(disabled)
    if torch_settings is not None and _torch_settings() != torch_settings:
        import torch

        threads, dtype, deterministic, grad = torch_settings
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.use_deterministic_algorithms(deterministic)
        torch.set_grad_enabled(grad)


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
