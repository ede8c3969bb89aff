"""MOSPredictor: backbone frames -> per-frame SSL-MOS head -> masked mean -> clip score."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from sqa.masking import frame_mask, masked_mean
from sqa.models.branches import PITCH_BRANCHES, DomainEmbedding


class Prediction(NamedTuple):
    """Clip scores (B,), per-frame scores (B, T) and the valid frame count of each clip (B,)."""

    score: torch.Tensor
    frame_scores: torch.Tensor
    frame_lengths: torch.Tensor


class MOSPredictor(nn.Module):
    """SSL-MOS predictor: backbone frames [+ domain embedding] [+ pitch branch] -> per-frame head.

    `domain_dim` (None: off) embeds the domain ID (one of `num_domains`) and concatenates it to
    every frame; `pitch` ("midi", "histogram" or None) adds a pitch branch fed with f0.
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
    ) -> None:
        super().__init__()
        if pitch is not None and pitch not in PITCH_BRANCHES:
            raise ValueError(f"pitch must be null or one of {sorted(PITCH_BRANCHES)}, got {pitch!r}")
        self.backbone = backbone
        self.range_clip = range_clip
        self._config = {
            "head_dim": head_dim,
            "dropout": dropout,
            "range_clip": range_clip,
            "num_domains": num_domains,
            "domain_dim": domain_dim,
            "pitch": pitch,
            "pitch_dim": pitch_dim,
        }
        self.domain = DomainEmbedding(num_domains, domain_dim) if domain_dim else None
        self.pitch = PITCH_BRANCHES[pitch](pitch_dim) if pitch else None
        in_dim = backbone.output_dim + sum(m.output_dim for m in (self.domain, self.pitch) if m is not None)
        self.head = nn.Sequential(
            nn.Linear(in_dim, head_dim),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(head_dim, 1),
        )

    def forward(
        self,
        wav: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
    ) -> Prediction:
        """Score a padded batch: wav (B, N), lengths (B,), domain (B,) IDs, f0 (B, T') in Hz."""
        frames, frame_lengths = self.backbone(wav, lengths)
        parts = [frames]
        if self.domain is not None:
            if domain is None:
                raise ValueError("this predictor uses domain IDs: pass domain (B,)")
            parts.append(self.domain(domain, frames.shape[1]).to(frames.dtype))
        if self.pitch is not None:
            if f0 is None:
                raise ValueError(f"this predictor has a {self._config['pitch']} branch: pass f0 (B, T')")
            parts.append(self.pitch(f0, frame_lengths, frames.shape[1]).to(frames.dtype))
        frame_scores = self.head(torch.cat(parts, dim=-1)).squeeze(-1)
        if self.range_clip:
            # Keeps every frame inside the 1..5 MOS scale.
            frame_scores = 2.0 * torch.tanh(frame_scores) + 3.0
        frame_scores = frame_scores.masked_fill(~frame_mask(frame_lengths, frame_scores.shape[1]), 0.0)
        return Prediction(masked_mean(frame_scores, frame_lengths), frame_scores, frame_lengths)

    def export_config(self) -> dict:
        """Hydra config rebuilding this predictor's architecture (no pretrained-weight paths)."""
        return {
            "_target_": f"{__name__}.MOSPredictor",
            "backbone": self.backbone.export_config(),
            **self._config,
        }
