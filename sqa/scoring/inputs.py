"""What `sqa-score` scores: audio files, folders, glob patterns, CSV manifests (wav_path column), .txt lists.

The folders and patterns are read alike by `sqa-score`, `Scorer.score` and `score_files`, by one
walk (`audio_listing`):

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

import csv
import fnmatch
import io
import os
import stat
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqa.core.reading import ReadError, read_bytes
from sqa.data.audio import AudioError, os_path

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".aiff", ".aif", ".mp3", ".opus"}
# The characters that make a name that is no file a glob pattern (as the shell's, with `**`).
GLOB_CHARACTERS = frozenset("*?[")
# The most files and folders one folder's or pattern's walk looks at: far more than any corpus
# holds, and an end to a walk of a whole disk or of a tree of links.
MAX_WALK_ENTRIES = 1_000_000
# A folder walk is a pattern's: every file at any depth, hidden ones included (as pathlib's rglob).
FOLDER_PARTS = ("**", "*")
# A manifest's audio path and system columns, each under sqa-score's name or the training reader's
# (`sqa.data.readers.columns`): a row holding both spellings must give them the same value.
PATH_COLUMNS = ("wav_path", "path")
SYSTEM_COLUMNS = ("system_id", "system")
# The columns naming what a clip renders (its song or excerpt), for pairing systems by item: the
# training reader's song_id and its spellings (COLUMN_SPELLINGS, not imported: it loads scipy).
ITEM_COLUMNS = ("song_id", "song", "song_name", "item", "item_id")


class SkippedInputWarning(UserWarning):
    """A folder's or pattern's walk skipped a folder it could not read or a file it must not open."""


@dataclass
class Listing:
    """The regular files a folder or glob pattern names, sorted, what its walk skipped, and why none."""

    files: list[Path]
    skipped: list[str]
    problem: str | None


@dataclass
class Inputs:
    """Audio paths named by the inputs, each with its manifest columns, and what could not be read.

    `tops`: per path, the folder its walk started from (a folder given, or a glob pattern's part
    before its first wildcard), None for a path named itself (a file, a list or manifest entry).
    """

    paths: list[str] = field(default_factory=list)
    columns: list[dict[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    tops: list[str | None] = field(default_factory=list)

    def add(self, path: Path | str, columns: dict[str, str] | None = None, top: str | None = None) -> None:
        """Add one audio path with its manifest columns and walk's top; a name no file can have is a problem.

        So is a FIFO, device or socket: opening one to read its header could block forever.
        """
        try:
            os_path(path)
        except AudioError as err:  # from a manifest or list: a NUL, or a non-ASCII name under LANG=C
            self.problems.append(str(err))
            return
        special = special_file(Path(path))
        if special:
            self.problems.append(special)
            return
        self.paths.append(str(path))
        self.columns.append(columns or {})
        self.tops.append(top)


def special_file(path: Path) -> str | None:
    """Why `path` is refused if it exists but is neither a regular file nor a folder, else None.

    Decided by stat, which does not open the file (opening a FIFO blocks until a writer comes).
    """
    try:
        if not path.exists() or path.is_file() or path.is_dir():
            return None
    except OSError:
        return None
    return _not_regular(path)


def _not_regular(path: Path | str) -> str:
    """The refusal of a FIFO, device or socket at `path`."""
    return f"{path}: not a regular file (a FIFO, device or socket); refusing to open it"


def _resolve_against(base: Path, entry: str) -> Path:
    path = Path(entry)
    return path if path.is_absolute() else base / path


def numbered_csv_rows(path: Path) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The columns of the CSV at `path` and its rows, each with its line in the file.

    A row's line is its last (for a quoted cell over several lines): blank lines are skipped, so
    rows are not counted from the header. Only a regular file is opened (a FIFO would block):
    raises ReadError (missing, not a regular file), UnicodeDecodeError or csv.Error.
    """
    text = read_bytes(path).decode("utf-8-sig")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = [(reader.line_num, row) for row in reader]
    return list(reader.fieldnames or []), rows


def _read_manifest(path: Path, inputs: Inputs) -> None:
    try:
        columns, rows = numbered_csv_rows(path)
    except UnicodeDecodeError as err:
        inputs.problems.append(f"{path}: not UTF-8 text ({err}); save the manifest as UTF-8")
        return
    except ReadError as err:
        inputs.problems.append(str(err))
        return
    except (csv.Error, OSError) as err:
        inputs.problems.append(f"{path}: cannot read the CSV manifest ({err})")
        return
    named = [c for c in PATH_COLUMNS if c in columns]
    if not named:
        inputs.problems.append(
            f"{path}: the CSV manifest has no wav_path or path column (columns: {', '.join(columns)})"
        )
    elif not rows:
        inputs.problems.append(f"{path}: the manifest holds no rows")
    else:
        for line, row in rows:
            clash = _clash(row, PATH_COLUMNS) or _clash(row, SYSTEM_COLUMNS)
            if clash is not None:
                inputs.problems.append(f"{path}, line {line}: {clash}")
                continue
            audio = next((row[c].strip() for c in named if (row.get(c) or "").strip()), "")
            if not audio:
                inputs.problems.append(f"{path}, line {line}: empty {named[0]}")
                continue
            extra = {k: v for k, v in row.items() if k not in PATH_COLUMNS and k is not None}
            inputs.add(_resolve_against(path.parent, audio), extra)


def _clash(row: dict[str, str], spellings: Sequence[str]) -> str | None:
    """Why a manifest row's cells under two spellings of one column (`wav_path`, `path`) disagree, or None.

    An empty cell gives no value, so it never disagrees.
    """
    values = {c: row[c].strip() for c in spellings if (row.get(c) or "").strip()}
    if len(set(values.values())) < 2:
        return None
    given = " and ".join(f"{c} {v!r}" for c, v in values.items())
    return f"{given} differ; give one of the columns, or the same value in both"


def _read_list(path: Path, inputs: Inputs) -> None:
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except UnicodeDecodeError as err:
        inputs.problems.append(f"{path}: not UTF-8 text ({err})")
        return
    entries = [line for line in lines if line]
    if not entries:
        inputs.problems.append(f"{path}: the list names no files")
    for entry in entries:
        inputs.add(_resolve_against(path.parent, entry))


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
    return None if stat.S_ISREG(mode) else _not_regular(path)


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


def _pattern_parts(text: str) -> tuple[str, tuple[str, ...]]:
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
        top, parts = _pattern_parts(text)
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


def expand_inputs(items: Sequence[str]) -> Inputs:
    """Audio paths named by files, folders, glob patterns, CSV manifests (wav_path or path) and .txt lists.

    A folder's or pattern's files keep where their walk started (`Inputs.tops`), which
    `sqa.scoring.systems` reads a folder per system from.
    """
    inputs = Inputs()
    for item in items:
        path = Path(item)
        listing = None if special_file(path) else audio_listing(item)
        if listing is not None:
            inputs.problems.extend(listing.skipped)
            if listing.problem is not None:
                inputs.problems.append(listing.problem)
            top = item if path.is_dir() else _pattern_parts(item)[0]
            for p in listing.files:
                inputs.add(p, top=top)
        elif not path.exists():
            inputs.problems.append(f"{path}: does not exist")
        elif special_file(path):
            inputs.problems.append(special_file(path))
        elif path.suffix.lower() == ".csv":
            _read_manifest(path, inputs)
        elif path.suffix.lower() == ".txt":
            _read_list(path, inputs)
        else:
            inputs.add(path)
    return inputs
