"""wav2vec2-family SSL backbones from torchaudio, s3prl, fairseq2 and transformers.

Every class follows the interface of `sqa.models.backbone`: `(wav (B, N), lengths (B,)) ->
(frames (B, T, D), frame_lengths (B,))`, `output_dim`, `min_samples` and `export_config()`. Weights
load from local files only; nothing here downloads. Each library's own padding mask is used, so a
clip's frames are the same alone and inside a zero-padded batch, except for archs whose first
convolution is followed by GroupNorm over time (wav2vec2 base and large, not large-lv60k): that
norm sees the padding by construction. Every library's LayerDrop and SpecAugment-style masking
are off: a dropped layer would make the layer selection random, and the SSL-MOS recipe fine-tunes
without masking.

`gradient_checkpointing=True` recomputes each transformer layer's activations in the backward
pass instead of keeping them (less memory, about one more forward pass of time), in training
only. It changes neither the outputs nor the state_dict keys, so it is a training setting and not
part of `export_config()`: an exported model is rebuilt without it and scores the same.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import enum
import functools
import inspect
import json
import logging
import pickle
import re
import sys
import types
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import torch
import torch.utils.checkpoint
import torchaudio
from omegaconf import DictConfig, ListConfig, OmegaConf
from torch import nn

from sqa.masking import frame_mask

log = logging.getLogger(__name__)

LAYER_CHOICES = ("last", "weighted")

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
# The same for fairseq2's wav2vec2 archs, whose checkpoints carry no input contract: "base" and
# "large" are fairseq's LibriSpeech models (wav2vec_small.pt, libri960_big.pt: normalize=False),
# "large_lv60k" is wav2vec_vox_new.pt (normalize=True).
FAIRSEQ2_NORMALIZE = {"base": False, "large": False, "large_lv60k": True}

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

# s3prl hub entries that take a user-given checkpoint instead of naming a released model.
_S3PRL_GENERIC_ENTRIES = ("wav2vec2_custom", "wav2vec2_local", "wav2vec2_url")

# fairseq's single positional convolution, "encoder.pos_conv.0.{weight_g,weight_v,bias}".
_FAIRSEQ_POS_CONV = re.compile(r"^encoder\.pos_conv\.0\.(?=[a-z])")


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
    mask = frame_mask(lengths, wav.shape[1]).to(wav.dtype)
    count = lengths.to(wav.dtype)[:, None]
    mean = (wav * mask).sum(dim=1, keepdim=True) / count
    var = (((wav - mean) * mask) ** 2).sum(dim=1, keepdim=True) / count
    return (wav - mean) / torch.sqrt(var + eps) * mask


def patch_torchaudio_for_s3prl() -> None:
    """Let s3prl 0.4.18 import under torchaudio >= 2.9, which removed two APIs it uses at import.

    `s3prl.nn`, `s3prl.hub` and its data modules call `torchaudio.set_audio_backend(...)` and
    import `torchaudio.sox_effects` when imported. Audio I/O in sqa goes through soundfile, so a
    no-op backend setter and a `sox_effects` stub whose functions raise are enough. Each piece is
    installed only where torchaudio lacks it, so the shim is a no-op on older torchaudio.
    """
    if not hasattr(torchaudio, "set_audio_backend"):
        torchaudio.set_audio_backend = lambda backend: None
    if "torchaudio.sox_effects" not in sys.modules and not hasattr(torchaudio, "sox_effects"):
        stub = types.ModuleType("torchaudio.sox_effects")

        def removed(*args: Any, **kwargs: Any) -> None:
            raise RuntimeError("torchaudio.sox_effects was removed in torchaudio 2.9")

        stub.apply_effects_tensor = removed
        stub.apply_effects_file = removed
        sys.modules["torchaudio.sox_effects"] = stub
        torchaudio.sox_effects = stub


def _plain(value: Any) -> Any:
    """Deep-copy `value`, turning OmegaConf containers (from Hydra) into dicts and lists."""
    if isinstance(value, DictConfig | ListConfig):
        return OmegaConf.to_container(value, resolve=True)
    return copy.deepcopy(value)


def _existing(path: str | Path, what: str) -> Path:
    """`path` as a Path, or FileNotFoundError naming it and what was expected there."""
    path = Path(path).expanduser()
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist; expected {what}")
    return path


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


class _Wav2Vec2Backbone(nn.Module):
    """Shared forward of the wav2vec2 sources: padding, normalisation, layer selection, masking.

    A subclass sets `model`, `output_dim`, `min_samples`, `normalize` and `select`, and
    implements `_hidden_states`: one (B, T, D) tensor per transformer layer, the last one equal to
    the library's final encoder output (with the final LayerNorm of pre-LN archs), and the
    library's own valid frame count per clip.
    """

    model: nn.Module
    output_dim: int
    min_samples: int
    normalize: bool
    select: LayerSelect
    # The variance floor of the library's own input normalisation (fairseq: F.layer_norm's).
    normalize_eps: float = 1e-5

    def _hidden_states(
        self, wav: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        raise NotImplementedError

    def forward(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Map wav (B, N), lengths (B,) to frames (B, T, output_dim), frame_lengths (B,)."""
        if self.normalize:
            wav = normalize_waveform(wav, lengths, self.normalize_eps)
        # A clip shorter than the receptive field is zero-padded to it, so it still gets a frame.
        wav = nn.functional.pad(wav, (0, max(0, self.min_samples - wav.shape[1])))
        lengths = lengths.clamp_min(self.min_samples)
        hidden, frame_lengths = self._hidden_states(wav, lengths)
        frames = self.select(hidden)
        keep = frame_mask(frame_lengths, frames.shape[1])[..., None]
        return frames * keep.to(frames.dtype), frame_lengths

    def _setup(
        self,
        model: nn.Module,
        feature_encoder: nn.Module,
        conv_layers: list[tuple[int, int]],
        output_dim: int,
        num_layers: int,
        layer: str,
        freeze_feature_encoder: bool,
        normalize: bool,
        transformer_layers: nn.ModuleList,
        gradient_checkpointing: bool,
    ) -> None:
        self.model = model
        self.output_dim = output_dim
        self.min_samples = receptive_field(conv_layers)
        self.normalize = normalize
        self.select = LayerSelect(layer, num_layers)
        # Libraries hand models back in different modes (from_pretrained: eval); follow ours.
        model.train(self.training)
        # Fine-tuning recipes keep the convolutional feature encoder fixed: a few thousand clips
        # are too few to retrain it, and it saves its backward pass.
        feature_encoder.requires_grad_(not freeze_feature_encoder)
        if gradient_checkpointing:
            checkpoint_layers(transformer_layers)


