"""One run per directory: an exclusive `flock` on `<run_dir>/.lock` held while a command writes there.

The kernel releases the lock when the process ends, however it ends, so a killed run leaves no
stale lock behind; a refused claim removes the lock file it made. Each claim draws a random token
and keeps it in the lock file with the folder's identity: the set-aside folder it makes carries
the token (`sqa.core.set_aside`), so the next holder, reading the token of the claim before it
from the lock file, finishes what a killed claim left (its set-aside put back, its discard done)
and nothing else. What a claim creates in the directory is recorded as sqa's
(`sqa.core.ownership`) when it ends and at `record_point`s: every entry that was not there, or
not the user's, when it began.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from sqa.core import atomic, ownership, set_aside
from sqa.core.set_aside import LOCK_NAME

LINK_REFUSED = "is a symbolic link; sqa writes only its own files in a run directory"


class Options(NamedTuple):
    """How the command that claims a run directory names its settings, for the messages."""

    directory: str
    resume: str | None
    overwrite: str


HYDRA = Options("hydra.run.dir", "resume=true", "overwrite=true")


@dataclass
class _Claim:
    """A lock this process holds: its open file, nesting count, token and the user's entries."""

    fd: int
    count: int
    token: str
    # The entries that were there when the claim began and not sqa's: never recorded as sqa's.
    users: set[str]


# Locks this process holds, by resolved run directory.
_held: dict[Path, _Claim] = {}


class RunDirError(RuntimeError):
    """A run directory is owned by another run or holds a previous run's outputs."""


def _owner(lock_path: Path) -> str:
    """The owner recorded in a lock file ("PID 123 on host"), or a note that it is unknown."""
    try:
        # A lock file is written by sqa, but any bytes in it must still give the "in use" message.
        text = lock_path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text.splitlines()[0] if text else "a process that has not written its PID yet"


def _previous_token(fd: int, run_dir: Path) -> str | None:
    """The token the lock file (open as `fd`) holds of the claim before, if written for `run_dir`."""
    # sqa's two lines (owner, claim) fit in 256 bytes; whatever follows is no part of them.
    lines = os.pread(fd, 256, 0).decode("ascii", errors="replace").splitlines()
    words = lines[1].split() if len(lines) > 1 else []
    if len(words) != 4 or words[0] != "claim" or words[2] != "folder":
        return None
    token, folder = words[1], words[3]
    valid = len(token) == 32 and all(c in "0123456789abcdef" for c in token)
    return token if valid and folder == ownership.folder_id(run_dir) else None


def _write_owner(fd: int, run_dir: Path, token: str | None) -> None:
    """Write this process as the lock file's owner, with `token` (None: no claim line)."""
    text = f"PID {os.getpid()} on {socket.gethostname()}\n"
    if token is not None:
        text += f"claim {token} folder {ownership.folder_id(run_dir)}\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def held_token(run_dir: str | Path) -> str | None:
    """The token of this process's claim of `run_dir` (None without one)."""
    claim = _held.get(Path(run_dir).resolve())
    return claim.token if claim is not None else None


def claim_holding(path: str | Path) -> Path | None:
    """The folder this process holds a claim of that is `path` or holds it (None: no such claim).

    A run's candidates train in folders inside the claimed run directory: what they start and
    create belongs to that claim.
    """
    path = Path(path).resolve()
    return next((folder for folder in (path, *path.parents) if folder in _held), None)


def record_point(run_dir: str | Path) -> None:
    """Record what this process's claim of `run_dir` has created there so far as sqa's."""
    run_dir = Path(run_dir).resolve()
    claim = _held.get(run_dir)
    if claim is not None and run_dir.is_dir():
        ownership.record_created(run_dir, claim.users)


def _record_written(path: Path) -> None:
    """Record `path`, just written whole by sqa, where it lies in a folder this process claims."""
    if path.name == ownership.MANIFEST:
        return
    claimed = claim_holding(path.parent)
    if claimed is not None:
        record_point(claimed)


atomic.WRITTEN.append(_record_written)


def _record_intent(path: Path, source: Path | None) -> None:
    """Note that sqa is about to make `path` (or rename `source` to it) in a folder this process claims.

    Noted in the claimed folder's record under the name of its entry that holds `path`, by the
    identity of what goes there (`ownership.intend`), unless that name is already sqa's: a kill
    before the write's own record then leaves nothing that the next claim cannot prove sqa's.
    """
    if path.name == ownership.MANIFEST or path.name.startswith(f".{ownership.MANIFEST}."):
        return
    claimed = claim_holding(path.parent)
    if claimed is None:
        return
    parent = path.parent.resolve()
    top = claimed / Path(parent, path.name).relative_to(claimed).parts[0]
    if top.name in ownership.owned(claimed):
        return
    if parent != claimed:
        # A file inside a folder of the run: the folder is the entry to keep provable.
        ownership.intend(claimed, top.name, ownership.entry_id(top))
    else:
        ownership.intend(claimed, top.name, None if source is None else ownership.entry_id(source))


