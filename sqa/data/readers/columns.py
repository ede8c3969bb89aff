"""A CSV manifest's columns: sqa's names, the spellings recognised for them and the rows as read.

A manifest's columns are taken by sqa's names, a mapping (`data.corpus.columns`) or recognised
spellings (`COLUMN_SPELLINGS`); whatever cannot be settled is a `CorpusError` naming the setting
that settles it (`columns_override`). Its separator (comma, semicolon or tab, as spreadsheets
export them) is read from its header line unless `data.corpus.delimiter` or Excel's `sep=` first
line names it; a row of more or fewer fields than the header is a `CorpusError` naming its line. A
wide table (a column per rater) is read by `data.corpus.rater_columns`.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from sqa.core.path_ends import distinct_ends
from sqa.data.corpus import CorpusError

# sqa's columns of a CSV manifest: required (sample_id derived from the file name where absent),
# then optional; `score_<name>` columns add score dimensions.
REQUIRED_CSV_COLUMNS = ("wav_path", "score", "system_id", "sample_id")
OPTIONAL_CSV_COLUMNS = ("listener_id", "domain_id", "split", "test_set", "role", "song_id")
# Other tables' names for sqa's columns, recognised where a table has no column of sqa's own name.
# Names are compared in lower case with spaces and hyphens as underscores (so `System ID` is
# system_id too); a table with two candidates for one column must name its own (`columns`).
COLUMN_SPELLINGS = {
    "wav_path": (
        "filename",
        "file_name",
        "file",
        "filepath",
        "file_path",
        "path",
        "wav",
        "wav_file",
        "audio",
        "audio_file",
        "audio_path",
        "take",
    ),
    "score": ("mos", "rating", "mean_score"),
    # A singer is the "system" of a teacher's or a choir's recordings.
    "system_id": ("system", "sys", "sys_id", "system_name", "model", "model_id", "model_name", "singer"),
    "sample_id": ("sample", "utt_id", "utterance_id", "clip_id"),
    "listener_id": ("listener", "rater", "rater_id", "judge", "judge_id"),
    "song_id": ("song", "song_name", "item", "item_id"),
}
# `score_<name>` columns that hold statistics of a clip's ratings (their spread or count), not a
# score dimension: left unread unless `data.corpus.columns` names them (`{score_std: score_std}`).
RATING_STATISTICS = ("std", "sd", "stdev", "var", "variance", "count", "n", "num_ratings", "ci", "sem")


# The separators a spreadsheet exports (a comma; a semicolon where the comma is the decimal mark; a tab).
DELIMITERS = (",", ";", "\t")
# Column names that say a wide table's rater columns, by their start (`rater_anna`, `Listener 2`).
RATER_PREFIXES = ("rater", "listener", "judge", "rating", "annotator")
# Excel's first line naming a table's separator (`sep=;`): one character, the line no row.
SEP_LINE = re.compile(r"sep=([^\r\n])\r?(?:\n|$)", re.IGNORECASE)


def excel_separator(text: str) -> str | None:
    """The separator that the first line of CSV `text` names as Excel writes it (`sep=;`), or None.

    Excel reads such a line as the separator and no row; so does sqa.
    """
    match = SEP_LINE.match(text)
    return match.group(1) if match else None


def detect_delimiter(text: str) -> str:
    """The separator of CSV `text`: the one of `DELIMITERS` most often outside quotes in its header line.

    An Excel `sep=` first line names it instead. A tie (a one-column header) is the comma.
    """
    named = excel_separator(text)
    if named is not None:
        return named
    header = next((line for line in text.splitlines() if line.strip()), "")
    # Separators outside quotes: a quoted column name may hold any of them.
    unquoted = "".join(part for i, part in enumerate(header.split('"')) if i % 2 == 0)
    return max(DELIMITERS, key=unquoted.count)


def _blank(row: list[str]) -> bool:
    """Whether a row as csv reads it is a blank line (nothing, or blanks only)."""
    return not row or (len(row) == 1 and not row[0].strip())


def _width_error(path: Path, delimiter: str, header: list[str], bad: list[tuple[int, int]]) -> CorpusError:
    """The error of rows whose (line, field count) in `bad` differ from the `header`'s."""
    line, count = bad[0]
    message = f"{path} line {line}: {count} field(s) where the header has {len(header)}"
    # Another separator that splits the header into more columns: the table's, not `delimiter`.
    other = max(DELIMITERS, key=lambda d: sum(name.count(d) for name in header))
    if other != delimiter and sum(name.count(other) for name in header) >= len(header):
        message += (
            f"; the header holds {other!r} between its names: is the table read with the wrong separator? "
            f"set data.corpus.delimiter={other!r} or leave it unset (null)"
        )
    elif count > len(header) and delimiter == ",":
        message += (
            '; a decimal comma must be quoted ("4,5") or written with a point (4.5), or the table '
            "written with ';' between its fields"
        )
    elif count > len(header):
        message += f"; a {delimiter!r} inside a cell must be quoted"
    if len(bad) > 1:
        message += f" ({len(bad)} such rows, the next at line {bad[1][0]})"
    return CorpusError(message)


