"""A run's result files: `metrics.json`, `metrics_<dim>.json` and `predictions.csv`, written and read.

Training, `eval.py`, `sqa-baseline` write them here; `sqa-table`, `sqa-compare` and the recipes
read them here, so the file names and the `predictions.csv` schema are defined once:

    sample_id, system_id, test_set, mos, pred[, spread, lo50, hi50, lo90, hi90]
        [, mos_<dim>, pred_<dim> for each other dimension][, wav_path][, song]

`spread` and the intervals of a listener's rating come from a predictor with a spread
(`sqa.models.uncertainty`) and are absent otherwise.

`mos_<dim>` is empty where a clip has no label of that dimension; `wav_path` is the clip's audio
file, written where the rows name one (last, so that the columns before it keep their places;
files written before it existed lack it and read as they did); `song` names the piece a clip
sings, written (after it, empty for clips without one) only where some clip names one; floats
are written in full precision. Metrics files are `sqa.metrics.evaluate_sets` results as JSON
(NaN as null).
"""

from __future__ import annotations

import csv
import glob
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sqa.core import reading
from sqa.core.atomic import atomic_write_json, atomic_write_text
from sqa.core.spread import INTERVAL_LEVELS

METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.csv"
PREDICTION_COLUMNS = ("sample_id", "system_id", "test_set", "mos", "pred")
# The clip's audio file: text, and optional, so that earlier predictions.csv files still read.
PATH_COLUMN = "wav_path"
# The piece a clip sings (`Clip.song`): text, written only for corpora that name songs.
SONG_COLUMN = "song"
# A predictor with a spread (sqa.models.uncertainty) adds its spread and the 50 % and 90 %
# intervals of a listener's rating after `pred`.
SPREAD_COLUMNS = ("spread", *(f"{end}{suffix}" for suffix in INTERVAL_LEVELS for end in ("lo", "hi")))
# Columns holding numbers; the others (and the per-dimension ones' names) are text.
SCORE_PREFIXES = ("mos", "pred")


def score_columns(dimension: str | None = None) -> tuple[str, str]:
    """(label column, prediction column) of an extra score `dimension`; None: the overall MOS."""
    return ("mos", "pred") if dimension is None else (f"mos_{dimension}", f"pred_{dimension}")


def dimension_columns(dimensions: Sequence[str]) -> list[str]:
    """The `mos_<dim>`, `pred_<dim>` columns of the extra score `dimensions`."""
    return [column for d in dimensions for column in score_columns(d)]


def metrics_file(run_dir: str | Path, dimension: str | None = None) -> Path:
    """`<run_dir>/metrics.json`, or `metrics_<dimension>.json` for another score dimension."""
    return Path(run_dir) / (METRICS_FILE if dimension is None else f"metrics_{dimension}.json")


def write_metrics(
    run_dir: str | Path, results: Mapping[str, Any], dimension_results: Mapping[str, Any] | None = None
) -> None:
    """Write metrics.json and one metrics_<dim>.json per other score dimension, each atomically."""
    atomic_write_json(metrics_file(run_dir), results)
    for dim, dim_results in (dimension_results or {}).items():
        atomic_write_json(metrics_file(run_dir, dim), dim_results)


def read_metrics(run_dir: str | Path, dimension: str | None = None) -> dict[str, Any]:
    """The metrics a run wrote (null for undefined values), by run directory."""
    path = metrics_file(run_dir, dimension)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as err:
        raise ValueError(f"{path}: not a metrics file ({err})") from None
    _check_metrics(data, path)
    return data


def _check_metrics(data: Any, path: Path) -> None:
    """ValueError naming `path` unless `data` maps each test set and `avg` to utt/sys blocks of numbers."""
    # Here, not at the top: sqa-score writes CSVs through this module without scipy.
    from sqa.metrics import AVERAGE_KEY, LEVELS

    if not isinstance(data, dict) or AVERAGE_KEY not in data:
        raise ValueError(f"{path}: not a metrics file (expected a mapping of test sets and {AVERAGE_KEY!r})")
    for name, block in data.items():
        for level in LEVELS:
            values = block.get(level) if isinstance(block, dict) else None
            if not isinstance(values, dict) or not all(
                v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values.values()
            ):
                raise ValueError(f"{path}: not a metrics file ({name}.{level} is not a mapping of numbers)")


def runs_with_metrics(pattern: str) -> list[Path]:
    """Run directories matching the glob `pattern` (sorted) that hold a metrics.json."""
    return [Path(d) for d in sorted(glob.glob(pattern)) if metrics_file(d).is_file()]