class TorchaudioWav2Vec2(_Wav2Vec2Backbone):
    """torchaudio wav2vec2: (wav (B, N), lengths (B,)) -> (frames (B, T, D), frame_lengths (B,)).

    `arch` is "tiny" (the random-init test config `TINY_TORCHAUDIO`, built with
    `torchaudio.models.wav2vec2_model`) or the name of a torchaudio builder ("wav2vec2_model",
    "wav2vec2_base", "wav2vec2_large", "wav2vec2_large_lv60k", "wav2vec2_xlsr_300m", ...);
    `arch_kwargs` go to the builder (for "tiny" they override `TINY_TORCHAUDIO`). `checkpoint`
    is a local torchaudio state_dict of that architecture: `torch.save(model.state_dict())`, or
    the `.pth` a `torchaudio.pipelines.WAV2VEC2_*` bundle keeps in torch.hub's cache (e.g.
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
        arch_kwargs = _plain(arch_kwargs) or {}
        model = self._build(arch, arch_kwargs)
        normalize = resolve_normalize(
            normalize,
            TORCHAUDIO_NORMALIZE.get(arch),
            "TorchaudioWav2Vec2",
            f"torchaudio arch {arch!r}",
            recorded=False,
        )
        self._config = {
            "arch": arch,
            "arch_kwargs": arch_kwargs,
            "layer": layer,
            "freeze_feature_encoder": freeze_feature_encoder,
            "normalize": normalize,
        }
        if checkpoint is not None:
            _load_torchaudio_checkpoint(model, checkpoint, arch)
        blocks = model.feature_extractor.conv_layers
        transformer = model.encoder.transformer
        self._setup(
            model,
            model.feature_extractor,
            [(block.kernel_size, block.stride) for block in blocks],
            transformer.layer_norm.normalized_shape[0],
            len(transformer.layers),
            layer,
            freeze_feature_encoder,
            normalize,
            transformer.layers,
            gradient_checkpointing,
        )

    @staticmethod
    def _build(arch: str, arch_kwargs: dict) -> nn.Module:
        if arch == "tiny":
            return torchaudio.models.wav2vec2_model(**{**TINY_TORCHAUDIO, **arch_kwargs})
        builders = {
            name: getattr(torchaudio.models, name)
            for name in dir(torchaudio.models)
            if name.startswith("wav2vec2_") and callable(getattr(torchaudio.models, name))
        }
        if arch not in builders:
            raise ValueError(f"arch must be 'tiny' or one of {sorted(builders)}, got {arch!r}")
        return builders[arch](**arch_kwargs)

    def _hidden_states(
        self, wav: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        hidden, frame_lengths = self.model.extract_features(wav, lengths)
        transformer = self.model.encoder.transformer
        if not transformer.layer_norm_first:
            # For post-LN archs torchaudio's forward() applies the encoder LayerNorm after the
            # last layer; extract_features() returns the layer outputs without it.
            hidden[-1] = transformer.layer_norm(hidden[-1])
        return hidden, frame_lengths

    def export_config(self) -> dict:
        """Hydra config rebuilding this backbone's architecture (random init, no checkpoint)."""
        return {"_target_": f"{__name__}.TorchaudioWav2Vec2", **copy.deepcopy(self._config)}


