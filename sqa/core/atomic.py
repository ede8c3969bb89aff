"""Atomic writes of files and folders: a temporary one beside the target, then a rename.

A process killed at any moment leaves either the old file (folder) or the complete new one.
Files get the mode a plain `open()` would give them (0644 under the usual umask 022), not
mkstemp's 0600, and folders that of a plain `mkdir()` (0755), not mkdtemp's 0700, so that a
group sharing a cluster folder can read a run's outputs. JSON is written strictly: undefined
values (NaN) as null.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO


def default_mode(directory: bool = False) -> int:
    """The mode `open()` (0666) or `mkdir()` (0777) gives under the current umask."""
    # The umask can only be read by setting it; it is put back at once.
    umask = os.umask(0o077)
    os.umask(umask)
    return (0o777 if directory else 0o666) & ~umask


def atomic_write(path: str | Path, write: Callable[[BinaryIO], None], exclusive: bool = False) -> None:
    """Call `write(fh)` on a temporary file beside `path`, then rename it to `path`.

    With `exclusive`, the file is hard-linked to `path` instead, which fails (FileExistsError)
    if `path` exists by then: of two writers claiming one new output, exactly one succeeds.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_dir(path: str | Path, replace: bool = False) -> Iterator[Path]:
    """Yield a temporary folder beside `path` to fill; when the block ends, rename it to `path`.

    With `replace`, an existing `path` is moved aside first and removed only once the new folder
    is in place; without, an existing non-empty `path` makes the rename fail (OSError). If the
    block or the rename fails, the temporary folder is removed and `path` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        tmp.chmod(default_mode(directory=True))
        yield tmp
        old = None
        if replace and path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
            os.replace(path, old / path.name)
        os.rename(tmp, path)
        if old is not None:
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: str | Path, text: str, exclusive: bool = False) -> None:
    """Write `text` (UTF-8) to `path` atomically; `exclusive`: never replace an existing `path`."""
    # A file name that Python decoded with surrogate escapes (not UTF-8 under the locale, e.g. any
    # non-ASCII name under LANG=C) is written back as the bytes it was read from.
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8", "surrogateescape")), exclusive)


def _strict(value: Any) -> Any:
    """`value` with NaN and ±inf floats as None and numpy scalars/arrays as Python values."""
    if isinstance(value, Mapping):
        return {key: _strict(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(item) for item in value]
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        return _strict(value.tolist())  # numpy scalars and arrays
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_text(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text of `value`: NaN and ±inf (undefined values) become null, never bare NaN."""
    return json.dumps(_strict(value), indent=indent, allow_nan=False)


def atomic_write_json(path: str | Path, value: Any) -> None:
    """Write `value` as strict JSON (`json_text`) to `path` atomically."""
    atomic_write_text(path, json_text(value))