atomic.INTENT.append(_record_intent)


def set_previous_aside(run_dir: str | Path, names: Collection[str]) -> None:
    """Move the entries `names` of `run_dir` aside under this process's claim (`sqa.core.set_aside`)."""
    claim = _held[Path(run_dir).resolve()]
    set_aside.set_aside(run_dir, claim.token, names)
    # Whatever is made under those names from now on is this claim's; the set-aside folder never
    # is an output (what it keeps is named, never removed, `sqa.core.set_aside.restore`).
    claim.users = (claim.users - set(names)) | {set_aside.aside_folder(run_dir, claim.token).name}


def restore_previous(run_dir: str | Path) -> bool:
    """Put back the previous run that this process's claim of `run_dir` set aside; whether there was one.

    What the claim created so far is recorded first: that record is what it may replace.
    """
    record_point(run_dir)
    return set_aside.restore(run_dir, held_token(run_dir))


def discard_previous(run_dir: str | Path) -> None:
    """Remove the previous run that this process's claim of `run_dir` set aside: the new run has started."""
    set_aside.discard(run_dir, held_token(run_dir))
    record_point(run_dir)


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
        _held[run_dir].count += 1
        try:
            yield
        finally:
            _release(run_dir)
        return
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(
            f"{run_dir}: is a file, not a folder; choose another run directory ({options.directory}=...)"
        )
    stray = ownership.stray_record(run_dir)
    if stray is not None:
        # Before anything is recovered or recorded: every record sqa writes would replace that file.
        raise RunDirError(f"{run_dir}: {stray} ({options.directory}=...)")
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    created = not os.path.lexists(path)
    fd = _locked(path, options)
    refused = False
    try:
        _check_own_lock(fd, path, options)
        # Only the holder of the lock may finish what the claim before it left: a run killed
        # after setting the previous run aside and before it started training is undone here.
        # The token of that claim stays in the lock file until this is done, so that a kill
        # meanwhile leaves it to the next holder.
        previous = _previous_token(fd, run_dir)
        _write_owner(fd, run_dir, previous)
        restored = set_aside.recover(run_dir, previous)
        token = secrets.token_hex(16)
        _write_owner(fd, run_dir, token)
    except BaseException:
        os.close(fd)
        raise
    # Names recorded whose entry is gone are dropped before anyone can make one of their own.
    ownership.record_created(run_dir, before=ownership.entries(run_dir))
    # The lock file is never recorded: only a claim's own lock is ever sqa's (`also_mine`).
    users = (ownership.entries(run_dir) - ownership.owned(run_dir) - set(restored)) | {LOCK_NAME}
    _held[run_dir] = _Claim(fd, 1, token, users)
    try:
        yield
    except RunDirError:
        refused = True
        raise
    finally:
        # A refused claim leaves the folder as it found it: no lock file where there was none.
        _release(run_dir, refused, remove=created and refused)


def _check_own_lock(fd: int, path: Path, options: Options) -> None:
    """Refuse a lock file (open as `fd`) that holds what sqa never writes there: it is left as it is.

    sqa's lock files start with their owner's line ("PID 123 on host"), or are empty while the
    process that made one has not written it yet; anything else is another's file of that name.
    """
    head = os.pread(fd, 4, 0)
    if head and head != b"PID ":
        raise RunDirError(
            f"{path}: holds what sqa does not write in a lock file, so it is not sqa's and is left as "
            f"it is; move it away or choose another run directory ({options.directory}=...)"
        )


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


def _release(run_dir: Path, refused: bool = False, remove: bool = False) -> None:
    """Drop one hold of `run_dir`'s lock; the last records what the claim created and closes it.

    A `refused` claim records nothing; with `remove`, the lock file goes.
    """
    entry = _held[run_dir]
    entry.count -= 1
    if entry.count == 0:
        if not refused:
            record_point(run_dir)
        del _held[run_dir]
        if remove:
            # Removed while still locked: a process that opened it meanwhile finds it gone once it
            # gets the flock (`_locked`) and opens the path anew.
            with contextlib.suppress(FileNotFoundError):
                (run_dir / LOCK_NAME).unlink()
        # Closing the descriptor drops the flock.
        os.close(entry.fd)
