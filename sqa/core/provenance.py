"""What a run or a baseline records about the software it ran with."""

from __future__ import annotations

import importlib.metadata
from collections.abc import Iterable


def package_versions(names: Iterable[str]) -> dict[str, str | None]:
    """Installed version of each named distribution (None where it is not installed)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions
