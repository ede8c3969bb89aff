"""wav2vec2-family SSL backbones from torchaudio, s3prl, fairseq2 and transformers.

Every class follows the interface of `sqa.models.backbone`: `(wav (B, N), lengths (B,)) ->
(frames (B, T, D), frame_lengths (B,))`, `output_dim`, `min_samples` and `export_config()`. Weights
load from local files only; nothing here downloads. Each library's own padding mask is used, so a
clip's frames are the same alone and inside a zero-padded batch. Archs whose first convolution is
followed by GroupNorm over time (wav2vec2 base and large, not large-lv60k) see the padding by
construction: out of training they run each group of equal-length clips as its own unpadded
batch (`Wav2Vec2Backbone.padding_sensitive`), so scoring and evaluation stay batch-invariant;
training keeps padded batches. Every library's LayerDrop and SpecAugment-style masking
are off: a dropped layer would make the layer selection random, and the SSL-MOS recipe fine-tunes
without masking.

`gradient_checkpointing=True` recomputes each transformer layer's activations in the backward
pass instead of keeping them (less memory, about one more forward pass of time), in training
only. It changes neither the outputs nor the state_dict keys, so it is a training setting and not
part of `export_config()`: an exported model is rebuilt without it and scores the same.

Layout: `base` (the shared forward and plumbing), one module per library, `interop` (checkpoint
loaders, key bridges), `s3prl_files` (s3prl's import shim, hub entries and upstream configs) and
`files` (local weight files read with clear errors). Configs and exports name the classes here, e.g.
`sqa.models.ssl.TorchaudioWav2Vec2`; the libraries themselves are imported only when a class of
theirs is built.
"""

from sqa.models.ssl.base import (
    LAYER_CHOICES,
    LayerSelect,
    Wav2Vec2Backbone,
    checkpoint_layers,
    normalize_waveform,
    receptive_field,
    resolve_normalize,
)
from sqa.models.ssl.fairseq2_wav2vec2 import FAIRSEQ2_NORMALIZE, Fairseq2Config, Fairseq2Wav2Vec2
from sqa.models.ssl.s3prl_files import (
    patch_torchaudio_for_s3prl,
    s3prl_cached_checkpoint,
    s3prl_configs,
    s3prl_upstream_names,
)
from sqa.models.ssl.s3prl_wav2vec2 import S3prlConfig, S3prlWav2Vec2
from sqa.models.ssl.torchaudio_wav2vec2 import (
    TINY_TORCHAUDIO,
    TORCHAUDIO_NORMALIZE,
    TorchaudioConfig,
    TorchaudioWav2Vec2,
)
from sqa.models.ssl.transformers_wav2vec2 import TransformersConfig, TransformersWav2Vec2

# Every SSL backbone an export or a Hydra config may name.
SSL_BACKBONES = (TorchaudioWav2Vec2, S3prlWav2Vec2, Fairseq2Wav2Vec2, TransformersWav2Vec2)

__all__ = [
    "FAIRSEQ2_NORMALIZE",
    "LAYER_CHOICES",
    "SSL_BACKBONES",
    "TINY_TORCHAUDIO",
    "TORCHAUDIO_NORMALIZE",
    "Fairseq2Config",
    "Fairseq2Wav2Vec2",
    "LayerSelect",
    "S3prlConfig",
    "S3prlWav2Vec2",
    "TorchaudioConfig",
    "TorchaudioWav2Vec2",
    "TransformersConfig",
    "TransformersWav2Vec2",
    "Wav2Vec2Backbone",
    "checkpoint_layers",
    "normalize_waveform",
    "patch_torchaudio_for_s3prl",
    "receptive_field",
    "resolve_normalize",
    "s3prl_cached_checkpoint",
    "s3prl_configs",
    "s3prl_upstream_names",
]