def csv_rows(
    text: str, path: Path, delimiter: str = ","
) -> tuple[list[str], list[tuple[int, dict[str, str]]]]:
    """The columns and rows of the CSV `text` of `path`, each row with its (last) line in the file.

    Blank lines are skipped; an Excel `sep=` first line too (it is no row, but counts as a line),
    where it names `delimiter`. A CorpusError names the line of a bad field, of a row with more or
    fewer fields than the header, and a `sep=` line that names another separator than `delimiter`.
    """
    named = excel_separator(text)
    if named is not None and named not in DELIMITERS:
        raise CorpusError(
            f"{path} line 1: the table's sep= line names {named!r} as its separator, which sqa does not "
            f"read; write the table with one of {list(DELIMITERS)} between its fields"
        )
    if delimiter not in DELIMITERS:
        raise ValueError(f"delimiter must be one of {list(DELIMITERS)} or null (detected), got {delimiter!r}")
    if named is not None and named != delimiter:
        raise CorpusError(
            f"{path} line 1: the table's sep= line names {named!r} as its separator, but it is read with "
            f"{delimiter!r}; set data.corpus.delimiter to {named!r} or leave it unset (null)"
        )
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        if named is not None:
            next(reader)
        header = next((row for row in reader if not _blank(row)), [])
        rows, bad = [], []
        for row in reader:
            if _blank(row):
                continue
            if len(row) != len(header):
                bad.append((reader.line_num, len(row)))
            rows.append((reader.line_num, dict(zip(header, row, strict=False))))
    except csv.Error as err:
        # csv's error names neither the file nor the line. Its field limit stays as it is: no
        # manifest cell is that long, but an unclosed quote makes the rest of the file one cell.
        limit = csv.field_size_limit()
        what = (
            f"a field longer than {limit} characters (is a quote left open?)"
            if "field limit" in str(err)
            else f"not valid CSV ({err})"
        )
        raise CorpusError(f"{path} line {reader.line_num}: {what}") from None
    if bad:
        raise _width_error(path, delimiter, header, bad)
    return header, rows


def _spelling(column: str) -> str:
    """A column name as spellings are compared: lower case, spaces and hyphens as underscores."""
    return re.sub(r"[\s-]+", "_", column.strip().lower())


def columns_override(names: Mapping[str, str]) -> str:
    """The setting `data.corpus.columns={sqa_name:table_column,...}` as typed in a shell."""

    def value(text: str) -> str:
        # Hydra reads a plain word as it is (and a <placeholder> is the user's to fill); anything
        # else goes in single quotes.
        return text if re.fullmatch(r"\w+|<\w+>", text) else "'" + text.replace("'", "\\'") + "'"

    setting = "data.corpus.columns={" + ",".join(f"{k}:{value(v)}" for k, v in names.items()) + "}"
    # A comma would make a shell expand the braces, and quotes would be the shell's own.
    return f'"{setting}"' if "," in setting or "'" in setting else setting


