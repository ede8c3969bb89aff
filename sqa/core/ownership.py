"""What sqa wrote: the only files it ever removes or replaces.

A folder sqa writes into (a run directory, an export, a baseline's run directory) holds
`.sqa-owned.json`, the names of the entries directly inside it that sqa created. A name is
recorded only once sqa has created that entry (a name it merely might write never is), so a
file the user had before, or adds later, never becomes sqa's. The record names the folder it was
written for (its inode and creation time, `folder_id`): copied or downloaded into another folder,
or restored from a backup into a new folder that took the old one's inode, it proves nothing, and
the folder counts as holding no file of sqa's. Such a stray record is not sqa's either: sqa never
replaces it with its own, and refuses to write a record into its folder until the user moves it
(`stray_record`). Replacing or clearing a folder is refused when it holds any entry not recorded
there, when it is or contains an input of the same command, the working directory or a repository
root, or when it is an ancestor of one of those.
"""

from __future__ import annotations

import ctypes
import fnmatch
import json
import os
import stat
import struct
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from sqa.core.atomic import atomic_write_text

MANIFEST = ".sqa-owned.json"
# statx(2): "the current directory" for a path, the creation-time bit of its mask, the size of
# struct statx and the offset of its stx_btime (after mask, blksize, attributes, nlink, uid, gid,
# mode, ino, size, blocks, attributes_mask and stx_atime).
_AT_FDCWD, _STATX_BTIME, _STATX_SIZE, _STATX_BTIME_OFFSET = -100, 0x800, 256, 80
_AT_SYMLINK_NOFOLLOW = 0x100
# A manifest lists names, never contents: a megabyte holds tens of thousands of them.
MAX_MANIFEST_BYTES = 1 << 20


class OwnershipError(RuntimeError):
    """A folder holds something sqa did not write, or is a place sqa never clears."""


def _read(path: Path) -> bytes | None:
    """The bytes of `path` if it is a regular file (no link, FIFO) of bounded size, else None."""
    try:
        # O_NONBLOCK: a FIFO in place of the manifest must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_MANIFEST_BYTES:
            return None
        return os.read(fd, MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)


def _libc_statx() -> Callable[..., int] | None:
    """The C library's statx(2) (None where it has none: not Linux, or a glibc before 2.28)."""
    try:
        return ctypes.CDLL(None, use_errno=True).statx
    except (OSError, AttributeError):
        return None


# Looked up once: a folder's identity must not change with what the process does to ctypes later.
_STATX = _libc_statx()


def born_ns(folder: str | Path, follow: bool = True) -> int | None:
    """When `folder` was created, in ns since the epoch, from statx(2) (None where that is not known).

    `follow`: a link's target (as os.stat follows), else the link itself.
    """
    if _STATX is None:
        return None
    buffer = ctypes.create_string_buffer(_STATX_SIZE)
    flags = 0 if follow else _AT_SYMLINK_NOFOLLOW
    if _STATX(_AT_FDCWD, os.fsencode(folder), flags, _STATX_BTIME, buffer) != 0:
        return None
    (mask,) = struct.unpack_from("I", buffer, 0)
    seconds, nanoseconds = struct.unpack_from("qI", buffer, _STATX_BTIME_OFFSET)
    # A file system without creation times leaves the bit unset; some images zero them.
    if not mask & _STATX_BTIME or (seconds, nanoseconds) == (0, 0):
        return None
    return seconds * 1_000_000_000 + nanoseconds


def folder_id(folder: str | Path) -> str | None:
    """The identity a record of `folder` carries: inode and creation time, "ino-ns" (None: no folder).

    A rename or move keeps it; a copy, an unpacked download or a new folder of the same name
    gets another, even where the file system gives the new folder a deleted one's inode (ext4
    does at once): its creation time differs. Where the file system keeps no creation time
    (statx(2) has none), the identity is the inode alone, "ino".
    """
    # Followed: a run directory named through a link is the folder it leads to.
    return _identity(folder, follow=True, folder=True)


def entry_id(path: str | Path) -> str | None:
    """The identity of the entry at `path`, not followed: inode and creation time, "ino-ns" (None: none).

    A rename keeps it; another entry made under the name later has another, even with a freed
    inode (its creation time differs).
    """
    return _identity(path, follow=False, folder=False)


def _identity(path: str | Path, follow: bool, folder: bool) -> str | None:
    """The identity of `path`: "ino-ns" ("ino" without creation times); None if missing or not a `folder`."""
    try:
        info = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None
    if folder and not stat.S_ISDIR(info.st_mode):
        return None
    born = born_ns(path, follow=follow)
    return f"{info.st_ino}" if born is None else f"{info.st_ino}-{born}"


