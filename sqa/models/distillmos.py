"""Distill-MOS (Stahl and Gamper, Microsoft; MIT): a compact pretrained speech-quality network.

The network scores fixed 7.68 s segments at 16 kHz. Each segment is scaled to a peak of 1, turned
into a power-law compressed complex spectrogram (20 ms Hann window, 10 ms hop), and passed through
a 2-D CNN (6 layers of 3 x 3 convolutions + LeakyReLU 0.1; the last one halves the frame rate),
two per-feature normalisations, a projection to 200 dims with sinusoidal positions, 7
post-LN transformer layers of 8 heads, and a last normalisation: 384 frames of 200 dims, one per
20 ms. Its own head pools those frames by attention into a score 1 + 4·sigmoid(·) per segment and
averages the segments of a clip, which it crops from the clip at most 1 s apart.

`DistillMosBackbone` gives sqa's head these frames for a clip of any length: the clip is tiled
with segments (see `segment_starts`), so frame t of the clip is centred near sample 320·t as
wav2vec2's and the f0 track's frames are. `DistillMosZeroShot` is the network's own head on the
network's own crops: an export of it scores as the `distillmos` package does. Both are sqa's own
modules; `pretrained=True` loads the weights from the installed package's file (nothing is
downloaded), and an export carries them in its state_dict, so scoring one needs neither the
package nor torchaudio.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sqa.core.extras import MissingExtraError
from sqa.core.prediction import OVERALL, Prediction
from sqa.models.backbone import W2V_HOP, W2V_WINDOW, conv_frame_lengths
from sqa.models.config import Exportable

SAMPLE_RATE = 16000
# One segment: 7.68 s, 384 frames of 320 samples.
SEGMENT = 122880
SEGMENT_FRAMES = SEGMENT // W2V_HOP
# The spectrogram: a 320-sample periodic Hann window hopped by 160, reflect-padded by 80 samples on
# each side so that a segment gives exactly 2 · 384 spectrogram frames.
STFT_WINDOW = 320
STFT_HOP = 160
COMPRESSION = 0.3
# The package's crops of a long clip: consecutive crops start at most this many samples apart.
CROP_HOP = 16000
# Segments passed through the network at once on an accelerator. On a CPU one at a time was the
# fastest (one thread: 0.51 s a segment alone, 0.67-0.73 s in passes of 2-8; two threads: no gain
# from passes) and holds the least memory (the CNN's first layers take about 60 MB a segment).
SEGMENTS_PER_PASS = 16
WEIGHTS = "distill_mos_v7.pt"
# Where the package's state_dict keeps the tensors of sqa's modules: sqa's prefix -> the package's.
_TRANSFORMER = "transformer_pool_attn."
_BACKBONE_PREFIXES = {
    "input_norm.": _TRANSFORMER + "norm_input.",
    "projection_norm.": _TRANSFORMER + "transformer.norm.",
    "projection.": _TRANSFORMER + "transformer.linear_proj.",
    "layers.": _TRANSFORMER + "transformer.transformer_encoder.layers.",
    "output_norm.": _TRANSFORMER + "norm_trans.",
}
_ATTENTION_PREFIXES = {"0.": _TRANSFORMER + "pool.linear1.", "2.": _TRANSFORMER + "pool.linear2."}
_OUTPUT_PREFIXES = {"": _TRANSFORMER + "pool.linear3."}


def package_weights_path() -> Path:
    """The weight file inside the installed `distillmos` package (found without importing it)."""
    spec = importlib.util.find_spec("distillmos")
    if spec is None or not spec.submodule_search_locations:
        raise MissingExtraError(
            "the pretrained Distill-MOS weights need the Python package 'distillmos', which is not "
            "installed: pip install 'sqa[distillmos]' (or `bash scripts/setup.sh`, which installs "
            "every extra)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "weights" / WEIGHTS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the installed distillmos package has no {WEIGHTS}")
    return path


def package_state_dict() -> dict[str, torch.Tensor]:
    """The package's pretrained tensors under their names in its own model (read as plain tensors)."""
    checkpoint = torch.load(package_weights_path(), map_location="cpu", weights_only=True)
    return dict(checkpoint["model"])