def _load_torchaudio_checkpoint(model: nn.Module, checkpoint: str, arch: str) -> None:
    path = _existing(checkpoint, f"a torchaudio wav2vec2 state_dict file for arch {arch!r}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise ValueError(
            f"{path} is not a torch.save(model.state_dict()) file of a torchaudio wav2vec2: {error}"
        ) from error
    if not isinstance(state, Mapping):
        raise ValueError(f"{path} holds a {type(state).__name__}, expected a torchaudio state_dict")
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"{path} does not match torchaudio arch {arch!r}: {error}") from error


class S3prlWav2Vec2(_Wav2Vec2Backbone):
    """s3prl wav2vec2: (wav (B, N), lengths (B,)) -> (frames (B, T, D), frame_lengths (B,)).

    Weights come from `checkpoint`, a local s3prl-converted wav2vec2 file (a torch dict with
    "model_cfg", "task_cfg" and "model_weight", as written by
    `s3prl.upstream.wav2vec2.convert.load_and_convert_fairseq_ckpt`), or from `upstream`, the
    name of an s3prl wav2vec2 hub entry (e.g. "wav2vec2_large_ll60k") whose converted checkpoint
    is already in s3prl's download cache (`s3prl.util.download.get_dir()`); a missing file is an
    error, never a download. `model_config`/`task_config` rebuild the architecture without weights
    (that is what `export_config()` stores). `normalize=None` follows the task config's
    `normalize` (fairseq's default, false, when it has none), as s3prl's own wav2vec2 expert does.
    """

    def __init__(
        self,
        checkpoint: str | None = None,
        upstream: str | None = None,
        model_config: dict | None = None,
        task_config: dict | None = None,
        layer: str = "last",
        freeze_feature_encoder: bool = True,
        normalize: bool | None = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        patch_torchaudio_for_s3prl()
        from s3prl.upstream.utils import merge_with_parent
        from s3prl.upstream.wav2vec2.wav2vec2_model import (
            AudioPretrainingConfig,
            Wav2Vec2Config,
            Wav2Vec2Model,
        )

        if sum(x is not None for x in (checkpoint, upstream, model_config)) != 1:
            raise ValueError("give exactly one of checkpoint, upstream or model_config")
        weights = None
        if upstream is not None:
            checkpoint = str(_s3prl_cached_checkpoint(upstream))
        if checkpoint is not None:
            model_config, task_config, weights = _read_s3prl_checkpoint(checkpoint)
        model_config, task_config = _plain(model_config), _plain(task_config) or {}
        # s3prl's merge_with_parent drops keys its dataclasses do not know (fairseq configs carry
        # many training-only ones) and rejects an empty dict.
        task = merge_with_parent(AudioPretrainingConfig, {"normalize": False, **task_config})
        model = Wav2Vec2Model(merge_with_parent(Wav2Vec2Config, model_config))
        if weights is not None:
            try:
                model.load_state_dict(weights)
            except RuntimeError as error:
                raise ValueError(f"{checkpoint} weights do not match its model_cfg: {error}") from error
        # As s3prl's wav2vec2 expert does: LayerDrop would make the layer selection random.
        model.encoder.layerdrop = 0.0
        where = f"S3prlWav2Vec2 ({checkpoint})" if checkpoint is not None else "S3prlWav2Vec2"
        # fairseq's own default (AudioPretrainingConfig.normalize=False) when task_cfg omits it.
        normalize = resolve_normalize(normalize, task.normalize, where, "the s3prl task_cfg")
        self._config = {
            "model_config": model_config,
            "task_config": task_config,
            "layer": layer,
            "freeze_feature_encoder": freeze_feature_encoder,
            "normalize": normalize,
        }
        convs = [block[0] for block in model.feature_extractor.conv_layers]
        self._setup(
            model,
            model.feature_extractor,
            [(conv.kernel_size[0], conv.stride[0]) for conv in convs],
            model.encoder.embedding_dim,
            len(model.encoder.layers),
            layer,
            freeze_feature_encoder,
            normalize,
            model.encoder.layers,
            gradient_checkpointing,
        )

    def _hidden_states(
        self, wav: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        padding_mask = ~frame_mask(lengths, wav.shape[1])
        result = self.model.extract_features(wav, padding_mask, mask=False)
        # layer_results hold (output, attention, pre-residual) per layer, time first.
        hidden = [output.transpose(0, 1) for output, _, _ in result["layer_results"]]
        # The encoder output adds the final LayerNorm of pre-LN (layer_norm_first) models.
        hidden[-1] = result["x"]
        return hidden, self.model._get_feat_extract_output_lengths(lengths).long()

    def export_config(self) -> dict:
        """Hydra config rebuilding this backbone's architecture (random init, no checkpoint)."""
        return {"_target_": f"{__name__}.S3prlWav2Vec2", **copy.deepcopy(self._config)}


def s3prl_upstream_names() -> list[str]:
    """Names of the s3prl wav2vec2 hub entries that `S3prlWav2Vec2(upstream=...)` accepts."""
    from s3prl.upstream.wav2vec2 import hubconf

    return sorted(
        name
        for name, entry in inspect.getmembers(hubconf, inspect.isfunction)
        if entry.__module__ == hubconf.__name__
        and not name.startswith("_")
        and name not in _S3PRL_GENERIC_ENTRIES
    )


def _s3prl_cached_checkpoint(upstream: str) -> Path:
    """Find hub entry `upstream`'s converted checkpoint in s3prl's cache; never download it."""
    patch_torchaudio_for_s3prl()
    from s3prl.upstream.wav2vec2 import hubconf
    from s3prl.util.download import urls_to_filepaths

    names = s3prl_upstream_names()
    if upstream not in names:
        raise ValueError(f"upstream must be one of the s3prl wav2vec2 entries {names}, got {upstream!r}")
    # s3prl keeps each entry's URL inside its hub function, which would download it; intercepting
    # the wav2vec2_custom call it ends in reads the URL without loading anything.
    urls: list[str] = []
    with mock.patch.object(hubconf, "wav2vec2_custom", lambda **kwargs: urls.append(kwargs["ckpt"])):
        getattr(hubconf, upstream)()
    path = Path(urls_to_filepaths(urls[0], download=False))
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} does not exist: s3prl upstream {upstream!r} is not in the local s3prl cache "
            f"({path.parent}). Download {urls[0]} to that path on a machine with network access, "
            "or pass checkpoint= a local s3prl-converted wav2vec2 file."
        )
    return path


