"""Names shared by the data and model layers: the overall score dimension and a predictor's output."""

from __future__ import annotations

from typing import NamedTuple

import torch

# The overall MOS: every predictor has this dimension first; checkpoints are selected on it.
OVERALL = "mos"


class Prediction(NamedTuple):
    """Overall scores (B,), their frames (B, T), valid frame counts (B,), and every dimension.

    `scores` (B, K) and `dim_frame_scores` (B, T, K) hold the K score dimensions in the
    predictor's `dimensions` order; `score` and `frame_scores` are their first (overall) column.
    `spread` (B,) is the predicted spread of a listener's overall rating about `score` (a
    Gaussian's standard deviation or a Laplace scale, on the same scale), from predictors that
    predict one (`sqa.models.uncertainty`); None for the others. `listener_spread` (B,) is the
    part of `spread` that is the listeners' disagreement about the clip's true MOS, where the
    predictor separates it from its own error (spread² = listener_spread² + error²); else None.
    """

    score: torch.Tensor
    frame_scores: torch.Tensor
    frame_lengths: torch.Tensor
    scores: torch.Tensor
    dim_frame_scores: torch.Tensor
    spread: torch.Tensor | None = None
    listener_spread: torch.Tensor | None = None
