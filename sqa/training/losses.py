"""Training losses for MOS regression: pure functions of a `Prediction`, targets and a label mask.

Each takes the predictor's output first so that Hydra can bind the hyper-parameters
(`_partial_: true`) and the training loop calls every loss the same way. Targets are either the
overall scores (B,), compared with `out.score`, or one column per score dimension (B, K),
compared with `out.scores`; `mask` (bool, same shape as the targets, None: all labelled) marks the
labels that exist. A missing label contributes nothing to the loss or its gradient; the loss is
averaged over the labelled entries (pairs, for `contrastive`).
"""

from __future__ import annotations

import torch

from sqa.core.masking import frame_mask
from sqa.core.prediction import Prediction


def _labelled(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Predictions shaped like `target` ((B,) or (B, K)), the targets and the float label mask."""
    score = out.scores if target.dim() == 2 else out.score
    if score.shape != target.shape:
        raise ValueError(f"targets of shape {tuple(target.shape)} for predictions {tuple(score.shape)}")
    if mask is None:
        return score, target, torch.ones_like(target)
    # A missing label (often NaN) becomes the prediction itself: zero error, and no NaN that
    # the mask's zero could not cancel in the gradient.
    target = torch.where(mask, target, score.detach())
    return score, target, mask.to(target.dtype)


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def margin_l1(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None = None, margin: float = 0.1
) -> torch.Tensor:
    """Utterance-level margin L1: mean over labels of 1[|ŷ−y| ≥ margin]·|ŷ−y|. Returns a scalar."""
    score, target, mask = _labelled(out, target, mask)
    err = (score - target).abs()
    return _masked_mean(err * (err >= margin).to(err.dtype), mask)


def frame_margin_l1(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None = None, tau: float = 0.5
) -> torch.Tensor:
    """Frame-level margin L1: each clip's target repeated over its valid frames, mean over them."""
    _, target, mask = _labelled(out, target, mask)
    frames = out.dim_frame_scores if target.dim() == 2 else out.frame_scores
    valid = frame_mask(out.frame_lengths, frames.shape[1]).to(frames.dtype)
    if target.dim() == 2:
        valid = valid[:, :, None]
    valid = valid * mask[:, None]
    err = (frames - target[:, None]).abs()
    return _masked_mean(err * (err >= tau).to(err.dtype), valid)


def clipped_mse(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None = None, tau: float = 0.5
) -> torch.Tensor:
    """MSE over the labels that ignores those whose absolute error is at most `tau`."""
    score, target, mask = _labelled(out, target, mask)
    err = score - target
    return _masked_mean((err.abs() > tau).to(err.dtype) * err**2, mask)


def contrastive(
    out: Prediction, target: torch.Tensor, mask: torch.Tensor | None = None, margin: float = 0.1
) -> torch.Tensor:
    """Pairwise loss mean_ij max(0, |(ŷ_i−ŷ_j)−(y_i−y_j)| − margin) / 2 over labelled pairs."""
    score, target, mask = _labelled(out, target, mask)
    d_pred = score[:, None] - score[None, :]
    d_true = target[:, None] - target[None, :]
    pairs = mask[:, None] * mask[None, :]
    return _masked_mean(((d_pred - d_true).abs() - margin).clamp_min(0.0), pairs) / 2