def _renamed(state: dict[str, torch.Tensor], prefixes: dict[str, str]) -> dict[str, torch.Tensor]:
    """The tensors of `state` under the package's `prefixes` (values), renamed to sqa's (keys).

    BatchNorm's update counters are left out: sqa's normalisations keep fixed statistics.
    """
    out = {}
    for ours, theirs in prefixes.items():
        for name, tensor in state.items():
            if name.startswith(theirs) and not name.endswith("num_batches_tracked"):
                out[ours + name.removeprefix(theirs)] = tensor
    return out


def backbone_state(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The package's tensors (`package_state_dict`) of the network before its head, named as sqa's."""
    out = _renamed(state, _BACKBONE_PREFIXES)
    for name, tensor in state.items():
        if name.startswith("cnn.cnn."):
            index, rest = name.removeprefix("cnn.cnn.").split(".", 1)
            # The package's CNN interleaves activations with its convolutions: conv i is entry 2·i.
            out[f"cnn.convs.{int(index) // 2}.{rest}"] = tensor
    return out


def segment_starts(samples: int) -> list[int]:
    """Start samples of the 7.68 s segments that tile a clip of `samples` samples for its frames.

    The clip has `conv_frame_lengths` frames (wav2vec2's count at the same 320-sample hop).
    Segment k < K-1 starts at k · 7.68 s and gives frames [384·k, 384·(k+1)); the last one
    gives the rest and ends with the clip (its start a multiple of 320 samples, so its frames
    fall on the clip's grid), so that it holds audio rather than silence wherever the clip is
    long enough. A clip shorter than a segment gets one, padded with silence as the package pads.
    """
    frames = int(conv_frame_lengths(torch.tensor(max(samples, W2V_WINDOW))))
    count = math.ceil(frames / SEGMENT_FRAMES)
    last = min((count - 1) * SEGMENT, max(0, (samples - SEGMENT) // W2V_HOP * W2V_HOP))
    return [k * SEGMENT for k in range(count - 1)] + [last]


def crop_starts(samples: int) -> list[int]:
    """Start samples of the package's own crops of a clip of `samples` samples (its zero-shot score).

    A clip up to 7.68 s is one crop (padded with silence); a longer one gets crops spread evenly
    from its start to its end, at most 1 s apart, the starts rounded down as the package rounds.
    """
    over = samples - SEGMENT
    if over <= 0:
        return [0]
    count = math.ceil(over / CROP_HOP) + 1
    return [int(c * over) for c in np.linspace(0.0, 1.0, count)]


def cut_segments(wav: torch.Tensor, lengths: torch.Tensor, starts: list[list[int]]) -> torch.Tensor:
    """Segments (S, SEGMENT) of each clip b at `starts[b]`, from its own samples, silence past its end."""
    segments = []
    for row, (n, clip_starts) in enumerate(zip(lengths.tolist(), starts, strict=True)):
        for start in clip_starts:
            piece = wav[row, start : min(start + SEGMENT, n)]
            segments.append(nn.functional.pad(piece, (0, SEGMENT - piece.shape[0])))
    return torch.stack(segments)


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


def sinusoidal_positions(frames: int, dim: int) -> torch.Tensor:
    """The network's position code (frames, dim): sin/cos pairs with wavelengths up to 2π · 2·frames."""
    position = torch.arange(frames, dtype=torch.float32)[:, None]
    rates = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(2 * frames) / dim))
    code = torch.zeros(frames, dim)
    code[:, 0::2] = torch.sin(position * rates)
    code[:, 1::2] = torch.cos(position * rates)
    return code


@dataclass
class DistillMosConfig:
    """What rebuilds a `DistillMosBackbone`: its architecture (Distill-MOS v7 by default)."""

    sample_rate: int
    channels: int
    conv_layers: int
    dim: int
    heads: int
    layers: int
    freeze_cnn: bool


class DistillMosBackbone(Exportable, nn.Module):
    """Distill-MOS's network as a backbone: frames (B, T, dim) at a 20 ms hop for clips of any length.

    Each clip is tiled with 7.68 s segments from its own samples (`segment_starts`), so its
    frames are the same alone and inside a padded batch, in training as well (the network has no
    dropout and its normalisations keep fixed statistics). T is wav2vec2's frame count for the
    clip (`conv_frame_lengths`), which the f0 track of the pitch branches matches. `pretrained`
    loads Distill-MOS v7's weights from the installed `distillmos` package; `freeze_cnn` keeps the
    spectrogram CNN, most of the network's arithmetic, fixed while the rest fine-tunes.
    """

    def __init__(
        self,
        pretrained: bool = False,
        sample_rate: int = SAMPLE_RATE,
        channels: int = 256,
        conv_layers: int = 6,
        dim: int = 200,
        heads: int = 8,
        layers: int = 7,
        freeze_cnn: bool = False,
    ) -> None:
        super().__init__()
        if sample_rate != SAMPLE_RATE:
            # Its spectrogram's window and hop are set in samples of 16 kHz audio.
            raise ValueError(
                f"Distill-MOS reads 16 kHz audio; set data.sample_rate=16000 (got sample_rate={sample_rate})"
            )
        self.config = DistillMosConfig(sample_rate, channels, conv_layers, dim, heads, layers, freeze_cnn)
        self.output_dim = dim
        self.min_samples = W2V_WINDOW
        self.hop_length = W2V_HOP
        # Computed on the CPU even when the model is built on the meta device (sqa.exports.format
        # sizes an export's model that way): there these functions took seconds through torch's
        # reference implementations.
        with torch.device("cpu"):
            window = torch.hann_window(STFT_WINDOW)
            positions = sinusoidal_positions(SEGMENT_FRAMES, dim)
        self.register_buffer("window", window, persistent=False)
        self.cnn = SpectrogramCNN(channels, conv_layers)
        features = self.cnn.output_dim
        self.input_norm = FrozenBatchNorm(features)
        self.projection_norm = FrozenBatchNorm(features)
        self.projection = nn.Linear(features, dim)
        self.register_buffer("positions", positions, persistent=False)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(dim, heads, 2 * dim, dropout=0.0, batch_first=True)
            for _ in range(layers)
        )
        self.output_norm = FrozenBatchNorm(dim)
        if pretrained:
            self.load_state_dict(backbone_state(package_state_dict()))
        self.cnn.requires_grad_(not freeze_cnn)

    def segment_frames(self, segments: torch.Tensor) -> torch.Tensor:
        """7.68 s segments (S, SEGMENT) -> the network's frames (S, 384, dim), each peak-normalised first."""
        outputs = []
        size = 1 if segments.device.type == "cpu" else SEGMENTS_PER_PASS
        for first in range(0, segments.shape[0], size):
            part = segments[first : first + size]
            part = part / (part.abs().amax(dim=1, keepdim=True) + 1e-8)
            x = self.cnn(compressed_spectrogram(part, self.window))
            x = self.projection(self.projection_norm(self.input_norm(x))) + self.positions.to(x.dtype)
            for layer in self.layers:
                x = layer(x)
            outputs.append(self.output_norm(x))
        return torch.cat(outputs)

    def forward(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Wav (B, N), lengths (B,) -> frames (B, T, dim), frame_lengths (B,)."""
        frame_lengths = conv_frame_lengths(lengths.clamp_min(W2V_WINDOW))
        starts = [segment_starts(int(n)) for n in lengths.tolist()]
        segment_frames = self.segment_frames(cut_segments(wav, lengths, starts))
        frames = segment_frames.new_zeros(wav.shape[0], int(frame_lengths.max()), self.output_dim)
        first = 0
        for row, (count, clip_starts) in enumerate(zip(frame_lengths.tolist(), starts, strict=True)):
            for k, start in enumerate(clip_starts):
                # Segment k fills the clip's frames from 384·k on (the last one to the end).
                lo, hi = k * SEGMENT_FRAMES, count if k == len(clip_starts) - 1 else (k + 1) * SEGMENT_FRAMES
                offset = start // W2V_HOP
                frames[row, lo:hi] = segment_frames[first + k, lo - offset : hi - offset]
            first += len(clip_starts)
        return frames, frame_lengths


@dataclass
class ZeroShotConfig:
    """What rebuilds a `DistillMosZeroShot` around its backbone: nothing else (one fixed head)."""


class DistillMosZeroShot(Exportable, nn.Module):
    """Distill-MOS as its authors score with it: its attention-pooling head on its own crops of a clip.

    Each crop (`crop_starts`) goes through the backbone's network; the head weighs the crop's
    frames by a learned attention (Linear(dim, 2·dim), ReLU, Linear(2·dim, 1), softmax over
    time), maps the weighted mean to one value and the clip's score is 1 + 4 · the mean over its
    crops of that value's sigmoid, on 1-5. It has the scoring interface of
    `sqa.models.predictor.MOSPredictor` (one dimension, no domain, pitch or judge inputs):
    `frame_scores` holds the clip's score on each of its `frame_lengths` frames (wav2vec2's
    count), so chunked scoring weighs each chunk by its duration.
    """

    exported_children = ("backbone",)
    dimensions = (OVERALL,)
    domain = None
    domain_count = None
    pitch = None
    judge = None
    num_judges = 0
    score_range = (1.0, 5.0)

    def __init__(self, backbone: nn.Module, pretrained: bool = False) -> None:
        super().__init__()
        if not isinstance(backbone, DistillMosBackbone):
            raise ValueError(
                f"the Distill-MOS head needs a DistillMosBackbone, got {type(backbone).__name__}"
            )
        self.config = ZeroShotConfig()
        self.backbone = backbone
        dim = backbone.output_dim
        self.attention = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, 1))
        self.output = nn.Linear(dim, 1)
        if pretrained:
            state = package_state_dict()
            self.attention.load_state_dict(_renamed(state, _ATTENTION_PREFIXES))
            self.output.load_state_dict(_renamed(state, _OUTPUT_PREFIXES))

    @property
    def pooling(self) -> str:
        """How frames become a score: the network's own attention pooling, per crop."""
        return "attention"

    @pooling.setter
    def pooling(self, value: str) -> None:
        if value != "attention":
            raise ValueError(
                f"pooling {value!r}: Distill-MOS pools each crop's frames with its own attention head; "
                "its pooling cannot be changed"
            )

    def to_internal(self, values: torch.Tensor) -> torch.Tensor:
        """Labels (any shape): already on the 1-5 scale the network predicts."""
        return values

    def to_scale(self, values: torch.Tensor) -> torch.Tensor:
        """Scores (any shape): already on the 1-5 scale."""
        return values

    def crop_scores(self, segments: torch.Tensor) -> torch.Tensor:
        """Crops (S, SEGMENT) -> the head's value in [0, 1] for each (S,), before 1 + 4·mean."""
        frames = self.backbone.segment_frames(segments)
        weights = torch.softmax(self.attention(frames), dim=1)
        return torch.sigmoid(self.output((weights * frames).sum(dim=1)))[:, 0]

    def forward(
        self,
        wav: torch.Tensor,
        lengths: torch.Tensor,
        domain: torch.Tensor | None = None,
        f0: torch.Tensor | None = None,
        judge: torch.Tensor | None = None,
    ) -> Prediction:
        """Score a padded batch: wav (B, N), lengths (B,); domain, f0 and judge are not used."""
        starts = [crop_starts(int(n)) for n in lengths.tolist()]
        values = self.crop_scores(cut_segments(wav, lengths, starts))
        owner = torch.repeat_interleave(
            torch.arange(len(starts), device=values.device),
            torch.tensor([len(s) for s in starts], device=values.device),
        )
        counts = torch.bincount(owner, minlength=len(starts)).to(values.dtype)
        score = 1.0 + 4.0 * values.new_zeros(len(starts)).index_add(0, owner, values) / counts
        frame_lengths = conv_frame_lengths(lengths.clamp_min(W2V_WINDOW)).to(score.device)
        valid = torch.arange(int(frame_lengths.max()), device=score.device)[None, :] < frame_lengths[:, None]
        frame_scores = score[:, None] * valid.to(score.dtype)
        return Prediction(score, frame_scores, frame_lengths, score[:, None], frame_scores[..., None])


def zero_shot_predictor() -> DistillMosZeroShot:
    """Distill-MOS v7, network and head, with the installed package's weights, in eval mode."""
    return DistillMosZeroShot(DistillMosBackbone(pretrained=True), pretrained=True).eval()
