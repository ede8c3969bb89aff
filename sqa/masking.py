"""Length masks and masked reductions over padded time axes."""

from __future__ import annotations

import torch


def frame_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """Boolean (B, T) mask that is True on the first `lengths[b]` steps of row b."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def masked_mean(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean of x (B, T, ...) over its first `lengths[b]` steps -> (B, ...); padding never counts."""
    mask = frame_mask(lengths, x.shape[1]).to(x.dtype)
    mask = mask.reshape(mask.shape + (1,) * (x.dim() - 2))
    return (x * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)
