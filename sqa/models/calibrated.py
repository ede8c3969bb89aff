"""Calibrated family: a pretrained quality network's own head, its score mapped onto the corpus's ratings.

A pretrained speech-quality network (Distill-MOS) already hears separation and codec artefacts; a
head trained from scratch on a few dozen clips forgets much of what it knew (measured: SRCC 0.86
zero-shot, 0.42 after training a new head, on another corpus). This family keeps the network's
own attention-pooling head, started from its pretrained weights, and learns only an increasing
affine map of its score onto the corpus's ratings, on the internal 1-5 scale:

    calibrated = a · (s − 3) + 3 + b,    a = exp(log_a) > 0,    s = 1 + 4 · sigmoid(head(frames)),

so the order of clips, and with it every rank correlation on any corpus, is the network's own,
while the scale and offset become the corpus's. `train_head=True` lets the head's weights learn
too (from the pretrained ones), trading that guarantee for fit. The head pools the backbone's
frames of the whole clip (not the network's own fixed crops, which `DistillMosZeroShot` keeps),
so a frozen backbone's frames come from the frame cache: one pass per clip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from sqa.core.masking import frame_mask
from sqa.core.prediction import OVERALL, Prediction
from sqa.models.config import Exportable
from sqa.models.distillmos import DistillMosBackbone, attention_head
from sqa.models.predictor import INTERNAL_RANGE, RatingScale

# The middle of the internal scale, about which the gain scales scores.
MIDPOINT = (INTERNAL_RANGE[0] + INTERNAL_RANGE[1]) / 2


@dataclass
class CalibratedConfig:
    """What rebuilds a `CalibratedPredictor` around its backbone: the rating scale it maps onto."""

    score_range: list[float]


class CalibratedPredictor(RatingScale, Exportable, nn.Module):
    """Distill-MOS frames -> its pretrained attention head -> an increasing affine map (`a`, `b`).

    It has the scoring interface of `sqa.models.predictor.MOSPredictor` for one dimension and no
    domain, pitch or judge inputs: `forward` and `score_frames` score on the internal 1-5 scale,
    `to_scale` maps onto `score_range`. Every valid frame carries the clip's score.
    `pretrained` loads the head from the installed distillmos package (an export's state_dict
    holds it, so loading one needs no package); `train_head` lets the head learn beside a and b.
    `start_at` is refused: the map starts as the identity, so training begins at the network's score.
    """

    exported_children = ("backbone",)
    dimensions = [OVERALL]
    domain = None
    domain_count = None
    pitch = None
    judge = None
    num_judges = 0

    def __init__(
        self,
        backbone: nn.Module,
        score_range: Sequence[float] = INTERNAL_RANGE,
        num_domains: int = 1,
        num_judges: int = 0,
        pretrained: bool = False,
        train_head: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(backbone, DistillMosBackbone):
            raise ValueError(f"the calibrated head needs a DistillMosBackbone, got {type(backbone).__name__}")
        if num_judges:
            raise ValueError("the calibrated head scores the mean listener: set model.judge_dim=null")
        self.config = CalibratedConfig(self.set_score_range(score_range))
        self.backbone = backbone
        self.attention, self.output = attention_head(backbone.output_dim, pretrained)
        self.pretrained = pretrained
        for parameter in (*self.attention.parameters(), *self.output.parameters()):
            parameter.requires_grad_(train_head)
        # The identity at the start: the network's own score on 1-5.
        self.log_gain = nn.Parameter(torch.zeros(1))
        self.offset = nn.Parameter(torch.zeros(1))

    @property
    def pooling(self) -> str:
        """How frames become a score: the network's attention pooling over the clip's frames."""
        return "attention"

    @pooling.setter
    def pooling(self, value: str) -> None:
        if value != "attention":
            raise ValueError(f"pooling {value!r}: the calibrated head pools with its own attention")

    def pretrained_head_parameters(self) -> list[nn.Parameter]:
        """The head's parameters where they start from the network's pretrained ones (else none)."""
        return [*self.attention.parameters(), *self.output.parameters()] if self.pretrained else []

    def forward(
        self,
        wav: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """Score a padded batch: wav (B, N), lengths (B,); domain, f0 and judge are not used."""
        frames, frame_lengths = self.backbone(wav, lengths)
        return self.score_frames(frames, frame_lengths, lengths)

    def network_score(self, frames: torch.Tensor, frame_lengths: torch.Tensor) -> torch.Tensor:
        """The pretrained head's score on 1-5 (B,) of frames (B, T, D), each clip's valid frames only."""
        mask = frame_mask(frame_lengths, frames.shape[1])
        logits = self.attention(frames)[..., 0].masked_fill(~mask, -torch.inf)
        weights = torch.softmax(logits, dim=1).masked_fill(~mask, 0.0)
        pooled = (weights[..., None] * frames).sum(dim=1)
        return 1.0 + 4.0 * torch.sigmoid(self.output(pooled))[:, 0]

    def score_frames(
        self,
        frames: torch.Tensor,
        frame_lengths: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """Score backbone frames (B, T, D) with frame_lengths (B,): calibrated clip scores, frame by frame."""
        network = self.network_score(frames, frame_lengths)
        score = self.log_gain.exp() * (network - MIDPOINT) + MIDPOINT + self.offset
        mask = frame_mask(frame_lengths, frames.shape[1]).to(score.dtype)
        frame_scores = score[:, None] * mask
        return Prediction(score, frame_scores, frame_lengths, score[:, None], frame_scores[..., None])
