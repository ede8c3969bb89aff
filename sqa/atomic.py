"""Atomic file writes: a temporary file in the same folder, then a rename over the target.

A process killed at any moment leaves either the old file or the complete new one. Files get
the mode a plain `open()` would give them (0644 under the usual umask 022), not mkstemp's 0600,
so that a group sharing a cluster folder can read a run's outputs.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def default_mode(directory: bool = False) -> int:
    """The mode `open()` (0666) or `mkdir()` (0777) gives under the current umask."""
    # The umask can only be read by setting it; it is put back at once.
    umask = os.umask(0o077)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None]) -> None:
    """Call `write(fh)` on a temporary file beside `path`, then rename it to `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write `text` (UTF-8) to `path` atomically."""
    atomic_write(path, lambda fh: fh.write(text.encode()))
