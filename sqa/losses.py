"""Training losses for MOS regression: pure functions of a `Prediction` and the targets (B,).

Each takes the predictor's output first so that Hydra can bind the hyper-parameters
(`_partial_: true`) and the training loop calls every loss the same way.
"""

from __future__ import annotations

import torch

from sqa.masking import frame_mask
from sqa.models.predictor import Prediction


def margin_l1(out: Prediction, target: torch.Tensor, margin: float = 0.1) -> torch.Tensor:
    """Utterance-level margin L1: mean_b 1[|ŷ_b−y_b| ≥ margin]·|ŷ_b−y_b|. Returns a scalar."""
    err = (out.score - target).abs()
    return (err * (err >= margin).to(err.dtype)).mean()


def frame_margin_l1(out: Prediction, target: torch.Tensor, tau: float = 0.5) -> torch.Tensor:
    """Frame-level margin L1: the clip's target repeated over its valid frames, mean over them."""
    mask = frame_mask(out.frame_lengths, out.frame_scores.shape[1]).to(out.frame_scores.dtype)
    err = (out.frame_scores - target[:, None]).abs()
    err = err * (err >= tau).to(err.dtype) * mask
    return err.sum() / mask.sum().clamp_min(1.0)


def clipped_mse(out: Prediction, target: torch.Tensor, tau: float = 0.5) -> torch.Tensor:
    """MSE over the batch that ignores clips whose absolute error is at most `tau`."""
    err = out.score - target
    return ((err.abs() > tau).to(err.dtype) * err**2).mean()


def contrastive(out: Prediction, target: torch.Tensor, margin: float = 0.1) -> torch.Tensor:
    """Pairwise loss mean_ij max(0, |(ŷ_i−ŷ_j)−(y_i−y_j)| − margin) / 2."""
    d_pred = out.score[:, None] - out.score[None, :]
    d_true = target[:, None] - target[None, :]
    return ((d_pred - d_true).abs() - margin).clamp_min(0.0).mean() / 2
