"""Folders and glob patterns walked for the audio files they name (`audio_listing`).

`sqa-score`, `Scorer.score` and `score_files` read folders and patterns alike, by this one walk:

- a link to a folder is followed, as a link to a file is, but a folder already walked (by its
  device and inode) is not walked again, so links that lead back up (`a -> ..`) end the walk
  instead of repeating it; each file is listed once, by the first of its paths in sorted order
  (files are told apart by their resolved real paths);
- a folder that vanishes or cannot be read while walked is skipped, and so is a FIFO, device,
  socket or dangling link the walk would list (never opened: opening a FIFO blocks); each is
  reported, in `Inputs.problems` for `sqa-score`, as a `SkippedInputWarning` for the Python API;
- a walk looks at no more than MAX_WALK_ENTRIES files and folders: past that, the folder or
  pattern is refused whole, naming it and the bound (`sqa-score /` ends instead of walking a disk).
"""

from __future__ import annotations

import fnmatch
import os
import stat
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".aiff", ".aif", ".mp3", ".opus"}
# The characters that make a name that is no file a glob pattern (as the shell's, with `**`).
GLOB_CHARACTERS = frozenset("*?[")
# The most files and folders one folder's or pattern's walk looks at: far more than any corpus
# holds, and an end to a walk of a whole disk or of a tree of links.
MAX_WALK_ENTRIES = 1_000_000
# A folder walk is a pattern's: every file at any depth, hidden ones included (as pathlib's rglob).
FOLDER_PARTS = ("**", "*")


class SkippedInputWarning(UserWarning):
    """A folder's or pattern's walk skipped a folder it could not read or a file it must not open."""


@dataclass
class Listing:
    """The regular files a folder or glob pattern names, sorted, what its walk skipped, and why none."""

    files: list[Path]
    skipped: list[str]
    problem: str | None


def not_regular(path: Path | str) -> str:
    """The refusal of a FIFO, device or socket at `path`."""
    return f"{path}: not a regular file (a FIFO, device or socket); refusing to open it"


def _closure(states: Iterable[int], parts: Sequence[str]) -> frozenset[int]:
    """`states` (positions in `parts`) with the position after each `**`, which may match no folder."""
    reached = set(states)
    todo = list(reached)
    while todo:
        i = todo.pop()
        if i < len(parts) and parts[i] == "**" and i + 1 not in reached:
            reached.add(i + 1)
            todo.append(i + 1)
    return frozenset(reached)


def _advance(
    states: frozenset[int], name: str, is_dir: bool, parts: Sequence[str], hidden: bool
) -> frozenset[int]:
    """The positions in `parts` reached from `states` past the entry `name` (len(parts): matched whole)."""
    shown = hidden or not name.startswith(".")
    reached = set()
    for i in states:
        if i == len(parts):
            continue
        part = parts[i]
        if part == "**":
            # As glob's: `**` takes any folder, and as the last part any file; never a hidden one.
            if shown and (is_dir or i == len(parts) - 1):
                reached.add(i)
        elif fnmatch.fnmatch(name, part) and (shown or part.startswith(".")):
            reached.add(i + 1)
    return _closure(reached, parts)


