"""Padding variable-length clips into batches (shared by training and scoring, no Lightning)."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_batch(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-pad 1-D tensors to a (B, N_max) batch; returns it and the lengths (B,)."""
    lengths = torch.tensor([t.shape[0] for t in tensors])
    out = torch.zeros(len(tensors), int(lengths.max()), dtype=tensors[0].dtype)
    for i, t in enumerate(tensors):
        out[i, : t.shape[0]] = t
    return out, lengths
