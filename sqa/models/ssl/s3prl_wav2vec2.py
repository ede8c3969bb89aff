"""wav2vec2 through s3prl's copy of fairseq's model code."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sqa.core.masking import frame_mask
from sqa.models.ssl.base import HiddenStates, Wav2Vec2Backbone, Wav2Vec2Parts, plain, resolve_normalize
from sqa.models.ssl.files import load_weights_into
from sqa.models.ssl.s3prl_files import (
    conv_layers,
    patch_torchaudio_for_s3prl,
    read_s3prl_checkpoint,
    s3prl_cached_checkpoint,
)


@dataclass
class S3prlConfig:
    """What rebuilds an `S3prlWav2Vec2`: fairseq's model and task configs and the settings."""

    model_config: dict
    task_config: dict
    layer: str
    freeze_feature_encoder: bool
    normalize: bool


class S3prlWav2Vec2(Wav2Vec2Backbone):
    """s3prl wav2vec2: (wav (B, N), lengths (B,)) -> (frames (B, T, D), frame_lengths (B,)).

    Weights come from `checkpoint`, a local s3prl-converted wav2vec2 file (a torch dict with
    "model_cfg", "task_cfg" and "model_weight", as written by
    `s3prl.upstream.wav2vec2.convert.load_and_convert_fairseq_ckpt`), or from `upstream`, the
    name of an s3prl wav2vec2 hub entry (e.g. "wav2vec2_large_ll60k") whose converted checkpoint
    is already in s3prl's download cache (`s3prl.util.download.get_dir()`); a missing file is an
    error, never a download. `model_config`/`task_config` rebuild the architecture without weights
    (that is what `export_config()` stores). `normalize=None` follows the task config's
    `normalize` (fairseq's default, false, when it has none), as s3prl's own wav2vec2 expert does.
    Of the task config only `normalize` is read, and kept. The model config's
    `conv_feature_layers` is parsed as data (`s3prl_files.conv_layers`), never evaluated as code.
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
            checkpoint = str(s3prl_cached_checkpoint(upstream))
        if checkpoint is not None:
            model_config, task_config, weights = read_s3prl_checkpoint(checkpoint)
        model_config, task_config = plain(model_config), plain(task_config) or {}
        where = f"S3prlWav2Vec2 ({checkpoint})" if checkpoint is not None else "S3prlWav2Vec2"
        # fairseq's pretraining task config (s3prl keeps it verbatim) also sets data paths and
        # crop sizes (max_sample_size 320000); only `normalize` concerns the model, and an export
        # keeps only what rebuilds it.
        task_config = {"normalize": task_config["normalize"]} if "normalize" in task_config else {}
        # s3prl's merge_with_parent drops keys its dataclasses do not know (fairseq configs carry
        # many training-only ones) and rejects an empty dict.
        task = merge_with_parent(AudioPretrainingConfig, {"normalize": False, **task_config})
        # s3prl eval()s this string when building and when counting frames: it gets the parsed
        # layers written back as a plain literal.
        spec = model_config.get("conv_feature_layers", Wav2Vec2Config.conv_feature_layers)
        literal = repr(conv_layers(spec, where))
        model = Wav2Vec2Model(
            merge_with_parent(Wav2Vec2Config, {**model_config, "conv_feature_layers": literal})
        )
        if weights is not None:
            load_weights_into(model, weights, checkpoint, "its model_cfg")
        # As s3prl's wav2vec2 expert does: LayerDrop would make the layer selection random.
        model.encoder.layerdrop = 0.0
        # fairseq's own default (AudioPretrainingConfig.normalize=False) when task_cfg omits it.
        normalize = resolve_normalize(normalize, task.normalize, where, "the s3prl task_cfg")
        convs = [block[0] for block in model.feature_extractor.conv_layers]
        parts = Wav2Vec2Parts(
            model=model,
            feature_encoder=model.feature_extractor,
            conv_layers=[(conv.kernel_size[0], conv.stride[0]) for conv in convs],
            output_dim=model.encoder.embedding_dim,
            transformer_layers=model.encoder.layers,
        )
        config = S3prlConfig(model_config, task_config, layer, freeze_feature_encoder, normalize)
        self._attach(parts, config, gradient_checkpointing)

    def _hidden_states(self, wav: torch.Tensor, lengths: torch.Tensor) -> HiddenStates:
        padding_mask = ~frame_mask(lengths, wav.shape[1])
        result = self.model.extract_features(wav, padding_mask, mask=False)
        # layer_results hold (output, attention, pre-residual) per layer, time first.
        hidden = [output.transpose(0, 1) for output, _, _ in result["layer_results"]]
        # The encoder output adds the final LayerNorm of pre-LN (layer_norm_first) models.
        hidden[-1] = result["x"]
        return hidden, self.model._get_feat_extract_output_lengths(lengths).long()