def _name(name: object) -> bool:
    """Whether `name` can be an entry directly inside a folder."""
    return isinstance(name, str) and name not in ("", ".", "..") and "/" not in name


def _read_record(folder: Path) -> tuple[set[str], dict[str, str | None]] | None:
    """(names, pending) of `folder`'s record, if it has one written for this very folder (else None).

    `pending` maps a name sqa was about to create, move or rename into place to the identity
    of that entry (`entry_id`), or to None for a temporary file named before it was made.
    """
    data = _read(folder / MANIFEST)
    if data is None:
        return None
    try:
        record = json.loads(data.decode("utf-8"))
        names, written_for = record["entries"], record["folder"]
        pending = record.get("pending", {})
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError):
        # An unreadable record proves nothing: the folder counts as holding no file of sqa's.
        return None
    # An identity is a string: a bare inode number (a record of sqa before creation times) proves nothing.
    if not isinstance(written_for, str) or written_for != folder_id(folder) or not isinstance(names, list):
        return None
    pending = pending if isinstance(pending, dict) else {}
    return (
        {n for n in names if _name(n)},
        {n: i for n, i in pending.items() if _name(n) and (i is None or isinstance(i, str))},
    )


def _proven(folder: Path, pending: dict[str, str | None]) -> set[str]:
    """The pending names whose entry is the one sqa meant: the same identity, or its temporary file.

    A name pending without an identity is a temporary file's, named at random before sqa made it:
    a regular file of that name is that file.
    """
    proven = set()
    for name, identity in pending.items():
        if identity is None:
            try:
                if stat.S_ISREG(os.lstat(folder / name).st_mode):
                    proven.add(name)
            except OSError:
                continue
        elif entry_id(folder / name) == identity:
            proven.add(name)
    return proven


def _resolved(folder: Path) -> tuple[set[str], bool] | None:
    """(names sqa can prove its own in `folder`, whether its record holds pending ones); None: no record.

    The names are those the record lists, and its pending names whose entries prove to be the
    ones sqa meant.
    """
    read = _read_record(folder)
    if read is None:
        return None
    names, pending = read
    return names | _proven(folder, pending), bool(pending)


def _record(folder: Path) -> set[str] | None:
    """The names sqa can prove its own in `folder`, if it has a record written for this folder (else None)."""
    resolved = _resolved(folder)
    return None if resolved is None else resolved[0]


def owned(folder: str | Path) -> set[str]:
    """The names sqa recorded as its own in `folder` (none without a record written for this folder)."""
    return _record(Path(folder)) or set()


def has_record(folder: str | Path) -> bool:
    """Whether `folder` holds a record of sqa's written for this very folder."""
    return _record(Path(folder)) is not None


def stray_record(folder: str | Path) -> str | None:
    """Why `folder`'s `.sqa-owned.json` is not sqa's to replace (None: there is none, or it is its own)."""
    folder = Path(folder)
    if not os.path.lexists(folder / MANIFEST) or _record(folder) is not None:
        return None
    return (
        f"holds {MANIFEST}, which is not a record sqa wrote for this folder (copied from another "
        "folder, or not sqa's), so sqa cannot tell its own entries there and never replaces that "
        f"file; move {MANIFEST} out of the folder (its entries then count as not sqa's) or choose "
        "another folder"
    )


def check_recordable(folder: str | Path) -> None:
    """OwnershipError if `folder` holds a stray record: sqa could not record what it writes there."""
    stray = stray_record(folder)
    if stray is not None:
        raise OwnershipError(f"{folder}: {stray}; nothing was written")


def _write(folder: Path, names: Iterable[str], pending: dict[str, str | None] | None = None) -> None:
    """Replace `folder`'s record by the sorted `names` (and `pending`), stamped with the folder's identity.

    A stray record there (`stray_record`) is refused, not replaced: it may be a user's file.
    """
    check_recordable(folder)
    record: dict[str, object] = {
        "written_by": "sqa",
        "folder": folder_id(folder),
        "entries": sorted(set(names)),
    }
    if pending:
        record["pending"] = dict(sorted(pending.items()))
    atomic_write_text(folder / MANIFEST, json.dumps(record, indent=1) + "\n")


def intend(folder: str | Path, name: str, identity: str | None = None) -> None:
    """Note in `folder`'s record, before sqa makes, moves or renames an entry `name` there, that it is sqa's.

    `identity` is that entry's (`entry_id`: what it keeps when renamed into place or moved
    aside); None only for a temporary file named at random, before it is made. Killed at any
    later instant, sqa can prove the entry its own by that identity, and never a file made under
    the name by anyone else. The name leaves the record's plain names meanwhile. The next record
    that sqa writes resolves the pending names (`record`, `record_created`).
    """
    folder = Path(folder)
    names, pending = _read_record(folder) or (set(), {})
    _write(folder, names - {name}, {**pending, name: identity})


