"""Optional dependencies: import one, or fail with the pip extra that installs it.

The core install scores exports; training, the SSL backbone sources, pitch features, loggers,
sweeps and the DNSMOS baseline each come with an extra (see pyproject.toml).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterable
from types import ModuleType
from typing import Any

from sqa.core.openmp import short_spin
from sqa.core.signals import stop_on_signals

# The extra that installs each optional package a command imports at start-up.
EXTRA_OF = {
    "hydra": "train",
    "omegaconf": "train",
    "lightning": "train",
    "matplotlib": "train",
    "tensorboard": "train",
    "torchaudio": "wav2vec2",
}


class MissingExtraError(ImportError):
    """A feature needs an optional dependency that is not installed."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import `module`, or raise MissingExtraError naming `feature` and the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingExtraError(
            f"{feature} needs the Python package {module.split('.')[0]!r}, which is not installed: "
            f"pip install 'sqa[{extra}]' (or `bash scripts/setup.sh`, which installs every extra)"
        ) from err


def _missing_message(command: str, module: str) -> str:
    """The one line a command prints when optional package `module` is not installed."""
    extra = EXTRA_OF.get(module, "all")
    return (
        f"{command} needs the Python package {module!r}, which is not installed: pip install 'sqa[{extra}]' "
        "(or `bash scripts/setup.sh`, which installs every extra)"
    )


def exit_without(command: str, modules: Iterable[str]) -> None:
    """Exit with one line naming the extra to install if any of `modules` is not installed."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            sys.exit(_missing_message(command, module))


def run_main(module: str, command: str) -> Any:
    """Import `module` and return its main(), or exit with one line naming the extra it lacks.

    SIGTERM and SIGINT end it with their status (143, 130) and one line (`sqa.core.signals`).
    """
    try:
        main = importlib.import_module(module).main
        with stop_on_signals(command):
            return main()
    except MissingExtraError as err:
        sys.exit(f"{command}: {err}")
    except ImportError as err:
        top = (err.name or "").split(".")[0]
        if top not in EXTRA_OF:
            raise
        sys.exit(_missing_message(command, top))


def sqa_eval() -> Any:
    """The `sqa-eval` command: `sqa.training.evaluation.main`, or one line naming the extra it needs."""
    # Before torch loads (eval.py does the same): OpenMP reads its settings once.
    short_spin()
    return run_main("sqa.training.evaluation", "sqa-eval")


def sqa_ensemble() -> Any:
    """The `sqa-ensemble` command: `sqa.training.ensemble.main`, or one line naming the extra it needs."""
    return run_main("sqa.training.ensemble", "sqa-ensemble")


def sqa_bench() -> Any:
    """The `sqa-bench` command: `sqa.baselines.bench.main`, or one line naming the extra it needs."""
    return run_main("sqa.baselines.bench", "sqa-bench")
