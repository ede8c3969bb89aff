"""MOSPredictor: backbone frames -> per-frame SSL-MOS head -> masked mean -> clip score."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from sqa.masking import frame_mask, masked_mean


class Prediction(NamedTuple):
    """Clip scores (B,), per-frame scores (B, T) and the valid frame count of each clip (B,)."""

    score: torch.Tensor
    frame_scores: torch.Tensor
    frame_lengths: torch.Tensor


class MOSPredictor(nn.Module):
    """SSL-MOS predictor: any backbone, a per-frame MLP head and masked mean pooling."""

    def __init__(
        self,
        backbone: nn.Module,
        head_dim: int = 64,
        dropout: float = 0.3,
        range_clip: bool = True,
    ) -> None:
        super().__init__()
        self.backbone = backbone
        self.range_clip = range_clip
        self._config = {"head_dim": head_dim, "dropout": dropout, "range_clip": range_clip}
        self.head = nn.Sequential(
            nn.Linear(backbone.output_dim, head_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(head_dim, 1),
        )

    def forward(self, wav: torch.Tensor, lengths: torch.Tensor) -> Prediction:
        """Score a padded batch: wav (B, N) float, lengths (B,) valid samples per clip."""
        frames, frame_lengths = self.backbone(wav, lengths)
        frame_scores = self.head(frames).squeeze(-1)
        if self.range_clip:
            # Keeps every frame inside the 1..5 MOS scale.
            frame_scores = 2.0 * torch.tanh(frame_scores) + 3.0
        frame_scores = frame_scores.masked_fill(
            ~frame_mask(frame_lengths, frame_scores.shape[1]), 0.0
        )
        return Prediction(masked_mean(frame_scores, frame_lengths), frame_scores, frame_lengths)

    def export_config(self) -> dict:
        """Hydra config rebuilding this predictor's architecture (no pretrained-weight paths)."""
        return {
            "_target_": f"{__name__}.MOSPredictor",
            "backbone": self.backbone.export_config(),
            **self._config,
        }
