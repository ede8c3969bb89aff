"""One run per directory: an exclusive `flock` on `<run_dir>/.lock` held while a command writes there.

The kernel releases the lock when the process ends, however it ends, so a killed run leaves no
stale lock behind; a refused claim removes the lock file it made. The first holder puts back a
previous run's outputs that a killed run had set aside (`sqa.core.set_aside`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from sqa.core.set_aside import restore_previous

LOCK_NAME = ".lock"
LINK_REFUSED = "is a symbolic link; sqa writes only its own files in a run directory"


class Options(NamedTuple):
    """How the command that claims a run directory names its settings, for the messages."""

    directory: str
    resume: str | None
    overwrite: str


HYDRA = Options("hydra.run.dir", "resume=true", "overwrite=true")

# Locks this process holds, by resolved run directory: (open lock file, nesting count).
_held: dict[Path, list[Any]] = {}


class RunDirError(RuntimeError):
    """A run directory is owned by another run or holds a previous run's outputs."""


def _owner(lock_path: Path) -> str:
    """The owner recorded in a lock file ("PID 123 on host"), or a note that it is unknown."""
    try:
        # A lock file is written by sqa, but any bytes in it must still give the "in use" message.
        text = lock_path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text or "a process that has not written its PID yet"


def open_no_follow(path: Path, flags: int) -> int:
    """`os.open(path, flags | O_CREAT)` that refuses a symbolic link (its target is never touched)."""
    try:
        return os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError:
        if path.is_symlink():
            raise RunDirError(f"{path}: {LINK_REFUSED}") from None
        raise


@contextmanager
def lock(run_dir: str | Path, options: Options = HYDRA) -> Iterator[None]:
    """Hold `<run_dir>/.lock` for the block; a directory locked by another process is an error.

    Nested use in one process (the Hydra callback, then `run`) shares one lock. `options` names the
    command's settings in the messages.
    """
    run_dir = Path(run_dir).resolve()
    if run_dir in _held:
        _held[run_dir][1] += 1
        try:
            yield
        finally:
            _release(run_dir)
        return
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(
            f"{run_dir}: is a file, not a folder; choose another run directory ({options.directory}=...)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    created = not os.path.lexists(path)
    fd = _locked(path, options)
    os.ftruncate(fd, 0)
    os.write(fd, f"PID {os.getpid()} on {socket.gethostname()}\n".encode())
    _held[run_dir] = [fd, 1]
    refused = False
    try:
        # Only the holder of a fresh lock may restore: a run killed after setting the previous
        # run aside and before it started training is undone here.
        restore_previous(run_dir)
        yield
    except RunDirError:
        refused = True
        raise
    finally:
        # A refused claim leaves the folder as it found it: no lock file where there was none.
        _release(run_dir, remove=created and refused)


def _locked(path: Path, options: Options) -> int:
    """A descriptor of the lock file `path` holding its exclusive flock; held elsewhere: RunDirError."""
    while True:
        fd = open_no_follow(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirError(
                f"{path.parent} is in use by another run ({_owner(path)}); wait for it to finish or "
                f"choose another run directory ({options.directory}=...)"
            ) from None
        # A refused claim removes the file it created (`_release`): a lock taken on a file removed
        # between this open and the flock guards nothing, so the path is opened again.
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _release(run_dir: Path, remove: bool = False) -> None:
    """Drop one hold of `run_dir`'s lock; the last closes it, first removing the file if `remove`."""
    entry = _held[run_dir]
    entry[1] -= 1
    if entry[1] == 0:
        del _held[run_dir]
        if remove:
            # Removed while still locked: a process that opened it meanwhile finds it gone once it
            # gets the flock (`_locked`) and opens the path anew.
            with contextlib.suppress(FileNotFoundError):
                (run_dir / LOCK_NAME).unlink()
        # Closing the descriptor drops the flock.
        os.close(entry[0])
