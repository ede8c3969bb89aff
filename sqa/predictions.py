"""The per-clip predictions file of a run (`predictions.csv`), shared by training and baselines."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqa.atomic import atomic_write_text

PREDICTION_COLUMNS = ("sample_id", "system_id", "test_set", "mos", "pred")


def write_predictions(rows: list[dict[str, Any]], path: Path, dimensions: Sequence[str] = ()) -> None:
    """Write one CSV row per test clip: sample_id, system_id, test_set, mos, pred.

    Each of the other score `dimensions` adds `mos_<dim>` (empty where the clip has no such
    label) and `pred_<dim>` columns.
    """
    columns = list(PREDICTION_COLUMNS) + [f"{k}_{d}" for d in dimensions for k in ("mos", "pred")]
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=columns)
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row[k]) for k in columns})
    atomic_write_text(path, buffer.getvalue())


def _cell(value: Any) -> Any:
    """A CSV cell: floats in full precision, NaN (a missing label) as an empty cell."""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return value
