"""wav2vec2 from torchaudio's builders, with sqa's own presets beside torchaudio's."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import torch
from torch import nn

from sqa.core.extras import require
from sqa.models.ssl.base import HiddenStates, Wav2Vec2Backbone, Wav2Vec2Parts, plain, resolve_normalize
from sqa.models.ssl.interop import load_torchaudio_checkpoint

# Whether each torchaudio builder's released weights expect per-clip normalised input: exactly the
# `_normalize_waveform` of torchaudio's WAV2VEC2_* pipeline bundles (true for the layer-norm
# archs pretrained on LV-60k or XLS-R data). "tiny" is random-init test weights with no contract;
# the generic "wav2vec2_model" builder has none either, so it needs an explicit `normalize`.
TORCHAUDIO_NORMALIZE = {
    "tiny": False,
    "wav2vec2_base": False,
    "wav2vec2_large": False,
    "wav2vec2_large_lv60k": True,
    "wav2vec2_xlsr_300m": True,
    "wav2vec2_xlsr_1b": True,
    "wav2vec2_xlsr_2b": True,
}

# The "tiny" torchaudio arch: the standard 7-layer conv front end (400-sample receptive field,
# 320-sample stride) at 128 channels, and 2 pre-LN transformer layers of 256 dims.
TINY_TORCHAUDIO = {
    "extractor_mode": "layer_norm",
    "extractor_conv_layer_config": [(128, 10, 5)] + [(128, 3, 2)] * 4 + [(128, 2, 2)] * 2,
    "extractor_conv_bias": True,
    "encoder_embed_dim": 256,
    "encoder_projection_dropout": 0.0,
    "encoder_pos_conv_kernel": 128,
    "encoder_pos_conv_groups": 16,
    "encoder_num_layers": 2,
    "encoder_num_heads": 4,
    "encoder_attention_dropout": 0.0,
    "encoder_ff_interm_features": 512,
    "encoder_ff_interm_dropout": 0.0,
    "encoder_dropout": 0.0,
    "encoder_layer_norm_first": True,
    "encoder_layer_drop": 0.0,
    "aux_num_out": None,
}


def _torchaudio() -> ModuleType:
    """torchaudio, which only these backbones need (the core install leaves it out)."""
    return require("torchaudio", "wav2vec2", "torchaudio wav2vec2 backbones (TorchaudioWav2Vec2)")


def tiny(**arch_kwargs: object) -> nn.Module:
    """The random-init "tiny" arch (`TINY_TORCHAUDIO`), with `arch_kwargs` overriding it."""
    return _torchaudio().models.wav2vec2_model(**{**TINY_TORCHAUDIO, **arch_kwargs})


def torchaudio_presets() -> dict[str, Callable[..., nn.Module]]:
    """Every arch name `TorchaudioWav2Vec2` accepts: sqa's "tiny" and torchaudio's wav2vec2 builders."""
    torchaudio = _torchaudio()
    builders = {
        name: getattr(torchaudio.models, name)
        for name in dir(torchaudio.models)
        if name.startswith("wav2vec2_") and callable(getattr(torchaudio.models, name))
    }
    return {"tiny": tiny, **builders}


@dataclass
class TorchaudioConfig:
    """What rebuilds a `TorchaudioWav2Vec2`: the arch, its builder arguments and the settings."""

    arch: str
    arch_kwargs: dict
    layer: str
    freeze_feature_encoder: bool
    normalize: bool


class TorchaudioWav2Vec2(Wav2Vec2Backbone):
    """torchaudio wav2vec2: (wav (B, N), lengths (B,)) -> (frames (B, T, D), frame_lengths (B,)).

    `arch` is "tiny" (the random-init test preset `tiny`) or the name of a torchaudio builder
    ("wav2vec2_model", "wav2vec2_base", "wav2vec2_large", "wav2vec2_large_lv60k",
    "wav2vec2_xlsr_300m", ...); `arch_kwargs` go to the preset. `checkpoint` is a local
    torchaudio state_dict of that architecture: `torch.save(model.state_dict())`, or the `.pth`
    a `torchaudio.pipelines.WAV2VEC2_*` bundle keeps in torch.hub's cache (e.g.
    `~/.cache/torch/hub/checkpoints/wav2vec2_fairseq_large_lv60k.pth`). A torchaudio state_dict
    carries no input contract, so `normalize=None` follows the arch (`TORCHAUDIO_NORMALIZE`, the
    bundles' own setting: LV-60k and XLS-R normalise, base and large do not); the generic
    "wav2vec2_model" builder needs `normalize` set. The group_norm archs (wav2vec2_base,
    wav2vec2_large) are not batch-invariant: their first layer's GroupNorm normalises over time,
    padding included.
    """

    def __init__(
        self,
        arch: str = "tiny",
        arch_kwargs: dict | None = None,
        checkpoint: str | None = None,
        layer: str = "last",
        freeze_feature_encoder: bool = True,
        normalize: bool | None = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        arch_kwargs = plain(arch_kwargs) or {}
        presets = torchaudio_presets()
        if arch not in presets:
            raise ValueError(f"arch must be one of {sorted(presets)}, got {arch!r}")
        model = presets[arch](**arch_kwargs)
        normalize = resolve_normalize(
            normalize,
            TORCHAUDIO_NORMALIZE.get(arch),
            "TorchaudioWav2Vec2",
            f"torchaudio arch {arch!r}",
            recorded=False,
        )
        if checkpoint is not None:
            load_torchaudio_checkpoint(model, checkpoint, arch)
        transformer = model.encoder.transformer
        parts = Wav2Vec2Parts(
            model=model,
            feature_encoder=model.feature_extractor,
            conv_layers=[(block.kernel_size, block.stride) for block in model.feature_extractor.conv_layers],
            output_dim=transformer.layer_norm.normalized_shape[0],
            transformer_layers=transformer.layers,
        )
        config = TorchaudioConfig(arch, arch_kwargs, layer, freeze_feature_encoder, normalize)
        self._attach(parts, config, gradient_checkpointing)

    def _hidden_states(self, wav: torch.Tensor, lengths: torch.Tensor) -> HiddenStates:
        hidden, frame_lengths = self.model.extract_features(wav, lengths)
        transformer = self.model.encoder.transformer
        if not transformer.layer_norm_first:
            # For post-LN archs torchaudio's forward() applies the encoder LayerNorm after the
            # last layer; extract_features() returns the layer outputs without it.
            hidden[-1] = transformer.layer_norm(hidden[-1])
        return hidden, frame_lengths
