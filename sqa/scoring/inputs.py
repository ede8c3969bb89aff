"""What `sqa-score` scores: audio files, folders, glob patterns, CSV manifests (wav_path column), .txt lists.

The folders and patterns are read alike by `sqa-score`, `Scorer.score` and `score_files`.
"""

from __future__ import annotations

import csv
import glob
import io
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqa.core.reading import ReadError, read_bytes
from sqa.data.audio import AudioError, os_path

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".aiff", ".aif", ".mp3", ".opus"}
# The characters that make a name that is no file a glob pattern (as the shell's, with `**`).
GLOB_CHARACTERS = frozenset("*?[")


@dataclass
class Inputs:
    """Audio paths named by the inputs, each with its manifest columns, and what could not be read."""

    paths: list[str] = field(default_factory=list)
    columns: list[dict[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, path: Path | str, columns: dict[str, str] | None = None) -> None:
        """Add one audio path with its manifest columns; a name no file here can have is a problem.

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


def special_file(path: Path) -> str | None:
    """Why `path` is refused if it exists but is neither a regular file nor a folder, else None.

    Decided by stat, which does not open the file (opening a FIFO blocks until a writer comes).
    """
    try:
        if not path.exists() or path.is_file() or path.is_dir():
            return None
    except OSError:
        return None
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
    if "wav_path" not in columns:
        inputs.problems.append(
            f"{path}: the CSV manifest has no wav_path column (columns: {', '.join(columns)})"
        )
    elif not rows:
        inputs.problems.append(f"{path}: the manifest holds no rows")
    else:
        for line, row in rows:
            if not (row.get("wav_path") or "").strip():
                inputs.problems.append(f"{path}, line {line}: empty wav_path")
                continue
            extra = {k: v for k, v in row.items() if k != "wav_path" and k is not None}
            inputs.add(_resolve_against(path.parent, row["wav_path"].strip()), extra)


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


def listed_audio(item: str | os.PathLike) -> tuple[list[Path], str | None] | None:
    """The files a folder (its audio files, recursively) or a glob pattern names, sorted, and why none.

    None for anything else: a file, or a name that is neither a folder, a file nor a pattern.
    A pattern is a name holding `*`, `?` or `[` that is no file itself; it keeps every regular
    file it matches (the user chose them), `**` matching folders at any depth.
    """
    path = Path(item)
    if path.is_dir():
        found = [p for p in sorted(path.rglob("*")) if p.suffix.lower() in AUDIO_SUFFIXES and p.is_file()]
        suffixes = ", ".join(sorted(AUDIO_SUFFIXES))
        return found, None if found else f"{path}: the folder holds no audio files ({suffixes})"
    text = os.fspath(item)
    if path.exists() or not GLOB_CHARACTERS & set(text):
        return None
    found = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
    return found, None if found else f"{text}: no file matches this pattern"


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
    """Audio paths named by files, folders, glob patterns, CSV manifests (wav_path column) and .txt lists."""
    inputs = Inputs()
    for item in items:
        path = Path(item)
        listed = None if special_file(path) else listed_audio(item)
        if listed is not None:
            found, problem = listed
            if problem is not None:
                inputs.problems.append(problem)
            for p in found:
                inputs.add(p)
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
