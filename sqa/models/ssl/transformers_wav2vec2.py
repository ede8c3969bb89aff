"""wav2vec2 through Hugging Face transformers, from a local save_pretrained directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from sqa.masking import frame_mask
from sqa.models.ssl.base import HiddenStates, Wav2Vec2Backbone, Wav2Vec2Parts, plain, resolve_normalize
from sqa.models.ssl.interop import load_transformers_dir, transformers_do_normalize


@dataclass
class TransformersConfig:
    """What rebuilds a `TransformersWav2Vec2`: its `Wav2Vec2Config` dict and the settings."""

    config: dict
    layer: str
    freeze_feature_encoder: bool
    normalize: bool


class TransformersWav2Vec2(Wav2Vec2Backbone):
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
    # transformers settings that can fetch or run code from outside an export.
    refused_config_keys = frozenset({"auto_map", "trust_remote_code", "attn_implementation"})

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
            model = load_transformers_dir(Wav2Vec2Model, path, runtime)
            where, source = f"TransformersWav2Vec2 ({path})", f"{path}/preprocessor_config.json"
            normalize = resolve_normalize(normalize, transformers_do_normalize(Path(path)), where, source)
        else:
            model = Wav2Vec2Model(Wav2Vec2Config(**{**plain(config), **runtime}))
            normalize = resolve_normalize(normalize, None, "TransformersWav2Vec2", "a config")
        if model.config.add_adapter:
            raise ValueError("wav2vec2 models with an adapter (add_adapter=True) are not supported")
        exported = model.config.to_dict()
        # from_pretrained records the directory it read; the export must not point at it.
        exported.pop("_name_or_path", None)
        if freeze_feature_encoder:
            # transformers' own switch: besides the parameters, it stops the feature encoder
            # from making its input require grad (a backward pass through the frozen convs).
            model.freeze_feature_encoder()
        cfg = model.config
        parts = Wav2Vec2Parts(
            model=model,
            feature_encoder=model.feature_extractor,
            conv_layers=list(zip(cfg.conv_kernel, cfg.conv_stride, strict=True)),
            output_dim=cfg.hidden_size,
            transformer_layers=model.encoder.layers,
        )
        config = TransformersConfig(exported, layer, freeze_feature_encoder, normalize)
        self._attach(parts, config, gradient_checkpointing)

    def _hidden_states(self, wav: torch.Tensor, lengths: torch.Tensor) -> HiddenStates:
        attention_mask = None
        if self.model.config.feat_extract_norm == "layer":
            attention_mask = frame_mask(lengths, wav.shape[1]).long()
        output = self.model(wav, attention_mask=attention_mask, output_hidden_states=True)
        # hidden_states[0] is the transformer input; the last entry is the final encoder output.
        hidden = list(output.hidden_states[1:])
        return hidden, self.model._get_feat_extract_output_lengths(lengths).long()
