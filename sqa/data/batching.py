"""Padding variable-length clips into batches, and the data loaders' collation (no Lightning)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch.nn.utils.rnn import pad_sequence


def pad_batch(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad 1-D tensors to a (B, N_max) batch; returns it and the lengths (B,)."""
    lengths = torch.tensor([t.shape[0] for t in tensors])
    return pad_sequence(list(tensors), batch_first=True), lengths


def collate(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Pad a batch: index (B,), wav (B, N), lengths (B,), f0 (B, T') or None, mos, domain (B,), ids.

    Also target (B, K) (NaN where a label is missing), the same labels unrounded as B lists of K
    floats (`labels`, for evaluation), mask (B, K) bool and judge (B,) IDs (None for datasets
    without judges), ratings (B, R): each clip's per-listener overall ratings, NaN-padded, and
    song: B song names (None where a clip names none).
    """
    wav, lengths = pad_batch([it["wav"] for it in items])
    f0 = pad_batch([it["f0"] for it in items])[0] if items[0].get("f0") is not None else None
    return {
        "index": torch.tensor([it["index"] for it in items]),
        "wav": wav,
        "lengths": lengths,
        "f0": f0,
        "mos": torch.tensor([it["mos"] for it in items], dtype=torch.float32),
        "target": torch.tensor([it["target"] for it in items], dtype=torch.float32),
        # The labels as read (Python floats): float32 would turn 4.4 into 4.400000095367432.
        "labels": [list(it["target"]) for it in items],
        "mask": torch.tensor([it["mask"] for it in items], dtype=torch.bool),
        # An item without per-listener ratings (none published) has none: NaN padding only.
        "ratings": _ratings([it.get("ratings", []) for it in items]),
        "judge": torch.tensor([it["judge"] for it in items]) if items[0]["judge"] is not None else None,
        "domain": torch.tensor([it["domain"] for it in items]),
        "sample_id": [it["sample_id"] for it in items],
        "wav_path": [it["wav_path"] for it in items],
        "system_id": [it["system_id"] for it in items],
        "test_set": [it["test_set"] for it in items],
        # Hand-built items (tests, callers) may name no song.
        "song": [it.get("song") for it in items],
    }


def _ratings(per_clip: list[list[float]]) -> torch.Tensor:
    """Per-listener ratings of B clips as (B, R), R the most any clip has, NaN past a clip's own."""
    width = max((len(r) for r in per_clip), default=0)
    return torch.tensor([list(r) + [math.nan] * (width - len(r)) for r in per_clip], dtype=torch.float32)
