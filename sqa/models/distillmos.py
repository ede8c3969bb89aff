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

from dataclasses import dataclass

import torch
from torch import nn

from sqa.core.content_key import content_key
from sqa.core.prediction import OVERALL, Prediction
from sqa.models.backbone import W2V_HOP, W2V_WINDOW, conv_frame_lengths
from sqa.models.config import Exportable
from sqa.models.distillmos_layers import (
    COMPRESSION,
    STFT_HOP,
    STFT_WINDOW,
    FrozenBatchNorm,
    SpectrogramCNN,
    cnn_channels,
    compressed_spectrogram,
    sinusoidal_positions,
)
from sqa.models.distillmos_segments import (
    CROP_HOP,
    SEGMENT,
    SEGMENT_FRAMES,
    crop_starts,
    cut_segments,
    segment_starts,
)
from sqa.models.distillmos_weights import (
    WEIGHTS,
    attention_state,
    backbone_state,
    output_state,
    package_state_dict,
    package_weights_path,
)
from sqa.models.predictor import RatingScale

# Every public name of this module, those now defined in distillmos_layers, distillmos_segments
# and distillmos_weights included: each stays `sqa.models.distillmos.<name>`.
__all__ = [
    "COMPRESSION",
    "CROP_HOP",
    "DistillMosBackbone",
    "DistillMosConfig",
    "DistillMosZeroShot",
    "FrozenBatchNorm",
    "SAMPLE_RATE",
    "SEGMENT",
    "SEGMENTS_PER_PASS",
    "SEGMENT_FRAMES",
    "STFT_HOP",
    "STFT_WINDOW",
    "SpectrogramCNN",
    "WEIGHTS",
    "ZeroShotConfig",
    "backbone_state",
    "cnn_channels",
    "compressed_spectrogram",
    "crop_starts",
    "cut_segments",
    "package_state_dict",
    "package_weights_path",
    "segment_starts",
    "sinusoidal_positions",
    "zero_shot_predictor",
]

SAMPLE_RATE = 16000
# Segments passed through the network at once. On a CPU the spectrogram CNN takes them one at a
# time: it was the fastest there (one thread: 0.51 s a segment alone, 0.67-0.73 s in passes of
# 2-8) and its first layers hold about 60 MB a segment. The transformer above it takes the pass
# together (a few MB a segment): fewer, larger products, so fewer OpenMP barriers, which cost most
# on a busy machine (benchmarks/README.md, "Distill-MOS fine-tuning step").
SEGMENTS_PER_PASS = 16


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
    frozen_layers: int = 0


