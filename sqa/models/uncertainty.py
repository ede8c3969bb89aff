"""Uncertainty family: an SSL-MOS predictor that also predicts the spread of listeners' ratings.

The idea of SHEET's `sslmos_u.py` and DNSMOS Pro: beside the clip's mean score, a second head
predicts a spread per clip, trained by a Gaussian or Laplace negative log-likelihood
(`sqa.training.losses.gaussian_nll`, `laplace_nll`) of the clip's per-listener ratings (of its
mean score where the corpus has no ratings). The mean is the SSL-MOS head's masked mean of frame
scores, so the family keeps the backbone and head contracts; the spread comes from the masked
mean of the head's input features, per clip, so it is batch-invariant like the mean.

A spread is the standard deviation (Gaussian) or the scale b (Laplace) of one listener's rating
about the predicted mean, model error included (`sqa.core.spread` turns it into intervals).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from sqa.core.masking import masked_mean
from sqa.core.prediction import OVERALL, Prediction
from sqa.core.spread import check_distribution
from sqa.models.predictor import INTERNAL_RANGE, MOSPredictor, PredictorConfig

# The smallest spread on the internal 1-5 scale: keeps the NLL's log and division finite.
MIN_SPREAD = 1e-3


@dataclass
class UncertainConfig(PredictorConfig):
    """A `PredictorConfig` plus the rating distribution whose spread the model predicts."""

    distribution: str


class UncertainMOSPredictor(MOSPredictor):
    """`MOSPredictor` whose `Prediction.spread` (B,) holds each clip's predicted rating spread.

    The spread head is Linear(D', head_dim) -> ReLU -> Linear(head_dim, 1) -> softplus over the
    masked mean of the head's input features (backbone frames and branch embeddings), so it
    sees the whole clip and ignores padding. `distribution` ("gaussian" or "laplace") says what
    the spread is (a standard deviation or a Laplace scale) and must match the training loss.
    Spreads are on the internal 1-5 scale like the scores; `spread_to_scale` maps them onto
    `score_range`.
    """

    def __init__(
        self,
        backbone: nn.Module,
        head_dim: int = 64,
        dropout: float = 0.3,
        range_clip: bool = True,
        num_domains: int = 1,
        domain_dim: int | None = None,
        pitch: str | None = None,
        pitch_dim: int = 128,
        dimensions: Sequence[str] = (OVERALL,),
        num_judges: int = 0,
        judge_dim: int | None = None,
        score_range: Sequence[float] = INTERNAL_RANGE,
        pooling: str = "masked_mean",
        distribution: str = "gaussian",
    ) -> None:
        super().__init__(
            backbone,
            head_dim,
            dropout,
            range_clip,
            num_domains,
            domain_dim,
            pitch,
            pitch_dim,
            dimensions,
            num_judges,
            judge_dim,
            score_range,
            pooling,
        )
        # The spread is of listeners' overall ratings; per-judge embeddings would explain it away.
        if len(self.dimensions) > 1 or judge_dim is not None:
            raise ValueError(
                "an uncertain predictor predicts the overall score only, without judges: set "
                f"dimensions: [{OVERALL}] and judge_dim: null"
            )
        self.distribution = check_distribution(distribution)
        self.config = UncertainConfig(**vars(self.config), distribution=distribution)
        in_dim = self.head[0].in_features
        self.spread_head = nn.Sequential(nn.Linear(in_dim, head_dim), nn.ReLU(), nn.Linear(head_dim, 1))

    def spread_to_scale(self, spread: torch.Tensor) -> torch.Tensor:
        """Spreads (any shape) on the internal 1-5 scale mapped onto `score_range` (a width, no offset)."""
        return spread / self.scale_gain

    def score_frames(
        self,
        frames: torch.Tensor,
        frame_lengths: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """`MOSPredictor.score_frames` plus `spread` (B,) > 0 from the clip's pooled features."""
        features = self.head_input(frames, frame_lengths, domain, f0, judge)
        out = self.score_features(features, frame_lengths, lengths)
        pooled = masked_mean(features, frame_lengths)
        spread = F.softplus(self.spread_head(pooled)[:, 0]) + MIN_SPREAD
        return out._replace(spread=spread)
