"""Aligner family: one shared score per clip, mapped onto each domain's rating scale by its aligner.

The idea of AlignNet (Pieper & Voran, Interspeech 2024, arXiv:2406.10205): the network maps audio
to a score on the scale of a reference dataset, and a small per-dataset aligner maps that score
onto each other dataset's scale, so datasets (here: domains, i.e. annotation batches) rated with
their own bias and scale train one network without the network having to learn their
differences. (SHEET's `alignnet.py` keeps the name but conditions the decoder on a domain
embedding instead, which `MOSPredictor` already does with `domain_dim`.)

The aligner here is affine and increasing, per domain d and score dimension k:
    aligned = a_dk · (s − 3) + 3 + b_dk,   a_dk = exp(log_a_dk) > 0,
on the internal 1-5 scale, where a rater batch's gain and bias act (`3 + gain·(q − 3) + bias` in
`sqa.data.synthetic.mos`). Affine rather than AlignNet's MLP: two numbers per domain are what a
batch's bias and scale are, they can be read and checked (the learning test compares them with the
synthetic corpus's true ones), a positive gain keeps the ranking of clips within a domain, and
being linear it commutes with pooling (the mean of aligned frame scores is the aligned clip score),
so frame scores stay meaningful. Domain 0 is the reference (AlignNet's reference dataset): its
aligner is the identity and is not trained. Without a reference, the shared score and all
aligners could shift and scale together without changing any aligned score; with it, the shared
score is the first domain's scale, the one `sqa-score` scores as when no domain is given.
Aligned scores are not clipped to 1-5 (a clip would break linearity and stop gradients).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from sqa.core.masking import frame_mask
from sqa.core.prediction import Prediction
from sqa.models.predictor import INTERNAL_RANGE, MOSPredictor

# The internal scale's middle: a gain scales scores about it, as a rater batch's gain does.
MIDPOINT = (INTERNAL_RANGE[0] + INTERNAL_RANGE[1]) / 2


class AffineAligner(nn.Module):
    """Per-domain increasing affine maps a_d·(s − 3) + 3 + b_d of scores (B, ..., K); domain 0: identity."""

    def __init__(self, num_domains: int, num_dimensions: int) -> None:
        super().__init__()
        if num_domains < 1:
            raise ValueError(f"an aligner needs at least one domain, got num_domains={num_domains}")
        self.num_domains = num_domains
        # Domains 1.. only: the reference domain 0 has no parameters. Zeros: the identity at init.
        self.log_gain = nn.Parameter(torch.zeros(num_domains - 1, num_dimensions))
        self.offset = nn.Parameter(torch.zeros(num_domains - 1, num_dimensions))

    def gains(self) -> torch.Tensor:
        """Every domain's gain a_d (num_domains, K), 1 for the reference domain 0."""
        return torch.cat([self.log_gain.new_ones(1, self.log_gain.shape[1]), self.log_gain.exp()])

    def offsets(self) -> torch.Tensor:
        """Every domain's offset b_d (num_domains, K), 0 for the reference domain 0."""
        return torch.cat([self.offset.new_zeros(1, self.offset.shape[1]), self.offset])

    def forward(self, scores: torch.Tensor, domain: torch.Tensor) -> torch.Tensor:
        """Scores (B, ..., K) on the internal scale aligned onto each row's domain (B,) IDs."""
        shape = (scores.shape[0],) + (1,) * (scores.dim() - 2) + (scores.shape[-1],)
        gain = self.gains().to(scores.dtype)[domain].reshape(shape)
        offset = self.offsets().to(scores.dtype)[domain].reshape(shape)
        return gain * (scores - MIDPOINT) + MIDPOINT + offset


class AlignedPredictor(MOSPredictor):
    """`MOSPredictor` whose shared scores are mapped onto the clip's domain by an `AffineAligner`.

    With `domain` (B,) IDs, every score and frame score is the aligned one of its domain (the loss
    and the metrics compare it with that domain's labels); with `domain` None, the shared score,
    which is the reference domain 0's. The aligner replaces the domain embedding (`domain_dim`
    None) or comes with it (`domain_dim` set: the shared score then depends on the domain too, and
    `domain` is needed). Every other argument is `MOSPredictor`'s.
    """

    def __init__(self, backbone: nn.Module, **kwargs: Any) -> None:
        super().__init__(backbone, **kwargs)
        self.aligner = AffineAligner(self.config.num_domains, len(self.dimensions))

    @property
    def domain_count(self) -> int:
        """Every domain has an aligner (domain 0's is the identity), with or without an embedding."""
        return self.aligner.num_domains

    def score_frames(
        self,
        frames: torch.Tensor,
        frame_lengths: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """`MOSPredictor.score_frames` with scores (B, K) and frames (B, T, K) aligned onto `domain` (B,)."""
        out = super().score_frames(frames, frame_lengths, lengths, domain, f0, judge)
        if domain is None:
            return out
        domain = domain.to(out.scores.device)
        scores = self.aligner(out.scores, domain)
        dim_frame_scores = self.aligner(out.dim_frame_scores, domain)
        # Padding frames stay 0, as `score_features` leaves them (the aligner moved them to 3 + b − 3a).
        mask = frame_mask(out.frame_lengths, dim_frame_scores.shape[1])
        dim_frame_scores = dim_frame_scores.masked_fill(~mask[:, :, None], 0.0)
        return out._replace(
            score=scores[:, 0],
            frame_scores=dim_frame_scores[:, :, 0],
            scores=scores,
            dim_frame_scores=dim_frame_scores,
        )
