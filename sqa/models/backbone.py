"""Frame-level feature extractors behind one interface.

Every backbone maps `(wav (B, N), lengths (B,)) -> (frames (B, T, D), frame_lengths (B,))`, has
`output_dim` (D), `min_samples` (its receptive field: shorter clips are zero-padded to it),
`hop_length` (samples per frame) and
`export_config()` returns a Hydra config that rebuilds its architecture without the pretrained
weights it started from (the export carries those in its state_dict).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from sqa.core.masking import frame_mask, masked_standardize
from sqa.models.config import Exportable

# wav2vec2's convolutional front end: 400-sample receptive field, 320-sample (20 ms) stride.
W2V_WINDOW = 400
W2V_HOP = 320


def conv_frame_lengths(lengths: torch.Tensor, window: int = W2V_WINDOW, hop: int = W2V_HOP) -> torch.Tensor:
    """Frames a window/hop front end yields for `lengths` samples (B,), without any padding."""
    return torch.div(lengths - window, hop, rounding_mode="floor").clamp_min(0) + 1


def _slaney_mel(hz: torch.Tensor) -> torch.Tensor:
    """Slaney's mel scale of frequencies `hz` (any shape): linear below 1 kHz, logarithmic above."""
    linear = hz / (200.0 / 3)
    log = 15.0 + torch.log(hz.clamp_min(1e-10) / 1000.0) / (math.log(6.4) / 27.0)
    return torch.where(hz >= 1000.0, log, linear)


def _slaney_hz(mel: torch.Tensor) -> torch.Tensor:
    """Frequencies in Hz of Slaney mels `mel` (any shape): the inverse of `_slaney_mel`."""
    linear = mel * (200.0 / 3)
    log = 1000.0 * torch.exp((math.log(6.4) / 27.0) * (mel - 15.0))
    return torch.where(mel >= 15.0, log, linear)


def mel_filterbank(n_freqs: int, f_max: float, n_mels: int, sample_rate: int) -> torch.Tensor:
    """Area-normalised Slaney mel filterbank (n_freqs, n_mels) from 0 Hz to `f_max`.

    The same matrix as librosa's default and torchaudio's `melscale_fbanks(..., norm="slaney",
    mel_scale="slaney")`, computed here so the core install needs no torchaudio.
    """
    freqs = torch.linspace(0, sample_rate // 2, n_freqs)
    edges = _slaney_hz(torch.linspace(0.0, float(_slaney_mel(torch.tensor(f_max))), n_mels + 2))
    widths = edges[1:] - edges[:-1]
    slopes = edges[None, :] - freqs[:, None]
    rising = -slopes[:, :-2] / widths[:-1]
    falling = slopes[:, 2:] / widths[1:]
    triangles = torch.minimum(rising, falling).clamp_min(0.0)
    return triangles * (2.0 / (edges[2:] - edges[:-2]))[None, :]


@dataclass
class LogMelConfig:
    """What rebuilds a `LogMelBackbone`: its constructor arguments."""

    sample_rate: int
    n_mels: int
    channels: int
    conv_layers: int
    kernel_size: int
    transformer_layers: int
    heads: int


class LogMelBackbone(Exportable, nn.Module):
    """Log-mel filterbank at a 20 ms hop followed by masked 1-D convolutions (and attention).

    Each clip is normalised by one scalar mean and variance over its valid frames: per-band
    normalisation would erase the spectral envelope that noise, band-limit and bit-depth
    degradations change. Frames use only real samples (no centring), so a clip's frames are the
    same alone and inside a padded batch, and T matches wav2vec2's frame count.
    """

    def __init__(
        self,
        sample_rate: int = 16000,
        n_mels: int = 64,
        channels: int = 128,
        conv_layers: int = 3,
        kernel_size: int = 5,
        transformer_layers: int = 0,
        heads: int = 4,
    ) -> None:
        super().__init__()
        self.output_dim = channels
        self.min_samples = W2V_WINDOW
        self.hop_length = W2V_HOP
        self.config = LogMelConfig(
            sample_rate, n_mels, channels, conv_layers, kernel_size, transformer_layers, heads
        )
        # Computed on the CPU even when the model is built on the meta device (sqa.exports.format sizes
        # an export's model that way): the filterbank's computation reads values.
        with torch.device("cpu"):
            fb = mel_filterbank(W2V_WINDOW // 2 + 1, sample_rate / 2, n_mels, sample_rate)
        self.register_buffer("fbank", fb, persistent=False)
        self.register_buffer("window", torch.hann_window(W2V_WINDOW), persistent=False)
        dims = [n_mels] + [channels] * conv_layers
        self.convs = nn.ModuleList(
            nn.Conv1d(i, o, kernel_size, padding=kernel_size // 2)
            for i, o in zip(dims[:-1], dims[1:], strict=True)
        )
        self.norms = nn.ModuleList(nn.LayerNorm(channels) for _ in range(conv_layers))
        self.attention = nn.ModuleList(
            nn.TransformerEncoderLayer(channels, heads, 2 * channels, dropout=0.1, batch_first=True)
            for _ in range(transformer_layers)
        )

    def log_mel(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-clip normalised log-mel (B, T, n_mels) and frame counts (B,)."""
        wav = nn.functional.pad(wav, (0, max(0, W2V_WINDOW - wav.shape[1])))
        spec = (
            torch.stft(wav, W2V_WINDOW, W2V_HOP, window=self.window, center=False, return_complex=True)
            .abs()
            .pow(2)
        )
        mel = torch.log(spec.transpose(1, 2) @ self.fbank + 1e-6)
        frame_lengths = conv_frame_lengths(lengths).clamp_max(mel.shape[1])
        return masked_standardize(mel, frame_lengths), frame_lengths

    def forward(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Wav (B, N), lengths (B,) -> frames (B, T, channels), frame_lengths (B,)."""
        x, frame_lengths = self.log_mel(wav, lengths)
        keep = frame_mask(frame_lengths, x.shape[1])[..., None].to(x.dtype)
        for conv, norm in zip(self.convs, self.norms, strict=True):
            # Zero the padding before every convolution so a clip sees the same zeros past its
            # end whether it is alone or batched with longer clips.
            x = norm(nn.functional.gelu(conv((x * keep).transpose(1, 2)).transpose(1, 2)))
        for layer in self.attention:
            x = layer(x, src_key_padding_mask=keep[..., 0] == 0)
        return x * keep, frame_lengths