def record(folder: str | Path, names: Iterable[str]) -> None:
    """Record `names`, entries sqa has just created in `folder`, as sqa's (those present only)."""
    folder = Path(folder)
    mine, pending = _resolved(folder) or (set(), False)
    new = {n for n in names if n not in mine and n != MANIFEST and os.path.lexists(folder / n)}
    # Pending names are resolved too: those proven are recorded, the others dropped.
    if new or pending:
        _write(folder, mine | new)


def record_where_recorded(folder: str | Path, names: Iterable[str]) -> None:
    """`record` `names` in `folder` only if sqa keeps a record there (a run or export folder).

    A score table written into a user's own folder leaves no record behind.
    """
    if has_record(folder):
        record(folder, names)


def record_created(folder: str | Path, before: Iterable[str]) -> None:
    """Record as sqa's every entry of `folder` not in `before` (the user's names when sqa began).

    Recorded names whose entry is gone are dropped, so that a file the user makes later under
    such a name is never taken for sqa's.
    """
    folder = Path(folder)
    resolved = _resolved(folder)
    present = entries(folder) - {MANIFEST}
    new = present - set(before)
    if resolved is None and not new:
        return
    mine, pending = resolved or (set(), False)
    # Pending names are resolved: those proven are recorded, the others dropped.
    if resolved is None or mine != mine & present | new or pending:
        _write(folder, mine & present | new)


def record_all(folder: str | Path) -> None:
    """Record every entry of `folder` as sqa's: a folder sqa has just created and filled itself."""
    folder = Path(folder)
    _write(folder, (p.name for p in folder.iterdir() if p.name != MANIFEST))


def entries(folder: str | Path) -> set[str]:
    """The names directly inside `folder` now (none if it does not exist)."""
    folder = Path(folder)
    return {p.name for p in folder.iterdir()} if folder.is_dir() else set()


def foreign(folder: str | Path, also_mine: Sequence[str] = ()) -> list[Path]:
    """The entries of `folder` that sqa did not record as its own (sorted); `also_mine`: names to allow."""
    folder = Path(folder)
    mine = owned(folder) | {MANIFEST, *also_mine}
    return sorted(p for p in folder.iterdir() if p.name not in mine)


def unrecorded_names(folder: str | Path, patterns: Iterable[str]) -> list[str]:
    """The entries of `folder` matching `patterns`, if `folder` has no record of its own (else none).

    For folders sqa wrote before it kept records: a caller that has checked a folder is sqa's by
    its content (an export's config.yaml, a run's run_info.json) counts these names as sqa's.
    """
    folder = Path(folder)
    if not folder.is_dir() or has_record(folder):
        return []
    patterns = list(patterns)
    return sorted(
        p.name for p in folder.iterdir() if any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns)
    )


def _repository_roots(start: Path) -> list[Path]:
    """The folders from `start` upwards that hold `.git` (a repository root)."""
    return [p for p in (start, *start.parents) if (p / ".git").exists()]


def protected(folder: Path, inputs: Sequence[str | Path] = ()) -> str | None:
    """Why `folder` must never be cleared (None if it may): the working directory, a repository, an input."""
    target = folder.resolve()
    cwd = Path.cwd().resolve()
    if target == cwd or target in cwd.parents:
        return "is the working directory or one of its parents"
    if (target / ".git").exists():
        return "is a repository root"
    for root in _repository_roots(cwd) + _repository_roots(Path(__file__).resolve().parent):
        if target in root.parents:
            return f"holds the repository {root}"
    for item in inputs:
        path = Path(item).expanduser().resolve()
        if path == target or target in path.parents:
            return f"holds {item}, an input of this command"
    return None


def check_replaceable(
    folder: str | Path, what: str, inputs: Sequence[str | Path] = (), also_mine: Sequence[str] = ()
) -> None:
    """OwnershipError unless sqa may remove or replace `folder`'s contents (see the module docstring).

    A folder that does not exist may always be written.

    `what` names the command's option in the message ("overwrite=true", "--overwrite").
    """
    folder = Path(folder)
    if not os.path.lexists(folder):
        return
    reason = protected(folder, inputs)
    if reason is None and folder.is_dir():
        reason = stray_record(folder)
    if reason is None and folder.is_dir():
        found = foreign(folder, also_mine)
        if found:
            reason = (
                f"holds {found[0].name}, which sqa did not write"
                + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
                + f"; {what} replaces only what sqa wrote there ({MANIFEST} records it)"
            )
    if reason is not None:
        raise OwnershipError(f"{folder}: {reason}; {what} refused, nothing was removed")
