"""Atomic writes of files and folders: a temporary one beside the target, then a rename.

A process killed at any moment leaves either the old file (folder) or the complete new one.
Files get the mode a plain `open()` would give them (0644 under the usual umask 022), not
mkstemp's 0600, and folders that of a plain `mkdir()` (0755), not mkdtemp's 0700, so that a
group sharing a cluster folder can read a run's outputs. JSON is written strictly: undefined
values (NaN) as null. Every file a command writes where its user names it (`sqa-table --csv`,
`sqa-compare --json`, `sqa-score --output`, `sqa-bench`'s) goes through `write_output`: never over
an input of the command, over an existing file only with the command's overwrite setting.
"""

from __future__ import annotations

import ctypes
import errno
import json
import math
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

# Called with each path once a file or folder is in place there whole: a run's claim records
# what it writes as it writes it (`sqa.core.run_lock`), so a kill at any later instant leaves it
# recorded as sqa's.
WRITTEN: list[Callable[[Path], None]] = []
# Called before a file is made or renamed into place, with its path and the entry about to be
# renamed there (None: a temporary file, named before it is made): a run's claim notes it first
# (`sqa.core.run_lock`), so that a kill between the two leaves the entry provably sqa's.
INTENT: list[Callable[[Path, Path | None], None]] = []


def _written(path: Path) -> None:
    """Tell the `WRITTEN` hooks that `path` is now in place."""
    for hook in WRITTEN:
        hook(path)