def csv_columns(
    found: Sequence[str], given: Mapping[str, str] | None, path: Path, wide: Sequence[str] = ()
) -> tuple[dict[str, str], list[str]]:
    """The table's column (of `found`) for each of sqa's, `score_<name>` too; and what was recognised.

    A column named in `given` (`data.corpus.columns`) is taken as named; else the column of sqa's
    name; else the one column whose name is a recognised spelling (`COLUMN_SPELLINGS`). A
    `score_<name>` column is a score dimension unless its name is a statistic of the ratings
    (`RATING_STATISTICS`: `score_std` is their spread, not a dimension `std`), which `given` may
    still name. The column mapped as sample_id is recognised as wav_path too where the table
    has no other file column (`{sample_id: path}`: each clip's ID is its path as written).
    `given` that is not a mapping of names to column names, a name of it that is not
    sqa's, a column the table lacks, one column given for two of sqa's (but sample_id, which may
    be any other's copy), two candidates for one column and a missing required column (but
    sample_id) are CorpusErrors naming the setting that fixes them. The recognised columns are
    described in words (`'mos' as score`); the statistics left unread are said too.
    """
    known = (*REQUIRED_CSV_COLUMNS, *OPTIONAL_CSV_COLUMNS)
    names: dict[str, str] = {}
    if given is not None and not isinstance(given, Mapping):
        raise CorpusError(
            f"{path}: data.corpus.columns must map sqa's column names to the table's, got {given!r}; "
            f"e.g. {columns_override({'score': str(given)})}"
        )
    for key, column in (given or {}).items():
        if not isinstance(column, str):
            raise CorpusError(
                f"{path}: data.corpus.columns.{key} must name one column of the table, got {column!r}"
            )
        if key not in known and not str(key).startswith("score_"):
            raise CorpusError(
                f"{path}: data.corpus.columns names {key!r}, which is not a column of sqa's "
                f"({', '.join(known)}, score_<name>)"
            )
        if column not in found:
            raise CorpusError(
                f"{path}: data.corpus.columns maps {key} to {column!r}, which is not a column of the table; "
                f"its columns: {list(found)}"
            )
        shared = [k for k, c in names.items() if c == column and "sample_id" not in (k, key)]
        if shared:
            raise CorpusError(
                f"{path}: data.corpus.columns maps both {shared[0]} and {key} to column {column!r}; a column "
                "is read as one of sqa's (sample_id alone may copy another's)"
            )
        names[str(key)] = str(column)
    taken = set(names.values())
    recognised = []
    for name in known:
        if name in names:
            continue
        if name in found:
            names[name] = name
            taken.add(name)
            continue
        spellings = {name, *COLUMN_SPELLINGS.get(name, ())}
        candidates = [c for c in found if c not in taken and _spelling(c) in spellings]
        if not candidates and name == "wav_path" and _spelling(names.get("sample_id", "")) in spellings:
            # The file column mapped as sample_id (each clip's ID its path as written) is still
            # the table's file column where it has no other.
            candidates = [names["sample_id"]]
        if len(candidates) > 1:
            raise CorpusError(
                f"{path}: columns {candidates[0]!r} and {candidates[1]!r} could both be {name}; "
                f"name the one to use: {columns_override({name: candidates[0]})}"
            )
        if candidates:
            names[name] = candidates[0]
            taken.add(candidates[0])
            recognised.append(f"{candidates[0]!r} as {name}")
    dimensions = [c for c in found if c.startswith("score_") and c not in names and c not in taken]
    statistics = [c for c in dimensions if c.removeprefix("score_").lower() in RATING_STATISTICS]
    names.update({c: c for c in dimensions if c not in statistics})
    unread = "left unread (a statistic of the ratings, not a score dimension)"
    recognised += [f"{c!r} {unread}" for c in statistics]
    missing = [c for c in REQUIRED_CSV_COLUMNS if c not in names and c != "sample_id" and c not in wide]
    if missing:
        fix = columns_override({m: "<column>" for m in missing})
        raters = rater_pattern(found) if "score" in missing else None
        if raters is not None:
            # A wide table: the setting that reads it first, then the mapping (for a table that is not).
            fix = f"for a column per rater, {rater_columns_override(raters)}; else {fix}"
        raise CorpusError(
            f"{path}: missing column(s) {missing}; found {list(found)}; add them, or name the "
            f"table's own: {fix}"
        )
    return names, recognised


