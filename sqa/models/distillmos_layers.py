"""The layers of Distill-MOS's network that torch lacks, each computing as the package's does.

The compressed complex spectrogram and the CNN over it, the per-feature normalisation with fixed
statistics, and the sinusoidal position code; `DistillMosBackbone` assembles them with torch's
transformer layers.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# The spectrogram: a 320-sample periodic Hann window hopped by 160, reflect-padded by 80 samples on
# each side so that a segment gives exactly 2 · 384 spectrogram frames.
STFT_WINDOW = 320
STFT_HOP = 160
COMPRESSION = 0.3


def compressed_spectrogram(segments: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """Segments (S, N) -> complex STFT with magnitudes raised to 0.3, phases kept: (S, 2, 161, 2N/320)."""
    pad = (STFT_WINDOW - STFT_HOP) // 2
    padded = nn.functional.pad(segments, (pad, pad), mode="reflect")
    spec = torch.stft(padded, STFT_WINDOW, STFT_HOP, window=window, center=False, return_complex=True)
    parts = torch.view_as_real(spec)
    magnitude = parts.pow(2).sum(dim=-1, keepdim=True).sqrt().clamp_min(1e-12)
    return (magnitude.pow(COMPRESSION) * parts / magnitude).permute(0, 3, 1, 2)


def cnn_channels(layers: int, channels: int) -> list[int]:
    """Output channels of each CNN layer: 64, 64, 128, ... doubling up to `channels`."""
    return [min(64 * 2 ** max(i - 1, 0), channels) for i in range(layers)]


class SpectrogramCNN(nn.Module):
    """Compressed spectrogram (S, 2, 161, 2T) -> frames (S, T, channels · remaining bins).

    3 x 3 convolutions without padding over frequency (stride 2 after the first layer) and with
    padding over time (stride 2 in the last layer only), each followed by LeakyReLU(0.1).
    """

    def __init__(self, channels: int, layers: int) -> None:
        super().__init__()
        bins = STFT_WINDOW // 2 + 1
        for i in range(max(layers, 0)):
            bins = (bins - 3) // (1 if i == 0 else 2) + 1
        # Checked before any layer is built: an export may declare any count.
        if layers < 1 or bins < 1:
            raise ValueError(
                f"conv_layers must be 1..7 (161 frequency bins, halved from layer 2), got {layers}"
            )
        widths = cnn_channels(layers, channels)
        if widths[-1] != channels:
            raise ValueError(f"{layers} CNN layers reach {widths[-1]} channels, not channels={channels}")
        self.convs = nn.ModuleList(
            nn.Conv2d(
                2 if i == 0 else widths[i - 1],
                width,
                3,
                stride=(1 if i == 0 else 2, 2 if i == layers - 1 else 1),
                padding=(0, 1),
            )
            for i, width in enumerate(widths)
        )
        self.output_dim = channels * bins

    def forward(self, spec: torch.Tensor) -> torch.Tensor:
        """Spectrogram (S, 2, F, 2T) -> (S, T, output_dim), features ordered channel-major."""
        x = spec
        for conv in self.convs:
            x = nn.functional.leaky_relu(conv(x), 0.1)
        return x.flatten(1, 2).transpose(1, 2)


class FrozenBatchNorm(nn.Module):
    """Per-feature affine normalisation (C,) with fixed statistics: BatchNorm1d as in evaluation.

    In training too: batch statistics would mix the segments of a batch (and the silence that
    pads a short clip's segment), so a clip's frames would depend on the clips beside it. The
    pretrained statistics stay; the scale and shift train.
    """

    def __init__(self, features: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Frames (S, T, C) -> (S, T, C), each feature normalised by its stored mean and variance."""
        out = nn.functional.batch_norm(
            x.transpose(1, 2),
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            eps=self.eps,
        )
        return out.transpose(1, 2)


def sinusoidal_positions(frames: int, dim: int) -> torch.Tensor:
    """The network's position code (frames, dim): sin/cos pairs with wavelengths up to 2π · 2·frames."""
    position = torch.arange(frames, dtype=torch.float32)[:, None]
    rates = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(2 * frames) / dim))
    code = torch.zeros(frames, dim)
    code[:, 0::2] = torch.sin(position * rates)
    code[:, 1::2] = torch.cos(position * rates)
    return code
