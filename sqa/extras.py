"""Optional dependencies: import one, or fail with the pip extra that installs it.

The core install scores exports; training, the SSL backbone sources, pitch features, loggers,
sweeps and the DNSMOS baseline each come with an extra (see pyproject.toml).
"""

from __future__ import annotations

import importlib
from types import ModuleType


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
