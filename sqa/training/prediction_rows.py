"""Per-clip prediction rows of an evaluation: built from a scored batch, gathered, read by dimension."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from sqa.core.artefacts import score_columns
from sqa.core.prediction import OVERALL
from sqa.core.spread import INTERVAL_LEVELS, interval


def clip_rows(
    batch: dict[str, Any],
    scores: torch.Tensor,
    spread: torch.Tensor | None,
    extra_dimensions: Sequence[str],
    distribution: str | None,
) -> list[dict[str, Any]]:
    """One row per clip of `batch`: its labels, `scores` (B, K) and `spread` (B,) on the corpus's scale.

    `extra_dimensions` are the score dimensions after the overall MOS; `distribution` is the
    predictor's spread distribution (read only where there is a `spread`).
    """
    rows = []
    for i, sample_id in enumerate(batch["sample_id"]):
        # Labels as read, not their float32 copies: metrics and predictions.csv use the
        # annotation files' values.
        labels = batch["labels"][i]
        row = {
            "index": int(batch["index"][i]),
            "sample_id": sample_id,
            "wav_path": batch["wav_path"][i],
            "system_id": batch["system_id"][i],
            "mos": labels[0],
            "pred": float(scores[i, 0]),
        }
        if batch.get("song") and batch["song"][i] is not None:
            row["song"] = batch["song"][i]
        for k, dim in enumerate(extra_dimensions, start=1):
            true_key, pred_key = score_columns(dim)
            row[true_key], row[pred_key] = labels[k], float(scores[i, k])
        if spread is not None:
            row["spread"] = float(spread[i])
            for suffix, level in INTERVAL_LEVELS.items():
                low, high = interval(row["pred"], row["spread"], level, distribution)
                row[f"lo{suffix}"], row[f"hi{suffix}"] = float(low), float(high)
            # The listeners' own ratings, for the coverage of single ratings (calibration.json).
            row["ratings"] = [v for v in batch["ratings"][i].tolist() if not math.isnan(v)]
        rows.append(row)
    return rows


def gathered_rows(
    outputs: dict[int, list[dict[str, Any]]], world_size: int
) -> dict[int, list[dict[str, Any]]]:
    """Every rank's rows per loader of this rank's `outputs`, in dataset order (by `index`).

    Under DDP each rank scored a share of the batches; system-level metrics need all of them,
    so the rows are gathered (batches repeated to even out the ranks count once) and every
    rank computes the same metrics as one process would.
    """
    if world_size > 1 and dist.is_available() and dist.is_initialized():
        parts: list[Any] = [None] * world_size
        dist.all_gather_object(parts, outputs)
        outputs = {}
        for part in parts:
            for idx, rows in part.items():
                outputs.setdefault(idx, []).extend(rows)
    merged = {}
    for idx, rows in sorted(outputs.items()):
        by_index = {r["index"]: r for r in rows}
        merged[idx] = [by_index[i] for i in sorted(by_index)]
    return merged


def labelled(
    rows: Sequence[dict[str, Any]], dim: str
) -> tuple[list[float], list[float], list[str], list[str]]:
    """(predictions, labels, systems, test sets) of the rows that have a label of `dim`."""
    true_key, pred_key = score_columns(None if dim == OVERALL else dim)
    keep = [r for r in rows if not math.isnan(r[true_key])]
    return (
        [r[pred_key] for r in keep],
        [r[true_key] for r in keep],
        [r["system_id"] for r in keep],
        [r.get("test_set", "") for r in keep],
    )
