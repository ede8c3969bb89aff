"""wav2vec2 through fairseq2: its own checkpoints, or original fairseq ones via its converter."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from sqa.models.ssl.base import HiddenStates, Wav2Vec2Backbone, Wav2Vec2Parts, plain, resolve_normalize
from sqa.models.ssl.interop import fairseq_task_normalize, load_fairseq2_checkpoint

# The same for fairseq2's wav2vec2 archs, whose checkpoints carry no input contract: "base" and
# "large" are fairseq's LibriSpeech models (wav2vec_small.pt, libri960_big.pt: normalize=False),
# "large_lv60k" is wav2vec_vox_new.pt (normalize=True).
FAIRSEQ2_NORMALIZE = {"base": False, "large": False, "large_lv60k": True}


@dataclass
class Fairseq2Config:
    """What rebuilds a `Fairseq2Wav2Vec2`: the fairseq2 arch, overrides of its config, settings."""

    arch: str
    config_overrides: dict
    layer: str
    freeze_feature_encoder: bool
    normalize: bool


def override(config: Any, overrides: Mapping, where: str) -> None:
    """Set the fields in nested dict `overrides` on dataclass `config`, in place."""
    fields = {field.name for field in dataclasses.fields(config)}
    for key, value in overrides.items():
        if key not in fields:
            raise ValueError(f"{where} has no field {key!r}; fields: {sorted(fields)}")
        current = getattr(config, key)
        if dataclasses.is_dataclass(current) and isinstance(value, Mapping):
            override(current, value, f"{where}.{key}")
        elif isinstance(current, enum.Enum) and isinstance(value, str):
            # Hydra configs name enum members, e.g. norm_order: PRE.
            setattr(config, key, type(current)[value])
        else:
            setattr(config, key, value)


class Fairseq2Wav2Vec2(Wav2Vec2Backbone):
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
        config_overrides = plain(config_overrides) or {}
        arch_config = hub.get_arch_config(arch)
        override(arch_config, config_overrides, "Wav2Vec2Config")
        # fairseq2 refuses layer-output hooks while LayerDrop is active.
        arch_config.encoder_config.layer_drop_p = 0.0
        model = hub.create_new_model(arch_config, device=CPU)
        found, source, recorded = FAIRSEQ2_NORMALIZE.get(arch), f"fairseq2 arch {arch!r}", False
        if checkpoint is not None and load_fairseq2_checkpoint(hub, model, arch_config, checkpoint, arch):
            in_file = fairseq_task_normalize(Path(checkpoint).expanduser())
            if in_file is not None:
                found, source, recorded = in_file, f"the fairseq checkpoint {checkpoint}", True
        normalize = resolve_normalize(normalize, found, "Fairseq2Wav2Vec2", source, recorded)
        encoder_config = arch_config.encoder_config
        parts = Wav2Vec2Parts(
            model=model,
            feature_encoder=model.encoder_frontend.feature_extractor,
            conv_layers=[
                (kernel, stride) for _, kernel, stride in encoder_config.feature_extractor_layer_descs
            ],
            output_dim=encoder_config.model_dim,
            transformer_layers=model.encoder.layers,
        )
        config = Fairseq2Config(arch, config_overrides, layer, freeze_feature_encoder, normalize)
        self._attach(parts, config, gradient_checkpointing)

    def _hidden_states(self, wav: torch.Tensor, lengths: torch.Tensor) -> HiddenStates:
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