def runs_with_predictions(pattern: str) -> list[Path]:
    """Run directories matching the glob `pattern` (sorted) that hold a predictions.csv."""
    return [Path(d) for d in sorted(glob.glob(pattern)) if (Path(d) / PREDICTIONS_FILE).is_file()]


def write_predictions(
    run_dir: str | Path, rows: list[dict[str, Any]], dimensions: Sequence[str] = ()
) -> None:
    """Write `<run_dir>/predictions.csv`: one row per test clip, the columns of the module docstring.

    `wav_path` is written where the rows have one (every row then); `song` where some row has one.
    """
    paths = [PATH_COLUMN] if any(PATH_COLUMN in row for row in rows) else []
    songs = [SONG_COLUMN] if any(SONG_COLUMN in row for row in rows) else []
    spreads = list(SPREAD_COLUMNS) if rows and "spread" in rows[0] else []
    columns = [*PREDICTION_COLUMNS, *spreads, *dimension_columns(dimensions), *paths, *songs]
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    for row in rows:
        # A clip without a song among clips with one gets DictWriter's empty cell.
        writer.writerow({k: _cell(row[k]) for k in columns if k != SONG_COLUMN or k in row})
    atomic_write_text(Path(run_dir) / PREDICTIONS_FILE, buffer.getvalue())


def csv_text(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """CSV text of `rows` under `columns`, cells as predictions.csv writes them; a missing key is empty."""
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=list(columns))
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row[k]) for k in columns if k in row})
    return buffer.getvalue()


def _cell(value: Any) -> Any:
    """A CSV cell: floats in full precision, NaN (a missing label) as an empty cell, text made safe."""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return spreadsheet_safe(value)


# A spreadsheet reads a cell starting with one of these as a formula (or, tab and CR, as the
# start of one after its own trimming).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(value: Any) -> Any:
    """A text cell that a spreadsheet would run as a formula, quoted with a leading `'`; else as is.

    Numbers, and text that reads as a number (`-0.5`), are kept: only formulas are neutralised.
    """
    return "'" + value if isinstance(value, str) and _formula(value) else value


def _formula(text: str) -> bool:
    """Whether a spreadsheet would run `text` as a formula: it starts like one and is no number."""
    if not text.startswith(FORMULA_STARTS):
        return False
    try:
        float(text)
    except ValueError:
        return True
    return False


def quoted_cell(text: str) -> str:
    """`spreadsheet_safe` for a cell that is read back: `unquoted_cell` gives `text` again.

    A text that would be read as quoted (`'` before a formula, `'=x`) gets one more `'`.
    """
    return "'" + text if _formula(text.lstrip("'")) else text


def unquoted_cell(text: str) -> str:
    """The text `quoted_cell` wrote `text` for: a leading `'` before a (quoted) formula removed."""
    return text[1:] if text.startswith("'") and _formula(text.lstrip("'")) else text


def _number(text: str, column: str) -> float:
    """A score cell as a float; empty is NaN in a dimension's column (no label), an error in mos/pred."""
    return math.nan if text == "" and column not in PREDICTION_COLUMNS else float(text)


def read_predictions(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a predictions.csv (a file or its run directory), scores as floats (NaN: no label).

    `wav_path` and `song` are text, `wav_path` absent from files written before it existed and
    `song` from those of corpora without songs. A file that is not UTF-8 text, lacks a column or
    holds a score that is not a number is a ValueError naming the file (and its line).
    """
    path = Path(path)
    path = path / PREDICTIONS_FILE if path.is_dir() else path
    # Decoded whole, so that text in another encoding names its first bad byte and line.
    reader = csv.DictReader(io.StringIO(reading.read_text(path), newline=""))
    fields = list(reader.fieldnames or [])
    missing = [c for c in PREDICTION_COLUMNS if c not in fields]
    if missing:
        raise ValueError(f"{path}: missing column(s) {', '.join(missing)}")
    scores = [c for c in fields if c.split("_", 1)[0] in SCORE_PREFIXES]
    rows = []
    try:
        for line, row in enumerate(reader, start=2):
            if None in row or None in row.values():
                raise ValueError(f"{path}:{line}: the row's fields do not match the header's {len(fields)}")
            try:
                rows.append({**row, **{c: _number(row[c], c) for c in scores}})
            except ValueError as err:
                raise ValueError(f"{path}:{line}: {err}") from None
    except csv.Error as err:
        raise ValueError(f"{path}: not a CSV file ({err})") from None
    return rows