def _is_dir(entry: os.DirEntry) -> bool:
    """Whether `entry` is a folder or a link to one."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _unlisted(entry: os.DirEntry, path: str) -> str | None:
    """Why the file `entry` at `path` is skipped, or None for a regular file (or a link to one).

    Decided by stat, never by opening it.
    """
    try:
        if entry.is_file():
            return None
        mode = entry.stat().st_mode
    except OSError as err:  # a dangling link, or a file gone since the folder was read
        return f"{path}: skipped, it could not be read ({err.strerror or err})"
    return None if stat.S_ISREG(mode) else not_regular(path)


def _walk(
    top: str, parts: Sequence[str], hidden: bool, suffixes: Collection[str] | None
) -> tuple[list[str], list[str], bool]:
    """The regular files under `top` that `parts` match, in sorted order, what was skipped, and whether cut.

    Depth first, each folder's entries by name: the order of sorting the paths. A folder is walked
    once per set of pattern positions it is reached in (so a link back up ends the walk); one that
    cannot be read is skipped, as is a matching entry that is no regular file. Cut (True) once
    more than MAX_WALK_ENTRIES entries have been looked at.
    """
    final = len(parts)
    files: list[str] = []
    skipped: list[str] = []
    visited: set[tuple[int, int, frozenset[int]]] = set()
    looked = 0
    # Folders to read (with the pattern positions they are reached in) and files found (None).
    # A folder's positions never hold `final` (matched whole): one set per folder, however reached.
    stack: list[tuple[str, frozenset[int] | None]] = [(top, _closure({0}, parts) - {final})]
    while stack:
        path, states = stack.pop()
        if states is None:
            files.append(path)
            continue
        try:
            info = os.stat(path or os.curdir)
            key = (info.st_dev, info.st_ino, states)
            if key in visited:
                continue
            visited.add(key)
            entries = []
            with os.scandir(path or os.curdir) as found:
                for entry in found:
                    looked += 1
                    if looked > MAX_WALK_ENTRIES:
                        return files, skipped, True
                    entries.append(entry)
        except OSError as err:  # removed, or not readable, since its parent was read
            skipped.append(f"{path}: folder skipped, it could not be read ({err.strerror or err})")
            continue
        here = []
        for entry in sorted(entries, key=lambda e: e.name):
            child = os.path.join(path, entry.name)
            is_dir = _is_dir(entry)
            reached = _advance(states, entry.name, is_dir, parts, hidden)
            if is_dir:
                inner = reached - {final}  # a folder itself is never listed
                if inner:
                    here.append((child, inner))
            elif final in reached and (
                suffixes is None or os.path.splitext(entry.name)[1].lower() in suffixes
            ):
                why = _unlisted(entry, child)
                if why is None:
                    here.append((child, None))
                else:
                    skipped.append(why)
        stack.extend(reversed(here))
    return files, skipped, False


def pattern_parts(text: str) -> tuple[str, tuple[str, ...]]:
    """The folder a pattern's walk starts from (its parts before the first wildcard) and its other parts."""
    anchor = os.sep if text.startswith(os.sep) else ""
    segments = text.split(os.sep)
    # A doubled separator names no folder; a trailing one (the last part empty) matches folders only.
    segments = [s for s in segments[:-1] if s] + segments[-1:]
    first = next(i for i, s in enumerate(segments) if GLOB_CHARACTERS & set(s))
    return anchor + os.sep.join(segments[:first]), tuple(segments[first:])


def audio_listing(item: str | os.PathLike) -> Listing | None:
    """The files a folder (its audio files, recursively) or a glob pattern names, what was skipped, why none.

    None for anything else: a file, or a name that is neither a folder, a file nor a pattern.
    A pattern is a name holding `*`, `?` or `[` that is no file itself; it keeps every regular
    file it matches (the user chose them), `**` matching folders at any depth. The walk is the
    module's (links, skipped entries, MAX_WALK_ENTRIES).
    """
    path = Path(item)
    text = os.fspath(item)
    if path.is_dir():
        files, skipped, cut = _walk(text, FOLDER_PARTS, hidden=True, suffixes=AUDIO_SUFFIXES)
        suffixes = ", ".join(sorted(AUDIO_SUFFIXES))
        none = f"{path}: the folder holds no audio files ({suffixes})"
    elif path.exists() or not GLOB_CHARACTERS & set(text):
        return None
    else:
        top, parts = pattern_parts(text)
        files, skipped, cut = [], [], False
        if not top or os.path.isdir(top):
            files, skipped, cut = _walk(top, parts, hidden=False, suffixes=None)
        none = f"{text}: no file matches this pattern"
    if cut:
        return Listing(
            [],
            [],
            f"{text}: holds more than {MAX_WALK_ENTRIES} files and folders, the most a folder's "
            "or pattern's walk looks at; name a smaller folder or a narrower pattern",
        )
    listed: list[Path] = []
    seen: set[str] = set()
    for file in files:
        # Two paths of one file (a link to it, or a linked folder met twice): the first is kept.
        real = os.path.realpath(file)
        if real not in seen:
            seen.add(real)
            listed.append(Path(file))
    return Listing(listed, skipped, None if listed else none)


def listed_audio(item: str | os.PathLike) -> tuple[list[Path], str | None] | None:
    """The files a folder or glob pattern names, sorted, and why none (`audio_listing`); None for others.

    Each entry its walk skipped is a `SkippedInputWarning`.
    """
    listing = audio_listing(item)
    if listing is None:
        return None
    if listing.skipped:
        # Here, not at the top: clips imports torch, which sqa-score's argument errors run without.
        from sqa.scoring.clips import warn_at_caller

        for why in listing.skipped:
            warn_at_caller(why, SkippedInputWarning)
    return listing.files, listing.problem


def audio_paths(paths: str | os.PathLike | Iterable[str | os.PathLike]) -> list[str]:
    """The files to score of a path or iterable of paths, a folder or glob pattern replaced by its files.

    A folder holding no audio, or a pattern matching nothing, is a ValueError naming it.
    """
    items = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
    files = []
    for item in items:
        listed = listed_audio(item)
        if listed is None:
            files.append(os.fspath(item))
            continue
        found, problem = listed
        if problem is not None:
            raise ValueError(problem)
        files.extend(str(p) for p in found)
    return files