def rater_pattern(found: Sequence[str]) -> str | None:
    """The name pattern (`rater_*`) of at least two columns that start alike with a rater word, or None."""
    for prefix in RATER_PREFIXES:
        starts = [c for c in found if _spelling(c).startswith(prefix) and len(_spelling(c)) > len(prefix)]
        common = os.path.commonprefix(starts)
        if len(starts) >= 2 and len(common) >= len(prefix):
            return f"{common}*"
    return None


def rater_columns_override(pattern: str) -> str:
    """The setting `data.corpus.rater_columns='<pattern>'` as typed in a shell."""
    return f"\"data.corpus.rater_columns='{pattern}'\""


def matched_rater_columns(found: Sequence[str], patterns: str | Sequence[str], path: Path) -> list[str]:
    """The table's columns (of `found`, in its order) that `patterns` (names or shell patterns) name.

    A pattern that names no column, or patterns naming fewer than one column, are CorpusErrors.
    """
    wanted = [patterns] if isinstance(patterns, str) else [str(p) for p in patterns]
    for pattern in wanted:
        if not fnmatch.filter(found, pattern):
            raise CorpusError(
                f"{path}: data.corpus.rater_columns names {pattern!r}, which matches no column of the "
                f"table; its columns: {list(found)}"
            )
    return [c for c in found if any(fnmatch.fnmatchcase(c, p) for p in wanted)]


def derive_sample_ids(rows: list[dict[str, str]], path: Path, column: str = "wav_path") -> str:
    """Give each row of the table `path` a sample_id derived from its file; say how, in words.

    The ID is the file's name without its extension where no other file of the table has that
    name; where names clash (`soprano/take1.wav`, `alto/take1.wav`), it is the shortest end of the
    file's path, without the extension, that no other file shares (`soprano/take1`), so a table
    whose names differ keeps its name IDs. Files that only their extension tells apart are a
    CorpusError naming the fix (`column`, the table's file column, copied as the sample_id).
    """
    folder = Path(os.path.abspath(path.parent))
    # A file named twice (`x/a.wav`, `x/../x/a.wav`) is one file: rows are its ratings.
    files = {row["wav_path"]: Path(os.path.normpath(folder / row["wav_path"])) for row in rows}
    ids = {file: "/".join(end) for file, end in distinct_ends(files.values()).items()}
    if len(ids) < len(set(files.values())):
        by_path: dict[Path, list[str]] = {}
        for written, file in files.items():
            by_path.setdefault(file.with_suffix(""), []).append(written)
        one, other, *_ = next(w for w in by_path.values() if len(w) > 1)
        raise CorpusError(
            f"{path}: the table has no sample_id column, and files {one!r} and {other!r} differ only in "
            f"their extension; add a sample_id column, or take each file's path as written as its ID: "
            f"{columns_override({'sample_id': column})}"
        )
    first: dict[Path, str] = {}
    for row in rows:
        file = files[row["wav_path"]]
        # The rows of one file are one clip's, all with the file as first written.
        row["wav_path"] = first.setdefault(file, row["wav_path"])
        row["sample_id"] = ids[file]
    longer = sum("/" in i for i in ids.values())
    if not longer:
        return "sample_id derived from each file's name without its extension"
    return (
        "sample_id derived from each file's name without its extension, or, for the "
        f"{longer} files whose names clash, the end of its path that tells it apart (e.g. "
        f"{min(i for i in ids.values() if '/' in i)!r})"
    )
