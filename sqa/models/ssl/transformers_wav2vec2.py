"""wav2vec2 through Hugging Face transformers, from a local save_pretrained directory."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import torch

from sqa.core.masking import frame_mask
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
    # The generic `PretrainedConfig` keys that `to_dict()` writes and that only describe outputs or
    # generation: none of them names code, a kernel or a hub repository. Private keys (such as
    # `_attn_implementation`, which can make transformers fetch a kernel from the hub) and
    # `auto_map`, `trust_remote_code` or `attn_implementation` are not in it, so they are refused.
    generic_config_keys = frozenset(
        {
            "add_cross_attention", "architectures", "bad_words_ids", "begin_suppress_tokens",
            "chunk_size_feed_forward", "cross_attention_hidden_size", "decoder_start_token_id",
            "diversity_penalty", "do_sample", "dtype", "early_stopping", "encoder_no_repeat_ngram_size",
            "exponential_decay_length_penalty", "finetuning_task", "forced_bos_token_id",
            "forced_eos_token_id", "id2label", "is_decoder", "is_encoder_decoder", "label2id",
            "length_penalty", "max_length", "min_length", "model_type", "no_repeat_ngram_size",
            "num_beam_groups", "num_beams", "num_feat_extract_layers", "num_return_sequences",
            "output_attentions", "output_hidden_states", "output_scores", "prefix", "problem_type",
            "pruned_heads", "remove_invalid_values", "repetition_penalty", "return_dict",
            "return_dict_in_generate", "sep_token_id", "suppress_tokens", "task_specific_params",
            "temperature", "tf_legacy_loss", "tie_encoder_decoder", "tie_word_embeddings",
            "tokenizer_class", "top_k", "top_p", "torch_dtype", "torchscript", "transformers_version",
            "typical_p", "use_bfloat16",
        }
    )  # fmt: skip

    @classmethod
    def allowed_config_keys(cls) -> frozenset[str]:
        """Keys a `config` may hold: `Wav2Vec2Config`'s own (architecture) arguments and the generic ones."""
        from transformers import Wav2Vec2Config

        own = set(inspect.signature(Wav2Vec2Config.__init__).parameters) - {"self", "kwargs"}
        return frozenset(own) | cls.generic_config_keys

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