def _intend(path: Path, source: Path | None = None) -> None:
    """Tell the `INTENT` hooks that `source` is about to be renamed to `path` (None: made there)."""
    for hook in INTENT:
        hook(path, source)


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
    # Named at random before it is made, so that it can be noted as sqa's before it exists.
    tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}"
    _intend(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        _intend(path, tmp)
        if exclusive:
            os.link(tmp, path)
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _written(path)


# Temporary folders of `atomic_dir` are named `.<name>.sqa-new-*`; one that holds a replaced
# folder on its way out `.<name>.sqa-old-*`. Only an interrupted replacement leaves either behind.
NEW_INFIX, OLD_INFIX = "sqa-new-", "sqa-old-"
# renameat2(2): flags and the "current directory" descriptor of the *at calls.
_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap the paths `a` and `b` in one step (Linux renameat2); False where the system cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    # The kernel or the file system lacks the exchange (old kernels, some network mounts).
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def leftovers(path: str | Path) -> list[Path]:
    """The temporary folders an interrupted `atomic_dir(path)` left beside `path`."""
    path = Path(path)
    if not path.parent.is_dir():
        return []
    prefixes = tuple(f".{path.name}.{infix}" for infix in (NEW_INFIX, OLD_INFIX))
    # mkdtemp's random part has no dot: `.export.sqa-new-x.sqa-new-abc` belongs to `export.sqa-new-x`.
    return sorted(
        p
        for p in path.parent.iterdir()
        if any(p.name.startswith(pre) and "." not in p.name[len(pre) :] for pre in prefixes)
        and p.is_dir()
        and not p.is_symlink()
    )


def _restore(path: Path) -> None:
    """Put the old folder back at a missing `path` where the two-rename fallback was killed midway.

    That fallback moves the old folder to `.<name>.sqa-old-*/<name>` before renaming the new one
    into place; killed in between, it leaves no `path` and the old folder only there, which the
    cleanup of leftovers would otherwise delete.
    """
    if os.path.lexists(path):
        return
    for old in leftovers(path):
        if old.name.startswith(f".{path.name}.{OLD_INFIX}") and os.listdir(old) == [path.name]:
            os.rename(old / path.name, path)
            return


@contextmanager
def atomic_dir(
    path: str | Path, replace: bool = False, made: Callable[[Path], None] | None = None
) -> Iterator[Path]:
    """Yield a temporary folder beside `path` to fill; when the block ends, put it in place at `path`.

    With `replace`, an existing `path` is exchanged with the new folder in one step, so that at
    every instant `path` is the old folder or the new one, and the old one is removed after
    (where the system has no exchange, two renames leave `path` missing for an instant).
    Without, an existing non-empty `path` makes the rename fail (OSError). If the block or the
    rename fails, the temporary folder is removed and `path` is left as it was. Temporary
    folders of an earlier, interrupted call for the same `path` are removed first, after an old
    folder that the fallback had moved aside is put back at a missing `path`. `made` is called
    with each temporary folder once it exists (an export records them as sqa's in its parent).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _restore(path)
    for stale in leftovers(path):
        shutil.rmtree(stale)
    new_prefix = f".{path.name}.{NEW_INFIX}"
    tmp = Path(tempfile.mkdtemp(prefix=new_prefix, dir=path.parent))
    old: Path | None = None
    try:
        if made is not None:
            made(tmp)
        tmp.chmod(default_mode(directory=True))
        yield tmp
        if replace and path.is_dir() and not path.is_symlink() and _exchange(tmp, path):
            # `tmp` now holds the old folder: renamed first, so that a kill here leaves a name
            # that says what it is. Built from the prefix, not by replacing NEW_INFIX, which
            # `path.name` itself may contain.
            old = tmp.with_name(f".{path.name}.{OLD_INFIX}{tmp.name[len(new_prefix) :]}")
            os.rename(tmp, old)
            if made is not None:
                made(old)
            shutil.rmtree(old)
            _written(path)
            return
        if replace and path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.{OLD_INFIX}", dir=path.parent))
            if made is not None:
                made(old)
            os.replace(path, old / path.name)
        os.rename(tmp, path)
        if old is not None:
            shutil.rmtree(old)
        _written(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None:
            # Where the fallback failed between its two renames, the old folder goes back to
            # `path`; what is left of the folder it was moved aside to (or exchanged into) goes.
            if not os.path.lexists(path) and os.path.lexists(old / path.name):
                os.rename(old / path.name, path)
            shutil.rmtree(old, ignore_errors=True)
        raise


def atomic_write_text(path: str | Path, text: str, exclusive: bool = False) -> None:
    """Write `text` (UTF-8) to `path` atomically; `exclusive`: never replace an existing `path`."""
    # A file name that Python decoded with surrogate escapes (not UTF-8 under the locale, e.g. any
    # non-ASCII name under LANG=C) is written back as the bytes it was read from.
    atomic_write(path, lambda fh: fh.write(text.encode("utf-8", "surrogateescape")), exclusive)


def output_refusal(
    path: str | Path, *, overwrite: bool, inputs: Iterable[str | Path] = (), setting: str = "--overwrite"
) -> str | None:
    """Why a command must not write its output to `path` (None if it may), in one line naming `setting`.

    An input of the command (the same file by its resolved path or its inode, symbolic links
    followed) is refused even with `overwrite`; so is a folder; an existing file without it.
    """
    path = Path(path)
    target = os.path.realpath(path)
    try:
        found = os.stat(path)
    except (OSError, ValueError):
        found = None
    for item in inputs:
        try:
            same = found is not None and os.path.samestat(found, os.stat(item))
        except (OSError, ValueError):
            same = False
        if same or os.path.realpath(item) == target:
            return (
                f"{path}: is one of the inputs of this command ({item}); sqa never writes over an "
                f"input, even with {setting}: write the output elsewhere"
            )
    if path.is_dir():
        return f"{path}: is a folder"
    if os.path.lexists(path) and not overwrite:
        return f"{path}: already exists; pass {setting} to replace it"
    return None


def write_output(
    path: str | Path,
    text: str,
    *,
    overwrite: bool,
    inputs: Iterable[str | Path] = (),
    setting: str = "--overwrite",
) -> None:
    """Write a command's output `text` to `path` atomically; FileExistsError if `output_refusal` refuses."""
    inputs = list(inputs)
    refusal = output_refusal(path, overwrite=overwrite, inputs=inputs, setting=setting)
    if refusal is not None:
        raise FileExistsError(refusal)
    try:
        # Without `overwrite` the file is claimed by a hard link: one that appeared since is kept.
        atomic_write_text(path, text, exclusive=not overwrite)
    except FileExistsError:
        if not os.path.lexists(path):
            raise
        raise FileExistsError(output_refusal(path, overwrite=False, inputs=inputs, setting=setting)) from None


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
