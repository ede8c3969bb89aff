"""What `sqa-score` scores: audio files, folders, glob patterns, CSV manifests (wav_path column), .txt lists.

Folders and patterns are walked by `sqa.scoring.walks`; manifests and lists are read here.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sqa.core.reading import ReadError, read_bytes
from sqa.data.audio import AudioError, os_path
from sqa.scoring.walks import audio_listing, not_regular, pattern_parts

# A manifest's audio path and system columns, each under sqa-score's name or the training reader's
# (`sqa.data.readers.columns`): a row holding both spellings must give them the same value.
PATH_COLUMNS = ("wav_path", "path")
SYSTEM_COLUMNS = ("system_id", "system")
# The columns naming what a clip renders (its song or excerpt), for pairing systems by item: the
# training reader's song_id and its spellings (COLUMN_SPELLINGS, not imported: it loads scipy).
ITEM_COLUMNS = ("song_id", "song", "song_name", "item", "item_id")


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
    return not_regular(path)


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
            top = item if path.is_dir() else pattern_parts(item)[0]
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
