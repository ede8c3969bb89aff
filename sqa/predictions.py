"""The per-clip predictions file of a run (`predictions.csv`), shared by training and baselines."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from sqa.atomic import atomic_write_text

PREDICTION_COLUMNS = ("sample_id", "system_id", "test_set", "mos", "pred")


def write_predictions(rows: list[dict[str, Any]], path: Path) -> None:
    """Write one CSV row per test clip: sample_id, system_id, test_set, mos, pred."""
    buffer = io.StringIO(newline="")
    writer = csv.DictWriter(buffer, fieldnames=PREDICTION_COLUMNS)
    writer.writeheader()
    for row in rows:
        writer.writerow(
            {k: (repr(row[k]) if isinstance(row[k], float) else row[k]) for k in PREDICTION_COLUMNS}
        )
    atomic_write_text(path, buffer.getvalue())
