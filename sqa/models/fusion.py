"""Fusion backbone: two backbones on one frame rate, concatenated or mixed by a learned gate.

UTMOSv2's second view of the signal (a spectrogram network beside wav2vec2) behind the backbone
contract, `(wav (B, N), lengths (B,)) -> (frames (B, T, D), frame_lengths (B,))`, so the
predictor, its branches, the scorer and exports see one backbone.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sqa.core.masking import frame_mask
from sqa.models.config import Exportable

FUSION_MODES = ("concat", "gated")


@dataclass
class FusionConfig:
    """What rebuilds a `FusionBackbone` around its two backbones: how it fuses them."""

    mode: str
    dim: int | None


class FusionBackbone(Exportable, nn.Module):
    """Frames of `first` and `second` side by side ("concat") or mixed frame by frame ("gated").

    Both backbones must step the same number of samples per frame (every sqa backbone steps 320,
    20 ms at 16 kHz). Their counts for one clip may still differ by a frame or two (receptive
    fields and padding differ), so each clip keeps the frames both have: the smaller of its two
    frame lengths. "concat": output_dim = d1 + d2. "gated": both are projected to `dim` (None: the
    smaller of d1 and d2) and mixed as g·a + (1 - g)·b, with one learned sigmoid gate g per frame
    computed from both. A fusion holds two plain backbones, never another fusion.
    """

    exported_children = ("first", "second")

    def __init__(
        self, first: nn.Module, second: nn.Module, mode: str = "concat", dim: int | None = None
    ) -> None:
        super().__init__()
        if mode not in FUSION_MODES:
            raise ValueError(f"mode must be one of {FUSION_MODES}, got {mode!r}")
        if mode == "concat" and dim is not None:
            raise ValueError(
                f"dim sets the gated mode's width; concat's is d1 + d2 (set dim: null), got {dim}"
            )
        if dim is not None and dim < 1:
            raise ValueError(f"dim must be 1 or more, got {dim}")
        for name, part in (("first", first), ("second", second)):
            if isinstance(part, FusionBackbone):
                raise ValueError(f"{name} is a fusion backbone; a fusion fuses two plain backbones")
        if first.hop_length != second.hop_length:
            raise ValueError(
                f"first steps {first.hop_length} samples per frame, second {second.hop_length}: a fusion "
                "needs both on one frame rate (the same hop), so their frames describe the same audio"
            )
        self.first = first
        self.second = second
        self.config = FusionConfig(mode, dim)
        self.hop_length = first.hop_length
        # Each backbone pads a short clip to its own receptive field; the larger one covers both.
        self.min_samples = max(first.min_samples, second.min_samples)
        if mode == "concat":
            self.output_dim = first.output_dim + second.output_dim
            return
        width = dim or min(first.output_dim, second.output_dim)
        self.output_dim = width
        self.project_first = nn.Linear(first.output_dim, width)
        self.project_second = nn.Linear(second.output_dim, width)
        self.gate = nn.Linear(2 * width, 1)

    def mix(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gated mode: frames a (B, T, d1), b (B, T, d2) -> mixed (B, T, dim), gate (B, T, 1) in (0, 1)."""
        a, b = self.project_first(a), self.project_second(b)
        gate = torch.sigmoid(self.gate(torch.cat([a, b], dim=-1)))
        return gate * a + (1 - gate) * b, gate

    def forward(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Wav (B, N), lengths (B,) -> frames (B, T, output_dim), frame_lengths (B,)."""
        a, a_lengths = self.first(wav, lengths)
        b, b_lengths = self.second(wav, lengths)
        frame_lengths = torch.minimum(a_lengths, b_lengths.to(a_lengths))
        # Every clip's frame length is within both tensors' widths, so the narrower one holds them all.
        width = min(a.shape[1], b.shape[1])
        a, b = a[:, :width], b[:, :width]
        frames = torch.cat([a, b], dim=-1) if self.config.mode == "concat" else self.mix(a, b)[0]
        # Zero the frames past a clip's end: the frames one backbone has and the other does not.
        keep = frame_mask(frame_lengths, width)[..., None].to(frames.dtype)
        return frames * keep, frame_lengths