def s3prl_configs(checkpoint: str | None = None, upstream: str | None = None) -> tuple[dict, dict]:
    """(model_cfg, task_cfg) of an s3prl-converted wav2vec2 file, local or in s3prl's cache.

    `checkpoint` is a local file; `upstream` names an s3prl wav2vec2 entry whose converted file
    is already in s3prl's cache (never downloaded).
    """
    if (checkpoint is None) == (upstream is None):
        raise ValueError("give exactly one of checkpoint or upstream")
    path = str(_s3prl_cached_checkpoint(upstream)) if checkpoint is None else checkpoint
    model_cfg, task_cfg, _ = _read_s3prl_checkpoint(path)
    return model_cfg, task_cfg


def _read_s3prl_checkpoint(checkpoint: str) -> tuple[dict, dict, dict]:
    """(model_cfg, task_cfg, model_weight) of an s3prl-converted wav2vec2 checkpoint."""
    expected = "an s3prl-converted wav2vec2 checkpoint (a dict with model_cfg, task_cfg, model_weight)"
    path = _existing(checkpoint, expected)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError) as error:
        raise ValueError(f"{path} cannot be read as {expected}: {error}") from error
    required = {"model_cfg", "task_cfg", "model_weight"}
    if not isinstance(state, Mapping) or not required <= state.keys():
        found = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"{path} is not {expected}; found {found}")
    return dict(state["model_cfg"]), dict(state["task_cfg"]), state["model_weight"]


