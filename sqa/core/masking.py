"""Length masks and masked reductions over padded time axes."""

from __future__ import annotations

import math

import torch


def frame_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """Boolean (B, T) mask that is True on the first `lengths[b]` steps of row b."""
    return torch.arange(max_len, device=lengths.device)[None, :] < lengths[:, None]


def masked_mean(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Mean of x (B, T, ...) over its first `lengths[b]` steps -> (B, ...); padding never counts."""
    mask = frame_mask(lengths, x.shape[1]).to(x.dtype)
    mask = mask.reshape(mask.shape + (1,) * (x.dim() - 2))
    return (x * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)


def masked_standardize(x: torch.Tensor, lengths: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Standardise x (B, T, ...): zero mean, unit variance per row over its first `lengths[b]` steps.

    One scalar mean and variance per row, pooled over the valid steps and all trailing dims;
    padding is 0 and never counts, so a clip is standardised the same alone and in a batch.
    """
    mask = frame_mask(lengths, x.shape[1]).to(x.dtype)
    mask = mask.reshape(mask.shape + (1,) * (x.dim() - 2))
    dims = tuple(range(1, x.dim()))
    count = lengths.to(x.dtype).reshape((-1,) + (1,) * (x.dim() - 1)) * math.prod(x.shape[2:])
    mean = (x * mask).sum(dim=dims, keepdim=True) / count
    var = (((x - mean) * mask) ** 2).sum(dim=dims, keepdim=True) / count
    return (x - mean) / torch.sqrt(var + eps) * mask


def repeat_last_mean(x: torch.Tensor, lengths: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """Mean of x (B, T, ...) over `counts[b]` steps whose steps past `lengths[b]` repeat the last valid one.

    s3prl's `S3PRLUpstream` pads (or cuts) a clip's frames to a fixed count this way, and models
    that average its output count the repeated frame several times. Row b uses only its own first
    `lengths[b]` steps, so the result does not depend on the batch. -> (B, ...)
    """
    steps = torch.arange(int(counts.max()), device=x.device)
    index = torch.minimum(steps[None, :], (lengths.clamp_min(1) - 1)[:, None])
    gathered = x.gather(1, index.reshape(index.shape + (1,) * (x.dim() - 2)).expand(-1, -1, *x.shape[2:]))
    return masked_mean(gathered, counts)