class DistillMosBackbone(Exportable, nn.Module):
    """Distill-MOS's network as a backbone: frames (B, T, dim) at a 20 ms hop for clips of any length.

    Each clip is tiled with 7.68 s segments from its own samples (`segment_starts`), so its
    frames are the same alone and inside a padded batch, in training as well (the network has no
    dropout and its normalisations keep fixed statistics). T is wav2vec2's frame count for the
    clip (`conv_frame_lengths`), which the f0 track of the pitch branches matches. `pretrained`
    loads Distill-MOS v7's weights from the installed `distillmos` package; `freeze_cnn` keeps the
    spectrogram CNN, most of the network's arithmetic, fixed while the rest fine-tunes, and
    `frozen_layers` (with it) also the projection and that many of the lowest transformer layers.

    The fixed part of the network (its front) gives a segment the same output at every step, so
    `keep_fronts` lets training compute it once per segment (`front_frames`): a fine-tuning step
    then costs only the layers that learn.
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
        frozen_layers: int = 0,
    ) -> None:
        super().__init__()
        if sample_rate != SAMPLE_RATE:
            # Its spectrogram's window and hop are set in samples of 16 kHz audio.
            raise ValueError(
                f"Distill-MOS reads 16 kHz audio; set data.sample_rate=16000 (got sample_rate={sample_rate})"
            )
        if not 0 <= frozen_layers <= layers:
            raise ValueError(
                f"frozen_layers must be in [0, {layers}] (the network's layers), got {frozen_layers}"
            )
        if frozen_layers and not freeze_cnn:
            # The layers below a fixed one feed it: they stay fixed too.
            raise ValueError(
                f"frozen_layers={frozen_layers} keeps the layers below fixed: set freeze_cnn=true"
            )
        self.config = DistillMosConfig(
            sample_rate, channels, conv_layers, dim, heads, layers, freeze_cnn, frozen_layers
        )
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
        # Kept fronts by segment digest, up to `_front_bytes` (None: not kept; see `keep_fronts`).
        self._fronts: dict[bytes, torch.Tensor] | None = None
        self._front_bytes = 0
        self._front_used = 0
        # The front's weights the kept fronts were computed with (see `_forget_changed_fronts`).
        self._front_weights: bytes | None = None
        self.register_load_state_dict_post_hook(DistillMosBackbone._forget_changed_fronts)
        if pretrained:
            self.load_state_dict(backbone_state(package_state_dict()))
        for module in self.front_modules():
            module.requires_grad_(False)

    def front_modules(self) -> list[nn.Module]:
        """The modules of the network's fixed front, in order (none when nothing is frozen).

        The CNN, then with `frozen_layers` the normalisations, projection and lowest layers.
        """
        if not self.config.freeze_cnn:
            return []
        below = self.config.frozen_layers
        projection = [self.input_norm, self.projection_norm, self.projection] if below else []
        return [self.cnn, *projection, *self.layers[:below]]

    def keep_fronts(self, max_bytes: int) -> None:
        """Keep the fixed front's output of each segment, up to `max_bytes` (0: keep none, free them).

        Fronts already kept stay: a fine-tuning phase goes on with those of the frozen phase before
        it. Exact while the front does not change: its parameters never learn (`front_modules`),
        and loading other weights into it forgets every kept front.
        """
        if max_bytes <= 0 or not self.front_modules():
            self._fronts, self._front_used, self._front_weights = None, 0, None
        elif self._fronts is None:
            self._fronts, self._front_used, self._front_weights = {}, 0, self._front_digest()
        self._front_bytes = max(max_bytes, 0)

    def _front_digest(self) -> bytes:
        """A digest of the front's parameters and buffers: what its output depends on besides the input."""
        tensors = [t for m in self.front_modules() for t in (*m.parameters(), *m.buffers())]
        return content_key(torch.cat([t.detach().reshape(-1).float().cpu() for t in tensors]))

    def _forget_changed_fronts(self, incompatible_keys: object) -> None:
        """After weights are loaded: forget the kept fronts if the front's weights changed.

        A resumed fit loads the checkpoint of the same network; its front, which never learns, is
        unchanged, and its fronts are still its output.
        """
        if self._fronts is None:
            return
        digest = self._front_digest()
        if digest != self._front_weights:
            self._fronts, self._front_used, self._front_weights = {}, 0, digest

    def _front(self, part: torch.Tensor) -> torch.Tensor:
        """Segments (S, SEGMENT) -> the output of the fixed front (S, 384, features), computed."""
        part = part / (part.abs().amax(dim=1, keepdim=True) + 1e-8)
        # Contiguous as a kept front is (the CNN's output is a transposed view): what follows then
        # computes the same way, bit for bit, on a kept front and on a new one, wherever the front ends.
        x = self.cnn(compressed_spectrogram(part, self.window)).contiguous()
        if self.config.frozen_layers:
            x = self._project(x)
            for layer in self.layers[: self.config.frozen_layers]:
                x = layer(x)
        return x

    def _project(self, x: torch.Tensor) -> torch.Tensor:
        """CNN features (S, 384, features) -> normalised, projected, with positions (S, 384, dim)."""
        return self.projection(self.projection_norm(self.input_norm(x))) + self.positions.to(x.dtype)

    def front_frames(self, part: torch.Tensor) -> torch.Tensor:
        """Segments (S, SEGMENT) -> the fixed front's output (S, 384, features), kept ones reused."""
        if self._fronts is None or any(p.requires_grad for m in self.front_modules() for p in m.parameters()):
            return self._front(part)
        keys = [content_key(segment) for segment in part]
        found = {i: self._fronts[k] for i, k in enumerate(keys) if k in self._fronts}
        missing = [i for i in range(len(keys)) if i not in found]
        if missing:
            with torch.no_grad():
                new = self._front(part[missing])
            for j, i in enumerate(missing):
                found[i] = new[j]
                size = new[j].numel() * new[j].element_size()
                if self._front_used + size <= self._front_bytes:
                    self._fronts[keys[i]] = new[j]
                    self._front_used += size
        return torch.stack([found[i].to(part.device) for i in range(len(keys))])

    def segment_frames(self, segments: torch.Tensor) -> torch.Tensor:
        """7.68 s segments (S, SEGMENT) -> the network's frames (S, 384, dim), each peak-normalised first."""
        outputs = []
        front = 1 if segments.device.type == "cpu" else SEGMENTS_PER_PASS
        below = self.config.frozen_layers
        for first in range(0, segments.shape[0], SEGMENTS_PER_PASS):
            part = segments[first : first + SEGMENTS_PER_PASS]
            x = torch.cat([self.front_frames(part[k : k + front]) for k in range(0, part.shape[0], front)])
            if not below:
                x = self._project(x)
            for layer in self.layers[below:]:
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


class DistillMosZeroShot(RatingScale, Exportable, nn.Module):
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

    def __init__(self, backbone: nn.Module, pretrained: bool = False) -> None:
        super().__init__()
        if not isinstance(backbone, DistillMosBackbone):
            raise ValueError(
                f"the Distill-MOS head needs a DistillMosBackbone, got {type(backbone).__name__}"
            )
        self.config = ZeroShotConfig()
        self.backbone = backbone
        self.attention, self.output = attention_head(backbone.output_dim, pretrained)

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


def attention_head(dim: int, pretrained: bool) -> tuple[nn.Sequential, nn.Linear]:
    """The network's own head on frames of `dim`: attention weights (B, T, 1) and the output layer.

    Attention: Linear(dim, 2·dim), ReLU, Linear(2·dim, 1); output: Linear(dim, 1) of the
    attention-weighted mean. `pretrained` loads both from the installed package's weights.
    """
    attention = nn.Sequential(nn.Linear(dim, 2 * dim), nn.ReLU(), nn.Linear(2 * dim, 1))
    output = nn.Linear(dim, 1)
    if pretrained:
        state = package_state_dict()
        attention.load_state_dict(attention_state(state))
        output.load_state_dict(output_state(state))
    return attention, output


def zero_shot_predictor() -> DistillMosZeroShot:
    """Distill-MOS v7, network and head, with the installed package's weights, in eval mode."""
    return DistillMosZeroShot(DistillMosBackbone(pretrained=True), pretrained=True).eval()
