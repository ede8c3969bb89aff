"""Uncertainty family: an SSL-MOS predictor that also predicts the spread of listeners' ratings.

The idea of SHEET's `sslmos_u.py` and DNSMOS Pro: beside the clip's mean score, a second head
predicts a spread per clip, trained by a Gaussian or Laplace negative log-likelihood
(`sqa.training.losses.gaussian_nll`, `laplace_nll`) of the clip's per-listener ratings (of its
mean score where the corpus has no ratings). The mean is the SSL-MOS head's masked mean of frame
scores, so the family keeps the backbone and head contracts; the spread comes from the masked
mean of the head's input features, per clip, so it is batch-invariant like the mean.

A spread is the standard deviation (Gaussian) or the scale b (Laplace) of one listener's rating
about the predicted mean, model error included (`sqa.core.spread` turns it into intervals).

With `error_spread` (Gaussian only) the two parts are apart: the head predicts each clip's
listener spread σ_L (the disagreement of its listeners about its true MOS) and one learnt
parameter the model's own error σ_M, so that a rating is ŷ + e + ε with e ~ N(0, σ_M²) shared by
a clip's listeners and ε ~ N(0, σ_L²) each their own; `spread` = √(σ_L² + σ_M²). A clip's
ratings then have the likelihood of that covariance (`sqa.training.losses.gaussian_nll`), whose
within-clip part trains σ_L alone: a clip the model misses no longer looks like one its
listeners disagree on, so the spread ranks clips and systems by listener agreement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from sqa.core.masking import masked_mean
from sqa.core.prediction import OVERALL, Prediction
from sqa.core.spread import check_distribution
from sqa.models.predictor import MOSPredictor, PredictorConfig

# The smallest spread on the internal 1-5 scale: keeps the NLL's log and division finite.
MIN_SPREAD = 1e-3


@dataclass
class UncertainConfig(PredictorConfig):
    """A `PredictorConfig` plus the rating distribution whose spread the model predicts."""

    distribution: str
    error_spread: bool = False


class UncertainMOSPredictor(MOSPredictor):
    """`MOSPredictor` whose `Prediction.spread` (B,) holds each clip's predicted rating spread.

    The spread head is Linear(D', head_dim) -> ReLU -> Linear(head_dim, 1) -> softplus over the
    masked mean of the head's input features (backbone frames and branch embeddings), so it
    sees the whole clip and ignores padding. `distribution` ("gaussian" or "laplace") says what
    the spread is (a standard deviation or a Laplace scale) and must match the training loss.
    Spreads are on the internal 1-5 scale like the scores; `spread_to_scale` maps them onto
    `score_range`. `error_spread` adds the model's own error as one learnt spread (module docstring).
    Every other argument is `MOSPredictor`'s.
    """

    def __init__(
        self,
        backbone: nn.Module,
        *,
        distribution: str = "gaussian",
        error_spread: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(backbone, **kwargs)
        # The spread is of listeners' overall ratings; per-judge embeddings would explain it away.
        if len(self.dimensions) > 1 or self.config.judge_dim is not None:
            raise ValueError(
                "an uncertain predictor predicts the overall score only, without judges: set "
                f"dimensions: [{OVERALL}] and judge_dim: null"
            )
        self.distribution = check_distribution(distribution)
        if error_spread and distribution != "gaussian":
            # A Gaussian error plus a Laplace rating noise is neither: no spread would describe it.
            raise ValueError(f"error_spread needs distribution: gaussian, got {distribution!r}")
        self.config = UncertainConfig(
            **vars(self.config), distribution=distribution, error_spread=error_spread
        )
        in_dim, head_dim = self.head[0].in_features, self.config.head_dim
        self.spread_head = nn.Sequential(nn.Linear(in_dim, head_dim), nn.ReLU(), nn.Linear(head_dim, 1))
        # softplus(0) ≈ 0.69 on the 1-5 scale: a start of about the error of a constant predictor.
        self.error_spread = nn.Parameter(torch.zeros(())) if error_spread else None

    def score_frames(
        self,
        frames: torch.Tensor,
        frame_lengths: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """`MOSPredictor.score_frames` plus `spread` (B,) > 0 from the clip's pooled features.

        With `error_spread`, also `listener_spread` (B,): the head's σ_L, and `spread` = √(σ_L² + σ_M²).
        """
        features = self.head_input(frames, frame_lengths, domain, f0, judge)
        out = self.score_features(features, frame_lengths, lengths)
        pooled = masked_mean(features, frame_lengths)
        spread = F.softplus(self.spread_head(pooled)[:, 0]) + MIN_SPREAD
        if self.error_spread is None:
            return out._replace(spread=spread)
        error = F.softplus(self.error_spread) + MIN_SPREAD
        return out._replace(spread=torch.sqrt(spread**2 + error**2), listener_spread=spread)
