"""The plumbing every wav2vec2 source shares.

Input normalisation, padding, layer selection, feature-encoder freezing and gradient
checkpointing, done the same way for every library. A source module builds the library's model,
describes it with `Wav2Vec2Parts`, and implements `_hidden_states`; `Wav2Vec2Backbone` does the
rest.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils.checkpoint
from torch import nn

from sqa.core.masking import frame_mask, masked_standardize
from sqa.models.config import Exportable

# Loggers of the source modules are children of this one, so callers configure one name.
log = logging.getLogger("sqa.models.ssl")

LAYER_CHOICES = ("last", "weighted")
# What a source's `_hidden_states` returns: one (B, T, D) output per transformer layer, and the
# valid frame count per clip (B,).
HiddenStates = tuple[list[torch.Tensor], torch.Tensor]


def receptive_field(layers: list[tuple[int, int]]) -> int:
    """Return how many samples one output frame of (kernel, stride) convolutions sees."""
    field, jump = 1, 1
    for kernel, stride in layers:
        field += (kernel - 1) * jump
        jump *= stride
    return field


def normalize_waveform(wav: torch.Tensor, lengths: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """Zero mean, unit variance per clip over its valid samples; wav (B, N) -> (B, N), padding 0.

    The statistics use only the first `lengths[b]` samples, unlike `F.layer_norm` over the padded
    row, so a clip is normalised the same alone and inside a batch. With the default `eps` it is
    fairseq's (and s3prl's) `F.layer_norm(wav, wav.shape)` of each unpadded clip.
    """
    return masked_standardize(wav, lengths, eps)


def resolve_normalize(
    normalize: bool | None, found: bool | None, where: str, source: str, recorded: bool = True
) -> bool:
    """The input contract to use: `normalize` when set, else `found` (what `source` says); logged.

    A set value that contradicts a contract the checkpoint `recorded` is used, with a warning (an
    arch's default is overridden silently: exports store their value); neither a value nor a
    contract to read is an error naming `where`.
    """
    if normalize is None:
        if found is None:
            raise ValueError(
                f"{where}: {source} does not say whether the model expects per-clip normalised "
                "input; set normalize: true or false"
            )
        value, origin = bool(found), source
    else:
        value, origin = bool(normalize), "set explicitly"
        if recorded and found is not None and bool(found) != value:
            log.warning("%s: normalize=%s overrides %s, which says %s", where, value, source, found)
    log.info("%s: normalize=%s (%s)", where, value, origin)
    return value


def plain(value: Any) -> Any:
    """Deep-copy `value`, turning OmegaConf containers (from Hydra) into dicts and lists."""
    # Only Hydra passes OmegaConf containers; a core install scoring an export has no omegaconf.
    if type(value).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(value, resolve=True)
    return copy.deepcopy(value)


class LayerSelect(nn.Module):
    """Last layer output, or a learned softmax-weighted sum of all layers (each (B, T, D))."""

    def __init__(self, layer: str, num_layers: int) -> None:
        super().__init__()
        if layer not in LAYER_CHOICES:
            raise ValueError(f"layer must be one of {LAYER_CHOICES}, got {layer!r}")
        self.layer = layer
        # Zeros give every layer the same softmax weight at the start of training.
        self.weights = nn.Parameter(torch.zeros(num_layers)) if layer == "weighted" else None

    def forward(self, hidden: list[torch.Tensor]) -> torch.Tensor:
        """List of L layer outputs (B, T, D) -> (B, T, D)."""
        if self.weights is None:
            return hidden[-1]
        if len(hidden) != self.weights.numel():
            raise ValueError(f"expected {self.weights.numel()} layer outputs, got {len(hidden)}")
        weights = torch.softmax(self.weights, dim=0).to(hidden[0].dtype)
        return torch.einsum("l,lbtd->btd", weights, torch.stack(hidden))


def _checkpointed(layer: nn.Module, forward: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run `forward` under activation checkpointing while `layer` trains with autograd on."""
    if layer.training and torch.is_grad_enabled():
        return torch.utils.checkpoint.checkpoint(forward, *args, use_reentrant=False, **kwargs)
    return forward(*args, **kwargs)


def checkpoint_layers(layers: nn.ModuleList) -> None:
    """Make every module of `layers` checkpoint its activations in training, in place.

    The instance's `forward` is replaced, not the module wrapped, so parameter names (and
    state_dicts, exports, `init_from`) stay those of the library's model.
    """
    for layer in layers:
        layer.forward = functools.partial(_checkpointed, layer, layer.forward)


@dataclass
class Wav2Vec2Parts:
    """Where a library's wav2vec2 keeps what the shared plumbing needs.

    `conv_layers` are the feature encoder's (kernel, stride) pairs, `output_dim` the transformer
    width, `transformer_layers` the layers whose outputs `_hidden_states` returns.
    """

    model: nn.Module
    feature_encoder: nn.Module
    conv_layers: list[tuple[int, int]]
    output_dim: int
    transformer_layers: nn.ModuleList


class Wav2Vec2Backbone(Exportable, nn.Module):
    """Shared forward of the wav2vec2 sources: padding, normalisation, layer selection, masking.

    A subclass builds its library's model, calls `_attach`, and implements `_hidden_states`: one
    (B, T, D) tensor per transformer layer, the last one equal to the library's final encoder
    output (with the final LayerNorm of pre-LN archs), and the library's own valid frame count
    per clip. Its config dataclass has the fields `layer`, `freeze_feature_encoder` and
    `normalize` besides its own.
    """

    public_module = "sqa.models.ssl"
    model: nn.Module
    output_dim: int
    min_samples: int
    hop_length: int
    normalize: bool
    select: LayerSelect
    # Whether the feature encoder normalises over time (GroupNorm), which sees a clip's padding.
    padding_sensitive: bool
    # The variance floor of the library's own input normalisation (fairseq: F.layer_norm's).
    normalize_eps: float = 1e-5

    def _attach(self, parts: Wav2Vec2Parts, config: Any, gradient_checkpointing: bool) -> None:
        """Adopt the library model in `parts` with the selection settings of `config`."""
        self.config = config
        self.model = parts.model
        self.output_dim = parts.output_dim
        self.min_samples = receptive_field(parts.conv_layers)
        self.hop_length = math.prod(stride for _, stride in parts.conv_layers)
        # wav2vec2 base and large (not large-lv60k, not XLS-R) normalise the first convolution's
        # output over time with GroupNorm: its statistics include any padding after the clip.
        self.padding_sensitive = any(isinstance(m, nn.GroupNorm) for m in parts.feature_encoder.modules())
        self.normalize = config.normalize
        self.select = LayerSelect(config.layer, len(parts.transformer_layers))
        # Libraries hand models back in different modes (from_pretrained: eval); follow ours.
        parts.model.train(self.training)
        # Fine-tuning recipes keep the convolutional feature encoder fixed: a few thousand clips
        # are too few to retrain it, and it saves its backward pass.
        parts.feature_encoder.requires_grad_(not config.freeze_feature_encoder)
        if gradient_checkpointing:
            checkpoint_layers(parts.transformer_layers)

    def _hidden_states(self, wav: torch.Tensor, lengths: torch.Tensor) -> HiddenStates:
        raise NotImplementedError

    def forward(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Map wav (B, N), lengths (B,) to frames (B, T, output_dim), frame_lengths (B,).

        Out of training, a padding-sensitive encoder (`padding_sensitive`) runs each group of
        equal-length clips as its own batch, without padding, so a clip's frames are those it gets
        alone whatever its batch. Training keeps the padded batch (one forward pass).
        """
        if self.training or not self.padding_sensitive:
            return self._forward_padded(wav, lengths)
        groups = [(int(n), torch.nonzero(lengths == n).flatten()) for n in torch.unique(lengths)]
        outputs = [(rows, *self._forward_padded(wav[rows, :n], lengths[rows])) for n, rows in groups]
        frames = wav.new_zeros(wav.shape[0], max(f.shape[1] for _, f, _ in outputs), self.output_dim)
        frame_lengths = torch.zeros_like(lengths)
        for rows, group_frames, group_lengths in outputs:
            frames = frames.to(group_frames.dtype)
            frames[rows, : group_frames.shape[1]] = group_frames
            frame_lengths[rows] = group_lengths.to(frame_lengths.dtype)
        return frames, frame_lengths

    def _forward_padded(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The library's forward on one zero-padded batch: frames (B, T, D), frame_lengths (B,)."""
        if self.normalize:
            wav = normalize_waveform(wav, lengths, self.normalize_eps)
        # A clip shorter than the receptive field is zero-padded to it, so it still gets a frame.
        wav = nn.functional.pad(wav, (0, max(0, self.min_samples - wav.shape[1])))
        lengths = lengths.clamp_min(self.min_samples)
        hidden, frame_lengths = self._hidden_states(wav, lengths)
        frames = self.select(hidden)
        keep = frame_mask(frame_lengths, frames.shape[1])[..., None]
        return frames * keep.to(frames.dtype), frame_lengths
