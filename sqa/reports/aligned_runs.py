"""Runs' predictions.csv files read by clip and aligned for a paired comparison (`sqa-compare`).

Every run must hold the first run's clips, each with the same true MOS and system, so that the
runs' metrics are paired clip by clip.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqa.core import artefacts

# Appended to a clip-set mismatch: the usual cause when comparing seeds.
SAME_CLIPS = (
    "; compared runs must be tested on the same clips (runs that carve their test split need the "
    "same data.test_split_csv)"
)


def read_predictions(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """Rows of a predictions.csv keyed by (test_set, sample_id), in file order."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for line, row in enumerate(artefacts.read_predictions(path), start=2):
        key = (row["test_set"], row["sample_id"])
        if key in rows:
            raise ValueError(f"{path}:{line}: sample {key[1]!r} of {key[0]!r} appears twice")
        rows[key] = row
    return rows


def align(paths: Sequence[str | Path]) -> dict[str, list]:
    """Every run's predictions on the same clips: `preds` (a list per run), mos, system_id, test_set.

    Each run must cover the first run's (test_set, sample_id) pairs with the same system and true
    MOS; otherwise the error names the file and the first mismatching sample.
    """
    first, *others = paths
    reference = read_predictions(first)
    tables = [read_predictions(path) for path in others]
    for path, rows in zip(others, tables, strict=True):
        extra = next((key for key in rows if key not in reference), None)
        if extra is not None:
            raise ValueError(
                f"{path}: sample {extra[1]!r} of test set {extra[0]!r} is not in {first}{SAME_CLIPS}"
            )
    out: dict[str, list] = {"preds": [[] for _ in paths], "mos": [], "system_id": [], "test_set": []}
    for key, a in reference.items():
        out["preds"][0].append(a["pred"])
        for preds, path, rows in zip(out["preds"][1:], others, tables, strict=True):
            b = rows.get(key)
            if b is None:
                raise ValueError(
                    f"{path}: lacks sample {key[1]!r} of test set {key[0]!r} (in {first}){SAME_CLIPS}"
                )
            if not math.isclose(a["mos"], b["mos"], rel_tol=1e-9, abs_tol=1e-9):
                raise ValueError(
                    f"{path}: sample {key[1]!r} of test set {key[0]!r} has true MOS {b['mos']!r}, "
                    f"{first} has {a['mos']!r}"
                )
            if a["system_id"] != b["system_id"]:
                raise ValueError(
                    f"{path}: sample {key[1]!r} of test set {key[0]!r} has system {b['system_id']!r}, "
                    f"{first} has {a['system_id']!r}"
                )
            preds.append(b["pred"])
        out["mos"].append(a["mos"])
        out["system_id"].append(a["system_id"])
        out["test_set"].append(key[0])
    return out