class Fairseq2Wav2Vec2(_Wav2Vec2Backbone):
    """fairseq2 wav2vec2: (wav (B, N), lengths (B,)) -> (frames (B, T, D), frame_lengths (B,)).

    `arch` is a fairseq2 wav2vec2 arch ("base", "large", "large_lv60k"), `config_overrides` a
    nested dict applied to its `Wav2Vec2Config` (e.g. {"encoder_config": {"num_encoder_layers":
    2}}). `checkpoint` is whatever fairseq2 loads for a wav2vec2 model: a fairseq2 training
    checkpoint's model directory (`<output>/checkpoints/step_N/model`, holding
    pp_00/tp_00/sdp_00.pt), a single `.pt` file with the (fairseq2) state dict under "model" such
    as the `wav2vec2_fs2_*.pt` files of fairseq2's asset cards, a safetensors file, or an original
    fairseq wav2vec2 `.pt` (converted with fairseq2's `convert_wav2vec2_state_dict`). Files are
    unpickled with `weights_only=True`; `argparse.Namespace` (the "args" of older fairseq
    checkpoints) is the one extra type allowed. `normalize=None` reads the input contract from an
    original fairseq checkpoint (`args.normalize` or `cfg["task"]["normalize"]`); fairseq2's own
    checkpoints carry none, so it follows the arch (`FAIRSEQ2_NORMALIZE`).
    """

    def __init__(
        self,
        checkpoint: str | None = None,
        arch: str = "large_lv60k",
        config_overrides: dict | None = None,
        layer: str = "last",
        freeze_feature_encoder: bool = True,
        normalize: bool | None = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        from fairseq2.device import CPU
        from fairseq2.models.wav2vec2 import get_wav2vec2_model_hub

        hub = get_wav2vec2_model_hub()
        if arch not in hub.get_archs():
            raise ValueError(f"arch must be one of {sorted(hub.get_archs())}, got {arch!r}")
        config_overrides = _plain(config_overrides) or {}
        config = hub.get_arch_config(arch)
        _override(config, config_overrides, "Wav2Vec2Config")
        # fairseq2 refuses layer-output hooks while LayerDrop is active.
        config.encoder_config.layer_drop_p = 0.0
        model = hub.create_new_model(config, device=CPU)
        found, source, recorded = FAIRSEQ2_NORMALIZE.get(arch), f"fairseq2 arch {arch!r}", False
        if checkpoint is not None and _load_fairseq2_checkpoint(hub, model, config, checkpoint, arch):
            in_file = _fairseq_task_normalize(Path(checkpoint).expanduser())
            if in_file is not None:
                found, source, recorded = in_file, f"the fairseq checkpoint {checkpoint}", True
        normalize = resolve_normalize(normalize, found, "Fairseq2Wav2Vec2", source, recorded)
        self._config = {
            "arch": arch,
            "config_overrides": config_overrides,
            "layer": layer,
            "freeze_feature_encoder": freeze_feature_encoder,
            "normalize": normalize,
        }
        encoder_config = config.encoder_config
        descs = encoder_config.feature_extractor_layer_descs
        self._setup(
            model,
            model.encoder_frontend.feature_extractor,
            [(kernel, stride) for _, kernel, stride in descs],
            encoder_config.model_dim,
            encoder_config.num_encoder_layers,
            layer,
            freeze_feature_encoder,
            normalize,
            model.encoder.layers,
            gradient_checkpointing,
        )

    def _hidden_states(
        self, wav: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        from fairseq2.nn import BatchLayout

        hidden: list[torch.Tensor] = []

        def keep(layer_idx: int, output: torch.Tensor, layout: BatchLayout, num_layers: int) -> bool:
            hidden.append(output)
            return True

        # The frontend's forward extracts and projects features without the pretraining masker.
        seqs, layout = self.model.encoder_frontend(wav, BatchLayout.of(wav, lengths.tolist()))
        handle = self.model.encoder.register_layer_hook(keep)
        try:
            final = self.model.encoder(seqs, layout)
        finally:
            handle.remove()
        # The encoder output adds the final LayerNorm of pre-LN archs to the last layer's output.
        hidden[-1] = final
        return hidden, torch.tensor(layout.seq_lens, device=wav.device)

    def export_config(self) -> dict:
        """Hydra config rebuilding this backbone's architecture (random init, no checkpoint)."""
        return {"_target_": f"{__name__}.Fairseq2Wav2Vec2", **copy.deepcopy(self._config)}


def _override(config: Any, overrides: Mapping, where: str) -> None:
    """Set the fields in nested dict `overrides` on dataclass `config`, in place."""
    fields = {field.name for field in dataclasses.fields(config)}
    for key, value in overrides.items():
        if key not in fields:
            raise ValueError(f"{where} has no field {key!r}; fields: {sorted(fields)}")
        current = getattr(config, key)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            _override(current, value, f"{where}.{key}")
        elif isinstance(current, enum.Enum) and isinstance(value, str):
            # Hydra configs name enum members, e.g. norm_order: PRE.
            setattr(config, key, type(current)[value])
        else:
            setattr(config, key, value)


def _load_fairseq2_checkpoint(hub: Any, model: nn.Module, config: Any, checkpoint: str, arch: str) -> bool:
    """Load `checkpoint` into `model`; True when it was an original fairseq checkpoint."""
    from fairseq2.model_checkpoint import CorruptModelCheckpointError

    expected = (
        "a fairseq2 wav2vec2 checkpoint (model directory with pp_00/, .pt/.pth/.bin or "
        f".safetensors file) or an original fairseq wav2vec2 .pt, for arch {arch!r}"
    )
    path = _existing(checkpoint, expected)
    try:
        # fairseq2's loaders read every format it knows and apply its state dict converter.
        with torch.serialization.safe_globals([argparse.Namespace]):
            state = dict(hub.iter_checkpoint(path, config))
    except CorruptModelCheckpointError as error:
        raise ValueError(
            f"{path} is not {expected}: {error} An original fairseq .pt that "
            "pickles other Python objects can be reduced to its weights from a trusted copy: "
            "torch.save({'model': torch.load(path, weights_only=False)['model']}, 'weights.pt')"
        ) from error
    original = "mask_emb" in state
    if original:
        state = _convert_fairseq_state_dict(state, config)
    try:
        model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"{path} does not match fairseq2 arch {arch!r}: {error}") from error
    return original


def _fairseq_task_normalize(path: Path) -> bool | None:
    """`normalize` of an original fairseq checkpoint's task: its argparse `args` or `cfg["task"]`.

    None when the file records neither (e.g. weights reduced to {"model": ...}).
    """
    with torch.serialization.safe_globals([argparse.Namespace]):
        try:
            # mmap reads only the pickled header, not the weights, from zip-format files.
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:
            state = torch.load(path, map_location="cpu", weights_only=True)
    args, cfg = state.get("args"), state.get("cfg")
    if args is not None and hasattr(args, "normalize"):
        return bool(args.normalize)
    if isinstance(cfg, Mapping) and isinstance(cfg.get("task"), Mapping) and "normalize" in cfg["task"]:
        return bool(cfg["task"]["normalize"])
    return None


def _convert_fairseq_state_dict(state: dict[str, Any], config: Any) -> dict[str, Any]:
    """Rename an original fairseq wav2vec2 state dict to fairseq2 keys with fairseq2's converter.

    fairseq2 0.8.1's `convert_wav2vec2_state_dict` recognises a fairseq state dict by a
    "mask_emb.weight" key, but fairseq stores its mask embedding as the bare parameter
    "mask_emb", and it has no rule for the single positional convolution
    ("encoder.pos_conv.0.*") of the released wav2vec2 models. Both are bridged around the call.
    """
    from fairseq2.models.wav2vec2 import convert_wav2vec2_state_dict

    renamed = {}
    for key, value in state.items():
        if key == "mask_emb":
            key = "mask_emb.weight"
        renamed[_FAIRSEQ_POS_CONV.sub("encoder_frontend.pos_encoder.conv.", key)] = value
    converted = convert_wav2vec2_state_dict(renamed, config)
    converted["masker.temporal_mask_embed"] = converted.pop("masker.temporal_mask_embed.weight")
    return converted


class TransformersWav2Vec2(_Wav2Vec2Backbone):
    """transformers wav2vec2: (wav (B, N), lengths (B,)) -> (frames (B, T, D), frame_lengths (B,)).

    `path` is a local directory written by `save_pretrained` (config.json plus weights), read
    with `local_files_only=True`; `config` is a `Wav2Vec2Config` dict that builds the
    architecture with random weights (what `export_config()` stores). As the library's feature
    extractor does, an attention mask is passed only to models with
    `feat_extract_norm="layer"`; "group" models (e.g. wav2vec2-base) get zero-padded input
    without one and are not batch-invariant. `normalize=None` follows `do_normalize` of the
    directory's `preprocessor_config.json` (the library's feature extractor); a directory
    without one, or a `config`, needs `normalize` set.
    """

    # Wav2Vec2FeatureExtractor's zero_mean_unit_var_norm.
    normalize_eps = 1e-7

    def __init__(
        self,
        path: str | None = None,
        config: dict | None = None,
        layer: str = "last",
        freeze_feature_encoder: bool = True,
        normalize: bool | None = None,
        gradient_checkpointing: bool = False,
    ) -> None:
        super().__init__()
        from transformers import Wav2Vec2Config, Wav2Vec2Model

        if (path is None) == (config is None):
            raise ValueError("give exactly one of path or config")
        # Runtime settings, not architecture: SpecAugment masking and LayerDrop stay off.
        runtime = {"apply_spec_augment": False, "layerdrop": 0.0}
        if path is not None:
            model = _load_transformers_dir(Wav2Vec2Model, path, runtime)
            where, source = f"TransformersWav2Vec2 ({path})", f"{path}/preprocessor_config.json"
            normalize = resolve_normalize(normalize, _do_normalize(Path(path)), where, source)
        else:
            model = Wav2Vec2Model(Wav2Vec2Config(**{**_plain(config), **runtime}))
            normalize = resolve_normalize(normalize, None, "TransformersWav2Vec2", "a config")
        if model.config.add_adapter:
            raise ValueError("wav2vec2 models with an adapter (add_adapter=True) are not supported")
        exported = model.config.to_dict()
        # from_pretrained records the directory it read; the export must not point at it.
        exported.pop("_name_or_path", None)
        self._config = {
            "config": exported,
            "layer": layer,
            "freeze_feature_encoder": freeze_feature_encoder,
            "normalize": normalize,
        }
        if freeze_feature_encoder:
            # transformers' own switch: besides the parameters, it stops the feature encoder
            # from making its input require grad (a backward pass through the frozen convs).
            model.freeze_feature_encoder()
        cfg = model.config
        self._setup(
            model,
            model.feature_extractor,
            list(zip(cfg.conv_kernel, cfg.conv_stride, strict=True)),
            cfg.hidden_size,
            cfg.num_hidden_layers,
            layer,
            freeze_feature_encoder,
            normalize,
            model.encoder.layers,
            gradient_checkpointing,
        )

    def _hidden_states(
        self, wav: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[list[torch.Tensor], torch.Tensor]:
        attention_mask = None
        if self.model.config.feat_extract_norm == "layer":
            attention_mask = frame_mask(lengths, wav.shape[1]).long()
        output = self.model(wav, attention_mask=attention_mask, output_hidden_states=True)
        # hidden_states[0] is the transformer input; the last entry is the final encoder output.
        hidden = list(output.hidden_states[1:])
        return hidden, self.model._get_feat_extract_output_lengths(lengths).long()

    def export_config(self) -> dict:
        """Hydra config rebuilding this backbone's architecture (random init, no checkpoint)."""
        return {"_target_": f"{__name__}.TransformersWav2Vec2", **copy.deepcopy(self._config)}


def _load_transformers_dir(model_class: Callable, path: str, runtime: dict) -> nn.Module:
    expected = "a local wav2vec2 directory written by save_pretrained (config.json and weights)"
    directory = _existing(path, expected)
    if not (directory / "config.json").is_file():
        raise ValueError(f"{directory} is not {expected}: it has no config.json")
    try:
        model, info = model_class.from_pretrained(
            directory, local_files_only=True, output_loading_info=True, **runtime
        )
    except (OSError, ValueError) as error:
        raise ValueError(f"{directory} is not {expected}: {error}") from error
    if info["missing_keys"]:
        raise ValueError(f"{directory} lacks wav2vec2 weights: {sorted(info['missing_keys'])}")
    return model


def _do_normalize(directory: Path) -> bool | None:
    """`do_normalize` of a transformers directory's preprocessor_config.json (None: no such file)."""
    path = directory.expanduser() / "preprocessor_config.json"
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"{path} cannot be read as JSON: {error}") from error
    if not isinstance(config, dict) or not isinstance(config.get("do_normalize", False), bool):
        raise ValueError(f"{path}: expected a JSON object whose do_normalize is true or false")
    # Wav2Vec2FeatureExtractor's own default when the key is absent.
    return config.get("do_normalize", True)
