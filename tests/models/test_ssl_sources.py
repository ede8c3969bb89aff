"""wav2vec2 backbones from torchaudio, s3prl, fairseq2 and transformers on tiny random-init models.

Each source saves a tiny model in its own native format, loads it back through the backbone class
and must reproduce the library's own outputs; then batch invariance, the export round trip, the
weighted layer sum, the frozen feature encoder and the path errors. The network is blocked for
the whole module, so any download attempt fails the test that made it.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest
import torch
import torch.utils.checkpoint
import torchaudio
from hydra.utils import instantiate
from omegaconf import OmegaConf
from torch import nn

from sqa.core.extras import MissingExtraError
from sqa.models.backbone import conv_frame_lengths
from sqa.models.ssl import (
    TINY_TORCHAUDIO,
    Fairseq2Wav2Vec2,
    S3prlWav2Vec2,
    TorchaudioWav2Vec2,
    TransformersWav2Vec2,
    normalize_waveform,
    patch_torchaudio_for_s3prl,
    s3prl_upstream_names,
)
from sqa.models.ssl.interop import s3prl_checkpoint_url
from sqa.models.ssl.s3prl_files import _ckpt_assignments, read_s3prl_checkpoint, s3prl_configs
from tests.conftest import REPO

# Both hubs and s3prl's downloads are unreachable: a connection attempt fails the test.
pytestmark = pytest.mark.usefixtures("no_network")

LENGTHS = [4800, 2345, 1234, 250]
CONV = [(128, 10, 5)] + [(128, 3, 2)] * 4 + [(128, 2, 2)] * 2

# fairseq's (and s3prl's copy of fairseq's) names for the tiny wav2vec2.
FAIRSEQ_TINY = {
    "extractor_mode": "layer_norm",
    "conv_feature_layers": "[(128, 10, 5)] + [(128, 3, 2)] * 4 + [(128, 2, 2)] * 2",
    "conv_bias": True,
    "encoder_layers": 2,
    "encoder_embed_dim": 256,
    "encoder_ffn_embed_dim": 512,
    "encoder_attention_heads": 4,
    "layer_norm_first": True,
    "quantize_targets": True,
    "latent_vars": 8,
    "latent_groups": 2,
    "latent_dim": 64,
    "final_dim": 64,
    "dropout": 0.0,
    "attention_dropout": 0.0,
    "activation_dropout": 0.0,
    "encoder_layerdrop": 0.0,
}
# The same architecture as overrides of a fairseq2 arch config.
FAIRSEQ2_TINY = {
    "encoder_config": {
        "model_dim": 256,
        "num_encoder_layers": 2,
        "num_encoder_attn_heads": 4,
        "ffn_inner_dim": 512,
        "feature_dim": 128,
        "feature_extractor_layer_descs": CONV,
    },
    "quantized_dim": 64,
    "final_dim": 64,
    "num_codebook_entries": 8,
}
TRANSFORMERS_TINY = {
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 512,
    "conv_dim": [128] * 7,
    "conv_bias": True,
    "feat_extract_norm": "layer",
    "do_stable_layer_norm": True,
}

# (final output, first layer output, frame lengths) computed by the library itself from the
# real lengths; a clip shorter than 400 samples counts as zero-padded to 400, as in the backbones.
Reference = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass
class Source:
    """A backbone class, its constructor kwargs for the saved tiny model, and the library's view."""

    cls: type[nn.Module]
    kwargs: dict
    reference: Reference
    feature_encoder: str
    root: Path


@pytest.fixture
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Zero-padded random audio (B, N) and lengths (B,), one clip shorter than 400 samples."""
    generator = torch.Generator().manual_seed(1)
    lengths = torch.tensor(LENGTHS)
    wav = 0.1 * torch.randn(len(LENGTHS), max(LENGTHS), generator=generator)
    return wav * (torch.arange(wav.shape[1]) < lengths[:, None]), lengths


def padding_mask(wav: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    return torch.arange(wav.shape[1])[None, :] >= lengths[:, None]


def fairseq_normalized(wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The input fairseq's dataset builds for a normalize=True model, zero-padded to 400 samples.

    fairseq's RawAudioDataset.postprocess (and s3prl's wav2vec2 expert) normalise each unpadded
    clip with `F.layer_norm(wav, wav.shape)` before the collater pads the batch.
    """
    clips = [nn.functional.layer_norm(clip[:n], (n,)) for clip, n in zip(wav, lengths.tolist(), strict=True)]
    out = torch.zeros(len(clips), max(wav.shape[1], 400))
    for row, clip in enumerate(clips):
        out[row, : clip.shape[0]] = clip
    return out, lengths.clamp_min(400)


def torchaudio_source(tmp_path: Path, layer_norm_first: bool = True) -> Source:
    torch.manual_seed(0)
    model = torchaudio.models.wav2vec2_model(
        **{**TINY_TORCHAUDIO, "encoder_layer_norm_first": layer_norm_first}
    ).eval()
    torch.save(model.state_dict(), tmp_path / "torchaudio.pt")

    def reference(wav: torch.Tensor, lengths: torch.Tensor) -> tuple:
        lengths = lengths.clamp_min(400)
        final, frame_lengths = model(wav, lengths)
        return final, model.extract_features(wav, lengths)[0][0], frame_lengths

    kwargs = {"checkpoint": str(tmp_path / "torchaudio.pt")}
    if not layer_norm_first:
        kwargs["arch_kwargs"] = {"encoder_layer_norm_first": False}
    return Source(TorchaudioWav2Vec2, kwargs, reference, "model.feature_extractor.", tmp_path)


def fairseq_reference_model(model_config: dict) -> nn.Module:
    """A tiny wav2vec2 in fairseq's own module layout (s3prl ships a copy of fairseq's code)."""
    from s3prl.upstream.utils import merge_with_parent
    from s3prl.upstream.wav2vec2.wav2vec2_model import Wav2Vec2Config, Wav2Vec2Model

    torch.manual_seed(0)
    return Wav2Vec2Model(merge_with_parent(Wav2Vec2Config, model_config)).eval()


def s3prl_source(tmp_path: Path) -> Source:
    from s3prl.upstream.wav2vec2.expert import UpstreamExpert

    model = fairseq_reference_model(FAIRSEQ_TINY)
    # The layout s3prl's load_and_convert_fairseq_ckpt writes; normalize exercises the task config.
    converted = {
        "task_cfg": {"normalize": True, "sample_rate": 16000},
        "model_cfg": FAIRSEQ_TINY,
        "model_weight": model.state_dict(),
    }
    torch.save(converted, tmp_path / "s3prl_converted.pt")
    expert = UpstreamExpert(str(tmp_path / "s3prl_converted.pt")).eval()

    def reference(wav: torch.Tensor, lengths: torch.Tensor) -> tuple:
        # s3prl's own upstream takes a list of unpadded clips and hooks its layers. It would
        # normalise the clip shorter than the 400-sample receptive field after padding it, so
        # every clip is normalised here (over its real samples) and then padded.
        clips = [
            nn.functional.pad(nn.functional.layer_norm(clip[:n], (n,)), (0, max(0, 400 - n)))
            for clip, n in zip(wav, lengths.tolist(), strict=True)
        ]
        expert.wav_normalize = False
        hidden = expert(clips)["hidden_states"]
        frame_lengths = conv_frame_lengths(lengths.clamp_min(400))
        return hidden[-1], hidden[1], frame_lengths

    kwargs = {"checkpoint": str(tmp_path / "s3prl_converted.pt")}
    return Source(S3prlWav2Vec2, kwargs, reference, "model.feature_extractor.", tmp_path)


def fairseq2_reference(model: nn.Module) -> Reference:
    """fairseq2's forward on the normalised input that large_lv60k weights expect."""
    from fairseq2.nn import BatchLayout

    def reference(wav: torch.Tensor, lengths: torch.Tensor) -> tuple:
        wav, lengths = fairseq_normalized(wav, lengths)
        layers: list[torch.Tensor] = []
        handle = model.encoder.register_layer_hook(lambda i, out, layout, n: layers.append(out) or True)
        seqs, layout = model.encoder_frontend(wav, BatchLayout.of(wav, lengths.tolist()))
        final = model.encoder(seqs, layout)
        handle.remove()
        return final, layers[0], torch.tensor(layout.seq_lens)

    return reference


def fairseq2_source(tmp_path: Path) -> Source:
    """Tiny fairseq2 model saved by fairseq2's own checkpoint manager (a training checkpoint)."""
    from fairseq2.checkpoint import StandardCheckpointManager
    from fairseq2.device import CPU
    from fairseq2.gang import create_fake_gangs
    from fairseq2.models.wav2vec2 import get_wav2vec2_model_hub
    from fairseq2.runtime.dependency import get_dependency_resolver, wire_object

    hub = get_wav2vec2_model_hub()
    config = hub.get_arch_config("large_lv60k")
    for key, value in FAIRSEQ2_TINY["encoder_config"].items():
        setattr(config.encoder_config, key, value)
    config.quantized_dim, config.final_dim, config.num_codebook_entries = 64, 64, 8
    torch.manual_seed(0)
    model = hub.create_new_model(config, device=CPU).eval()
    manager = wire_object(
        get_dependency_resolver(),
        StandardCheckpointManager,
        output_dir=tmp_path / "fairseq2",
        gangs=create_fake_gangs(CPU),
    )
    manager.save_model_only(1, model, blocking=True)
    checkpoint = tmp_path / "fairseq2" / "checkpoints" / "step_1" / "model"
    assert (checkpoint / "pp_00" / "tp_00" / "sdp_00.pt").is_file()
    # The single-file layout of fairseq2's released wav2vec2_fs2_*.pt checkpoints.
    torch.save({"model": model.state_dict()}, tmp_path / "fairseq2_single.pt")
    kwargs = {"checkpoint": str(checkpoint), "config_overrides": FAIRSEQ2_TINY}
    encoder = "model.encoder_frontend.feature_extractor."
    return Source(Fairseq2Wav2Vec2, kwargs, fairseq2_reference(model), encoder, tmp_path)


def fairseq_original_source(tmp_path: Path, post_ln: bool = False) -> Source:
    """An original fairseq wav2vec2 .pt, loaded through fairseq2's conversion.

    fairseq itself is not installable here, but s3prl's wav2vec2_model.py is a copy of fairseq's
    module code, so its state dict has fairseq's keys; s3prl's converter writes exactly
    {"task_cfg": cfg["task"], "model_cfg": cfg["model"], "model_weight": state["model"]}, so the
    inverse below is a fairseq checkpoint. The reference is that fairseq-code model itself, on
    the input fairseq's dataset gives it: per-clip normalised where the checkpoint says so.
    """
    if post_ln:
        # The base layout: GroupNorm front end, no conv bias, post-LN transformer.
        model_config = {**FAIRSEQ_TINY, "extractor_mode": "default", "conv_bias": False}
        model_config["layer_norm_first"] = False
        state = {"args": None, "cfg": {"model": model_config, "task": {"normalize": False}}}
        arch, normalized = "base", False
    else:
        model_config = FAIRSEQ_TINY
        # Checkpoints from 2020 (e.g. wav2vec_vox_new.pt) pickle their argparse args.
        state = {"args": argparse.Namespace(arch="wav2vec2", normalize=True)}
        arch, normalized = "large_lv60k", True
    model = fairseq_reference_model(model_config)
    state["model"] = model.state_dict()
    torch.save(state, tmp_path / "fairseq.pt")

    def reference(wav: torch.Tensor, lengths: torch.Tensor) -> tuple:
        if normalized:
            wav, lengths = fairseq_normalized(wav, lengths)
        lengths = lengths.clamp_min(400)
        result = model.extract_features(wav, padding_mask(wav, lengths))
        first = result["layer_results"][0][0].transpose(0, 1)
        return result["x"], first, model._get_feat_extract_output_lengths(lengths)

    kwargs = {"checkpoint": str(tmp_path / "fairseq.pt"), "arch": arch}
    kwargs["config_overrides"] = FAIRSEQ2_TINY
    encoder = "model.encoder_frontend.feature_extractor."
    return Source(Fairseq2Wav2Vec2, kwargs, reference, encoder, tmp_path)


def transformers_source(tmp_path: Path) -> Source:
    from transformers import Wav2Vec2Config, Wav2Vec2FeatureExtractor, Wav2Vec2Model

    torch.manual_seed(0)
    model = Wav2Vec2Model(Wav2Vec2Config(**TRANSFORMERS_TINY)).eval()
    model.save_pretrained(tmp_path / "hf")
    # As transformers' fairseq converter writes it for layer-norm models: normalised input.
    extractor = Wav2Vec2FeatureExtractor(do_normalize=True, return_attention_mask=True)
    extractor.save_pretrained(tmp_path / "hf")

    def reference(wav: torch.Tensor, lengths: torch.Tensor) -> tuple:
        # The library's own feature extractor normalises each unpadded clip; a clip shorter
        # than the 400-sample receptive field is zero-padded after that, as in the backbone.
        clips = [clip[:n].numpy() for clip, n in zip(wav, lengths.tolist(), strict=True)]
        normed = extractor(clips, sampling_rate=16000, return_tensors="pt", padding=True).input_values
        wav = nn.functional.pad(normed, (0, max(0, 400 - normed.shape[1])))
        wav = wav * ~padding_mask(wav, lengths)
        lengths = lengths.clamp_min(400)
        attention_mask = (~padding_mask(wav, lengths)).long()
        output = model(wav, attention_mask=attention_mask, output_hidden_states=True)
        frame_lengths = model._get_feat_extract_output_lengths(lengths)
        return output.last_hidden_state, output.hidden_states[1], frame_lengths

    kwargs = {"path": str(tmp_path / "hf")}
    return Source(TransformersWav2Vec2, kwargs, reference, "model.feature_extractor.", tmp_path)


SOURCES = {
    "torchaudio": torchaudio_source,
    "s3prl": s3prl_source,
    "fairseq2": fairseq2_source,
    "transformers": transformers_source,
}
# More native formats that must match their library, including the GroupNorm base layout.
EXTRA_SOURCES = {
    "torchaudio-post-ln": lambda tmp_path: torchaudio_source(tmp_path, layer_norm_first=False),
    "fairseq-original-pt": fairseq_original_source,
    "fairseq-original-pt-base": lambda tmp_path: fairseq_original_source(tmp_path, post_ln=True),
}


@pytest.fixture(scope="module", params=list(SOURCES))
def source(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Source:
    """Each source's tiny model, saved once per module in its native format."""
    return SOURCES[request.param](tmp_path_factory.mktemp(request.param))


def assert_frames_close(
    frames: torch.Tensor, expected: torch.Tensor, frame_lengths: torch.Tensor, atol: float
) -> None:
    for row, n in enumerate(frame_lengths.tolist()):
        torch.testing.assert_close(frames[row, :n], expected[row, :n], atol=atol, rtol=0)


def library_frames(source: Source, wav: torch.Tensor, lengths: torch.Tensor, alone: bool) -> tuple:
    """The library's (final output, frame lengths) for the batch, or for each clip on its own."""
    if not alone:
        final, _, frame_lengths = source.reference(wav, lengths)
        return final, frame_lengths
    outputs = [
        # A clip shorter than the receptive field keeps the zeros the batch padded it with.
        source.reference(wav[i : i + 1, : max(n, 400)], lengths[i : i + 1])
        for i, n in enumerate(lengths.tolist())
    ]
    final = torch.zeros(len(outputs), max(out[0].shape[1] for out in outputs), outputs[0][0].shape[-1])
    for row, (clip_final, _, _) in enumerate(outputs):
        final[row, : clip_final.shape[1]] = clip_final[0]
    return final, torch.cat([out[2] for out in outputs])


def check_reproduces_library(source: Source, batch: tuple[torch.Tensor, torch.Tensor]) -> None:
    backbone = source.cls(**source.kwargs).eval()
    wav, lengths = batch
    frames, frame_lengths = backbone(wav, lengths)
    # A GroupNorm front end scores each clip as the library does on that clip alone.
    final, expected_lengths = library_frames(source, wav, lengths, alone=backbone.padding_sensitive)
    assert torch.equal(frame_lengths, expected_lengths.long())
    assert torch.equal(frame_lengths, conv_frame_lengths(lengths.clamp_min(backbone.min_samples)))
    assert backbone.min_samples == 400 and frames.shape[-1] == backbone.output_dim == 256
    assert_frames_close(frames, final, frame_lengths, atol=1e-5)


@torch.no_grad()
def test_native_checkpoint_reproduces_library_outputs(source: Source, batch: tuple) -> None:
    check_reproduces_library(source, batch)


@pytest.mark.parametrize("name", list(EXTRA_SOURCES))
@torch.no_grad()
def test_more_native_formats_reproduce_library_outputs(name: str, tmp_path: Path, batch: tuple) -> None:
    check_reproduces_library(EXTRA_SOURCES[name](tmp_path), batch)


@torch.no_grad()
def test_fairseq2_single_file_checkpoint(tmp_path: Path, batch: tuple) -> None:
    source = fairseq2_source(tmp_path)
    kwargs = {**source.kwargs, "checkpoint": str(tmp_path / "fairseq2_single.pt")}
    frames, frame_lengths = Fairseq2Wav2Vec2(**kwargs).eval()(*batch)
    assert_frames_close(frames, source.reference(*batch)[0], frame_lengths, atol=1e-5)


def group_norm_backbones(tmp_path: Path) -> dict[str, nn.Module]:
    """Every source's GroupNorm front end (the wav2vec2 base layout), tiny and random-init."""
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    from sqa.models.ssl.torchaudio_wav2vec2 import tiny

    torch.manual_seed(0)
    torch.save(tiny(extractor_mode="group_norm").state_dict(), tmp_path / "torchaudio_base.pt")
    base_cfg = {**FAIRSEQ_TINY, "extractor_mode": "default", "conv_bias": False, "layer_norm_first": False}
    state = {"task_cfg": {"normalize": False}, "model_cfg": base_cfg}
    torch.save(
        {**state, "model_weight": fairseq_reference_model(base_cfg).state_dict()}, tmp_path / "s3prl.pt"
    )
    hf = {
        **TRANSFORMERS_TINY,
        "feat_extract_norm": "group",
        "do_stable_layer_norm": False,
        "conv_bias": False,
    }
    Wav2Vec2Model(Wav2Vec2Config(**hf)).save_pretrained(tmp_path / "hf")
    return {
        "torchaudio-group-norm": TorchaudioWav2Vec2(
            checkpoint=str(tmp_path / "torchaudio_base.pt"), arch_kwargs={"extractor_mode": "group_norm"}
        ),
        "s3prl-group-norm": S3prlWav2Vec2(checkpoint=str(tmp_path / "s3prl.pt")),
        "fairseq2-group-norm": Fairseq2Wav2Vec2(**fairseq_original_source(tmp_path, post_ln=True).kwargs),
        "transformers-group-norm": TransformersWav2Vec2(path=str(tmp_path / "hf"), normalize=False),
    }


def every_backbone(tmp_path: Path) -> dict[str, nn.Module]:
    """One tiny backbone of every kind sqa builds or imports: log-mel, each source, both front ends."""
    from sqa.models.backbone import LogMelBackbone

    kinds: dict[str, nn.Module] = {"logmel": LogMelBackbone(channels=32, transformer_layers=1)}
    for name, make in {**SOURCES, **EXTRA_SOURCES}.items():
        (tmp_path / name).mkdir()
        source = make(tmp_path / name)
        kinds[name] = source.cls(**source.kwargs)
    (tmp_path / "group-norm").mkdir()
    return {**kinds, **group_norm_backbones(tmp_path / "group-norm")}


@torch.no_grad()
def test_every_backbone_scores_a_clip_alone_as_beside_a_three_times_longer_clip(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(7)
    short, long = 4321, 3 * 4321
    wav = 0.1 * torch.randn(2, long, generator=generator)
    wav[0, short:] = 0
    lengths = torch.tensor([short, long])
    kinds = every_backbone(tmp_path)
    sensitive = sorted(
        name for name, backbone in kinds.items() if getattr(backbone, "padding_sensitive", False)
    )
    # The GroupNorm front ends, and only they, are run clip by clip out of training.
    groups = ["fairseq2-group-norm", "s3prl-group-norm", "torchaudio-group-norm", "transformers-group-norm"]
    assert sensitive == ["fairseq-original-pt-base", *groups]
    for name, backbone in kinds.items():
        backbone.eval()
        alone, alone_lengths = backbone(wav[:1, :short], lengths[:1])
        frames, frame_lengths = backbone(wav, lengths)
        valid = int(alone_lengths[0])
        assert int(frame_lengths[0]) == valid, name
        torch.testing.assert_close(frames[0, :valid], alone[0, :valid], atol=1e-5, rtol=0, msg=name)
        assert torch.all(frames[0, valid:] == 0), name


@torch.no_grad()
def test_batch_invariance(source: Source, batch: tuple) -> None:
    # Unequal weights on both layers: the first layer and the final output must be invariant.
    backbone = source.cls(**source.kwargs, layer="weighted").eval()
    backbone.select.weights.copy_(torch.tensor([0.3, -0.2]))
    wav, lengths = batch
    frames, frame_lengths = backbone(wav, lengths)
    for row, n in enumerate(LENGTHS):
        alone, alone_lengths = backbone(wav[row : row + 1, :n], lengths[row : row + 1])
        valid = int(alone_lengths)
        assert valid == frame_lengths[row] and alone.shape[1] == valid
        torch.testing.assert_close(frames[row, :valid], alone[0], atol=1e-4, rtol=0)
        assert torch.all(frames[row, valid:] == 0)


def test_export_config_rebuilds_architecture(source: Source, batch: tuple) -> None:
    backbone = source.cls(**source.kwargs, layer="weighted").eval()
    with torch.no_grad():
        backbone.select.weights.copy_(torch.tensor([0.3, -0.2]))
    config = backbone.export_config()
    assert config["_target_"] == f"sqa.models.ssl.{source.cls.__name__}"
    # Through YAML, as an export's config.yaml; it must not point at the pretrained weights.
    text = OmegaConf.to_yaml(OmegaConf.create(config))
    assert str(source.root) not in text
    rebuilt = instantiate(OmegaConf.create(text)).eval()
    assert type(rebuilt) is source.cls
    rebuilt.load_state_dict(backbone.state_dict(), strict=True)
    with torch.no_grad():
        expected, expected_lengths = backbone(*batch)
        frames, frame_lengths = rebuilt(*batch)
    assert torch.equal(frame_lengths, expected_lengths)
    torch.testing.assert_close(frames, expected, atol=1e-6, rtol=0)


def test_weighted_layer_sum(source: Source, batch: tuple) -> None:
    backbone = source.cls(**source.kwargs, layer="weighted").eval()
    weights = backbone.select.weights
    assert isinstance(weights, nn.Parameter) and weights.requires_grad
    assert torch.equal(weights, torch.zeros(2))  # one per transformer layer, equal at the start
    assert any(p is weights for p in backbone.parameters())
    assert "select.weights" in backbone.state_dict()
    wav, lengths = batch
    with torch.no_grad():
        final, first, frame_lengths = source.reference(wav, lengths)
        # Near one-hot weights pick out the library's first layer and its final output.
        for values, expected in (([40.0, -40.0], first), ([-40.0, 40.0], final)):
            weights.copy_(torch.tensor(values))
            assert_frames_close(backbone(wav, lengths)[0], expected, frame_lengths, atol=1e-5)
        weights.zero_()
    frames, frame_lengths = backbone(wav, lengths)
    assert_frames_close(frames.detach(), (first + final) / 2, frame_lengths, atol=1e-5)
    frames.pow(2).sum().backward()
    assert weights.grad is not None and weights.grad.abs().min() > 0


def test_freeze_feature_encoder(source: Source, batch: tuple) -> None:
    frozen = source.cls(**source.kwargs).train()
    frozen(*batch)[0].sum().backward()
    for param_name, param in frozen.named_parameters():
        in_encoder = param_name.startswith(source.feature_encoder)
        assert param.requires_grad is not in_encoder, param_name
        if in_encoder:
            assert param.grad is None
    assert any(p.grad is not None for n, p in frozen.named_parameters() if ".layers.1." in n)
    trainable = source.cls(**source.kwargs, freeze_feature_encoder=False)
    assert all(p.requires_grad for p in trainable.parameters())


def test_tiny_torchaudio_arch_and_layer_choice() -> None:
    backbone = TorchaudioWav2Vec2()
    extractor, encoder = backbone.model.feature_extractor, backbone.model.encoder
    assert [(b.conv.out_channels, b.kernel_size, b.stride) for b in extractor.conv_layers] == CONV
    assert all(b.layer_norm is not None for b in extractor.conv_layers)  # extractor_mode layer_norm
    layers = encoder.transformer.layers
    assert len(layers) == 2 and layers[0].attention.num_heads == 4
    assert layers[0].feed_forward.intermediate_dense.out_features == 512
    pos_conv = encoder.transformer.pos_conv_embed.conv
    assert pos_conv.kernel_size == (128,) and pos_conv.groups == 16
    assert backbone.output_dim == 256 and backbone.min_samples == 400
    assert "select.weights" not in backbone.state_dict()
    with pytest.raises(ValueError, match="layer must be one of"):
        TorchaudioWav2Vec2(layer="middle")


def raises_naming(error: type[Exception], path: Path | str) -> pytest.RaisesContext:
    return pytest.raises(error, match=re.escape(str(path)))


def test_torchaudio_path_errors(tmp_path: Path) -> None:
    with raises_naming(FileNotFoundError, tmp_path / "missing.pt"):
        TorchaudioWav2Vec2(checkpoint=str(tmp_path / "missing.pt"))
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with raises_naming(ValueError, tmp_path / "notes.txt"):
        TorchaudioWav2Vec2(checkpoint=str(tmp_path / "notes.txt"))
    deeper = torchaudio.models.wav2vec2_model(**{**TINY_TORCHAUDIO, "encoder_num_layers": 3})
    torch.save(deeper.state_dict(), tmp_path / "three_layers.pt")
    with pytest.raises(ValueError, match="does not match torchaudio arch 'tiny'"):
        TorchaudioWav2Vec2(checkpoint=str(tmp_path / "three_layers.pt"))
    with pytest.raises(ValueError, match="wav2vec2_large_lv60k"):
        TorchaudioWav2Vec2(arch="wav2vec2_huge")


def test_s3prl_path_errors(tmp_path: Path) -> None:
    with raises_naming(FileNotFoundError, tmp_path / "missing.pt"):
        S3prlWav2Vec2(checkpoint=str(tmp_path / "missing.pt"))
    torch.save(torchaudio.models.wav2vec2_model(**TINY_TORCHAUDIO).state_dict(), tmp_path / "ta.pt")
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "ta.pt")) + ".*model_cfg"):
        S3prlWav2Vec2(checkpoint=str(tmp_path / "ta.pt"))
    with pytest.raises(ValueError, match="exactly one"):
        S3prlWav2Vec2()


def test_s3prl_named_upstream_comes_from_the_local_cache_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: tuple
) -> None:
    from s3prl.util import download

    monkeypatch.setattr(download, "_download_dir", tmp_path / "s3prl-cache")
    assert "wav2vec2_large_ll60k" in s3prl_upstream_names()
    assert "wav2vec2_custom" not in s3prl_upstream_names()
    with pytest.raises(FileNotFoundError, match=re.escape(str(tmp_path / "s3prl-cache"))):
        S3prlWav2Vec2(upstream="wav2vec2_large_ll60k")
    with pytest.raises(ValueError, match="wav2vec2_large_ll60k"):
        S3prlWav2Vec2(upstream="wav2vec2_giant")
    url = "https://huggingface.co/s3prl/converted_ckpts/resolve/main/wav2vec_vox_new.pt"
    cached = Path(download._urls_to_filepaths(url, download=False))
    with pytest.raises(FileNotFoundError) as missing:
        s3prl_configs(upstream="wav2vec2_large_ll60k")
    assert str(missing.value) == (
        f"{cached} does not exist: s3prl upstream 'wav2vec2_large_ll60k' is not in the local s3prl cache "
        f"({cached.parent}). Download {url} to that path on a machine with network access, or pass "
        "checkpoint= a local s3prl-converted wav2vec2 file."
    )
    for both_or_neither in ({"checkpoint": str(cached), "upstream": "wav2vec2"}, {}):
        with pytest.raises(ValueError) as error:
            s3prl_configs(**both_or_neither)
        assert str(error.value) == "give exactly one of checkpoint or upstream"
    # The file s3prl would have downloaded for that entry, already in the cache: it loads.
    source = s3prl_source(tmp_path)
    cached.write_bytes((tmp_path / "s3prl_converted.pt").read_bytes())
    written = torch.load(cached, weights_only=True)
    assert s3prl_configs(upstream="wav2vec2_large_ll60k") == (written["model_cfg"], written["task_cfg"])
    backbone = S3prlWav2Vec2(upstream="wav2vec2_large_ll60k").eval()
    assert "upstream" not in backbone.export_config()
    with torch.no_grad():
        frames, frame_lengths = backbone(*batch)
        assert_frames_close(frames, source.reference(*batch)[0], frame_lengths, atol=1e-5)


def test_s3prl_checkpoint_urls_are_what_the_hub_functions_would_fetch() -> None:
    from s3prl.upstream.wav2vec2 import hubconf

    for name in s3prl_upstream_names():
        # Every hub entry ends in wav2vec2_custom(ckpt=URL); intercepted, it fetches nothing.
        urls: list[str] = []
        with mock.patch.object(
            hubconf, "wav2vec2_custom", lambda urls=urls, **kwargs: urls.append(kwargs["ckpt"])
        ):
            getattr(hubconf, name)()
        assert s3prl_checkpoint_url(name) == urls[0], name
    assert s3prl_checkpoint_url("wav2vec2").endswith("/wav2vec_small.pt")
    # Neither a name hubconf lacks nor an entry that assigns no URL and calls no other entry has one.
    for name in ("wav2vec2_giant", "wav2vec2_custom"):
        with pytest.raises(ValueError) as error:
            s3prl_checkpoint_url(name)
        assert str(error.value) == f"s3prl's wav2vec2 hubconf names no checkpoint URL for {name!r}"


def test_only_a_constant_assigned_to_kwargs_ckpt_is_a_checkpoint_url() -> None:
    source = """
def entry(key, **kwargs):
    url = "https://example.org/name.pt"
    kwargs["other"] = "https://example.org/other.pt"
    kwargs[key] = "https://example.org/key.pt"
    kwargs["ckpt"] = url
    kwargs["ckpt"] = "https://example.org/ckpt.pt"
"""
    (function,) = ast.parse(source).body
    assert _ckpt_assignments(function) == [(7, "https://example.org/ckpt.pt")]


def test_torchaudio_presets_are_builders() -> None:
    from sqa.models.ssl.torchaudio_wav2vec2 import tiny, torchaudio_presets

    presets = torchaudio_presets()
    assert (
        presets["tiny"] is tiny and presets["wav2vec2_large_lv60k"] is torchaudio.models.wav2vec2_large_lv60k
    )
    assert len(tiny(encoder_num_layers=1).encoder.transformer.layers) == 1


def test_s3prl_import_shim() -> None:
    patch_torchaudio_for_s3prl()
    # These s3prl modules call torchaudio.set_audio_backend / import torchaudio.sox_effects at
    # import time, as s3prl.nn and s3prl.hub do through them.
    importlib.import_module("s3prl.upstream.byol_s.byol_a.common")
    importlib.import_module("s3prl.upstream.mos_prediction.expert")
    from torchaudio.sox_effects import apply_effects_tensor

    with pytest.raises(RuntimeError, match="removed"):
        apply_effects_tensor(torch.zeros(1, 10), 16000, [])


def test_the_s3prl_shim_fills_in_only_what_torchaudio_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    # A torchaudio without both APIs (2.9 and later) gets a no-op setter and a stub module.
    bare = types.ModuleType("torchaudio")
    monkeypatch.setitem(sys.modules, "torchaudio", bare)
    # Set, then deleted: monkeypatch restores sys.modules as it was, the shim's own stub included.
    monkeypatch.setitem(sys.modules, "torchaudio.sox_effects", None)
    monkeypatch.delitem(sys.modules, "torchaudio.sox_effects")
    patch_torchaudio_for_s3prl()
    assert bare.set_audio_backend("sox_io") is None
    stub = sys.modules["torchaudio.sox_effects"]
    assert bare.sox_effects is stub and stub.__name__ == "torchaudio.sox_effects"
    for removed in (stub.apply_effects_tensor, stub.apply_effects_file):
        with pytest.raises(RuntimeError) as error:
            removed(torch.zeros(1, 10), 16000, [])
        assert str(error.value) == "torchaudio.sox_effects was removed in torchaudio 2.9"

    # What an older torchaudio has, as an attribute or an imported submodule, is left alone.
    def setter(backend: str) -> str:
        return backend

    older, effects = types.ModuleType("torchaudio"), types.ModuleType("torchaudio.sox_effects")
    older.set_audio_backend, older.sox_effects = setter, effects
    monkeypatch.setitem(sys.modules, "torchaudio", older)
    monkeypatch.delitem(sys.modules, "torchaudio.sox_effects")
    patch_torchaudio_for_s3prl()
    assert older.set_audio_backend is setter and older.sox_effects is effects
    assert "torchaudio.sox_effects" not in sys.modules
    imported = types.ModuleType("torchaudio")
    monkeypatch.setitem(sys.modules, "torchaudio", imported)
    monkeypatch.setitem(sys.modules, "torchaudio.sox_effects", effects)
    patch_torchaudio_for_s3prl()
    assert sys.modules["torchaudio.sox_effects"] is effects and not hasattr(imported, "sox_effects")
    # Without torchaudio: the extra to install, named.
    monkeypatch.setitem(sys.modules, "torchaudio", None)
    with pytest.raises(MissingExtraError) as missing:
        patch_torchaudio_for_s3prl()
    assert str(missing.value) == (
        "s3prl wav2vec2 backbones needs the Python package 'torchaudio', which is not installed: "
        "pip install 'sqa[ssl]' (or `bash scripts/setup.sh`, which installs every extra)"
    )


def test_an_s3prl_checkpoint_that_is_not_one_is_refused_naming_the_file_and_what_it_holds(
    tmp_path: Path,
) -> None:
    expected = "an s3prl-converted wav2vec2 checkpoint (a dict with model_cfg, task_cfg, model_weight)"
    path = tmp_path / "upstream.pt"
    with pytest.raises(FileNotFoundError) as error:
        read_s3prl_checkpoint(str(path))
    assert str(error.value) == f"{path} does not exist; expected {expected}"
    path.write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match=f"^{re.escape(f'{path} cannot be read as {expected}: ')}"):
        read_s3prl_checkpoint(str(path))
    for held, found in (({"model_cfg": {}, "task_cfg": {}}, "['model_cfg', 'task_cfg']"), ([1, 2], "list")):
        torch.save(held, path)
        with pytest.raises(ValueError) as error:
            read_s3prl_checkpoint(str(path))
        assert str(error.value) == f"{path} is not {expected}; found {found}"


def test_fairseq2_path_errors(tmp_path: Path) -> None:
    with raises_naming(FileNotFoundError, tmp_path / "missing"):
        Fairseq2Wav2Vec2(checkpoint=str(tmp_path / "missing"), config_overrides=FAIRSEQ2_TINY)
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    with raises_naming(ValueError, tmp_path / "notes.txt"):
        Fairseq2Wav2Vec2(checkpoint=str(tmp_path / "notes.txt"), config_overrides=FAIRSEQ2_TINY)
    # A checkpoint that pickles an arbitrary Python object is refused, with the way out.
    torch.save({"model": {}, "extra_state": types.SimpleNamespace(epoch=3)}, tmp_path / "obj.pt")
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "obj.pt")) + ".*weights_only"):
        Fairseq2Wav2Vec2(checkpoint=str(tmp_path / "obj.pt"), config_overrides=FAIRSEQ2_TINY)
    source = fairseq2_source(tmp_path)
    overrides = {**FAIRSEQ2_TINY, "encoder_config": {**FAIRSEQ2_TINY["encoder_config"]}}
    overrides["encoder_config"]["num_encoder_layers"] = 3
    with raises_naming(ValueError, source.kwargs["checkpoint"]):
        Fairseq2Wav2Vec2(checkpoint=source.kwargs["checkpoint"], config_overrides=overrides)
    with pytest.raises(ValueError, match="large_lv60k"):
        Fairseq2Wav2Vec2(arch="huge")
    with pytest.raises(ValueError, match="no field 'num_layers'"):
        Fairseq2Wav2Vec2(config_overrides={"encoder_config": {"num_layers": 2}})


def test_transformers_path_errors(tmp_path: Path) -> None:
    with raises_naming(FileNotFoundError, tmp_path / "missing"):
        TransformersWav2Vec2(path=str(tmp_path / "missing"))
    # A hub id is not a local directory: an error, not a download.
    with raises_naming(FileNotFoundError, "facebook/wav2vec2-large-lv60"):
        TransformersWav2Vec2(path="facebook/wav2vec2-large-lv60")
    (tmp_path / "empty").mkdir()
    with raises_naming(ValueError, tmp_path / "empty"):
        TransformersWav2Vec2(path=str(tmp_path / "empty"))
    transformers_source(tmp_path)
    for weights in (tmp_path / "hf").glob("*.safetensors"):
        weights.unlink()
    with raises_naming(ValueError, tmp_path / "hf"):
        TransformersWav2Vec2(path=str(tmp_path / "hf"))


def test_normalize_waveform_uses_valid_samples_only(batch: tuple) -> None:
    wav, lengths = batch
    normalized = normalize_waveform(wav, lengths)
    for row, n in enumerate(LENGTHS):
        expected = torch.nn.functional.layer_norm(wav[row, :n], (n,))
        torch.testing.assert_close(normalized[row, :n], expected, atol=1e-5, rtol=0)
        assert torch.all(normalized[row, n:] == 0)


def test_gradient_checkpointing_same_gradients_training_only(source: Source, batch: tuple) -> None:
    plain = source.cls(**source.kwargs).train()
    checkpointed = source.cls(**source.kwargs, gradient_checkpointing=True).train()
    # A training setting: same parameter names, and an export rebuilds the model without it.
    assert list(checkpointed.state_dict()) == list(plain.state_dict())
    assert "gradient_checkpointing" not in checkpointed.export_config()
    checkpoint = torch.utils.checkpoint.checkpoint
    grads = []
    for backbone in (plain, checkpointed):
        torch.manual_seed(0)  # the same dropout masks in both (checkpoint replays the RNG state)
        with mock.patch.object(torch.utils.checkpoint, "checkpoint", wraps=checkpoint) as spy:
            frames, _ = backbone(*batch)
            frames.pow(2).sum().backward()
        assert spy.call_count == (2 if backbone is checkpointed else 0)  # one per transformer layer
        grads.append({n: p.grad for n, p in backbone.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and any(".layers.1." in n for n in grads[0])
    for name, grad in grads[0].items():
        torch.testing.assert_close(grads[1][name], grad, atol=1e-5, rtol=0, msg=name)
    with mock.patch.object(torch.utils.checkpoint, "checkpoint", wraps=checkpoint) as spy:
        checkpointed.eval()(*batch)
        with torch.no_grad():
            checkpointed.train()(*batch)
    assert spy.call_count == 0


@pytest.mark.parametrize("bundle", ["BASE", "LARGE", "LARGE_LV60K", "XLSR_300M", "XLSR_1B", "XLSR_2B"])
def test_torchaudio_normalize_table_is_the_bundles_own(bundle: str) -> None:
    from sqa.models.ssl import TORCHAUDIO_NORMALIZE

    expected = getattr(torchaudio.pipelines, f"WAV2VEC2_{bundle}")._normalize_waveform
    assert TORCHAUDIO_NORMALIZE[f"wav2vec2_{bundle.lower()}"] is expected


def test_torchaudio_generic_builder_needs_normalize() -> None:
    with pytest.raises(ValueError, match="set normalize: true or false"):
        TorchaudioWav2Vec2(arch="wav2vec2_model", arch_kwargs=TINY_TORCHAUDIO)
    assert TorchaudioWav2Vec2(arch="wav2vec2_model", arch_kwargs=TINY_TORCHAUDIO, normalize=True).normalize


def test_normalize_is_read_from_the_checkpoint_logged_and_exported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A fairseq .pt whose task says normalize=False, under the large_lv60k arch (table: true).
    model = fairseq_reference_model(FAIRSEQ_TINY)
    state = {"cfg": {"model": FAIRSEQ_TINY, "task": {"normalize": False}}, "model": model.state_dict()}
    torch.save(state, tmp_path / "fairseq.pt")
    kwargs = {"checkpoint": str(tmp_path / "fairseq.pt"), "config_overrides": FAIRSEQ2_TINY}
    with caplog.at_level("INFO", logger="sqa.models.ssl"):
        read = Fairseq2Wav2Vec2(**kwargs)
    assert read.normalize is False and read.export_config()["normalize"] is False
    assert "normalize=False (the fairseq checkpoint" in caplog.text
    caplog.clear()
    with caplog.at_level("INFO", logger="sqa.models.ssl"):
        forced = Fairseq2Wav2Vec2(**kwargs, normalize=True)
    assert forced.normalize is True and forced.export_config()["normalize"] is True
    assert "overrides the fairseq checkpoint" in caplog.text
    # Reduced to its weights, the file records nothing: the arch decides.
    torch.save({"model": model.state_dict()}, tmp_path / "weights.pt")
    assert Fairseq2Wav2Vec2(checkpoint=str(tmp_path / "weights.pt"), config_overrides=FAIRSEQ2_TINY).normalize
    # An export rebuilds with the value it stored, whatever the arch says, and without a warning.
    caplog.clear()
    with caplog.at_level("INFO", logger="sqa.models.ssl"):
        rebuilt = instantiate(OmegaConf.create(read.export_config()))
    assert rebuilt.normalize is False and "overrides" not in caplog.text


def test_transformers_normalize_comes_from_the_preprocessor_config(tmp_path: Path) -> None:
    from transformers import Wav2Vec2FeatureExtractor

    transformers_source(tmp_path)
    assert TransformersWav2Vec2(path=str(tmp_path / "hf")).normalize is True
    Wav2Vec2FeatureExtractor(do_normalize=False).save_pretrained(tmp_path / "hf")
    backbone = TransformersWav2Vec2(path=str(tmp_path / "hf"))
    assert backbone.normalize is False and backbone.export_config()["normalize"] is False
    (tmp_path / "hf" / "preprocessor_config.json").unlink()
    with raises_naming(ValueError, tmp_path / "hf" / "preprocessor_config.json"):
        TransformersWav2Vec2(path=str(tmp_path / "hf"))
    assert TransformersWav2Vec2(path=str(tmp_path / "hf"), normalize=True).normalize
    with pytest.raises(ValueError, match="set normalize"):
        TransformersWav2Vec2(config=TRANSFORMERS_TINY)


def fairseq_args_to_cfg(args: argparse.Namespace) -> dict:
    """fairseq's `convert_namespace_to_omegaconf` for a wav2vec2 pretraining checkpoint's args.

    Every argparse attribute goes to the task and the model config that have a field of that
    name (s3prl's AudioPretrainingConfig and Wav2Vec2Config are copies of fairseq's).
    """
    import dataclasses as dc

    from s3prl.upstream.wav2vec2.wav2vec2_model import AudioPretrainingConfig, Wav2Vec2Config

    values = vars(args)
    return {
        group: {f.name: values[f.name] for f in dc.fields(config) if f.name in values}
        for group, config in (("task", AudioPretrainingConfig), ("model", Wav2Vec2Config))
    }


@pytest.fixture
def fake_fairseq(monkeypatch: pytest.MonkeyPatch) -> None:
    """`fairseq.checkpoint_utils.load_checkpoint_to_cpu` for s3prl's converter (fairseq itself
    does not install here): it loads the file and turns legacy `args` into `cfg`, as fairseq does.
    """

    def load_checkpoint_to_cpu(path: str, arg_overrides: dict | None = None) -> dict:
        with torch.serialization.safe_globals([argparse.Namespace]):
            state = torch.load(path, map_location="cpu", weights_only=True)
        if state.get("args") is not None:
            state["cfg"] = OmegaConf.create(fairseq_args_to_cfg(state["args"]))
        return state

    fairseq = types.ModuleType("fairseq")
    fairseq.checkpoint_utils = types.ModuleType("fairseq.checkpoint_utils")
    fairseq.checkpoint_utils.load_checkpoint_to_cpu = load_checkpoint_to_cpu
    monkeypatch.setitem(sys.modules, "fairseq", fairseq)
    monkeypatch.setitem(sys.modules, "fairseq.checkpoint_utils", fairseq.checkpoint_utils)


def shipped(name: str, **overrides: object) -> nn.Module:
    """The backbone of conf/model/backbone/<name>.yaml with `overrides`, in eval mode."""
    config = OmegaConf.merge(OmegaConf.load(REPO / "conf" / "model" / "backbone" / f"{name}.yaml"), overrides)
    assert "normalize" not in overrides or name == "torchaudio_wav2vec2_large"
    return instantiate(config).eval()


@torch.no_grad()
def test_one_fairseq_checkpoint_gives_the_same_frames_in_every_runtime(
    tmp_path: Path, batch: tuple, fake_fairseq: None
) -> None:
    """fairseq2 reads the fairseq file itself, s3prl after its own converter, torchaudio after
    its fairseq importer; all three from their shipped configs. transformers is left out: its
    fairseq converter is a repository script that the 4.57 wheel does not ship.
    """
    from s3prl.upstream.wav2vec2.convert import load_and_convert_fairseq_ckpt
    from torchaudio.models.wav2vec2.utils import import_fairseq_model

    # A 2020-style fairseq checkpoint (argparse args, normalize=True) of a tiny wav2vec2.
    model = fairseq_reference_model(FAIRSEQ_TINY)
    args = argparse.Namespace(arch="wav2vec2", normalize=True, sample_rate=16000, **FAIRSEQ_TINY)
    torch.save({"args": args, "model": model.state_dict()}, tmp_path / "fairseq.pt")
    # The reference: fairseq's own forward on the input fairseq's dataset builds (normalised).
    wav, lengths = batch
    normalized, padded_lengths = fairseq_normalized(wav, lengths)
    expected = model.extract_features(normalized, padding_mask(normalized, padded_lengths))["x"]

    # s3prl converts the fairseq checkpoint with its own converter; torchaudio imports the model.
    load_and_convert_fairseq_ckpt(str(tmp_path / "fairseq.pt"), str(tmp_path / "s3prl.pt"))
    torch.save(import_fairseq_model(model).state_dict(), tmp_path / "torchaudio.pt")
    backbones = {
        "fairseq2": shipped(
            "fairseq2_wav2vec2_large", checkpoint=str(tmp_path / "fairseq.pt"), config_overrides=FAIRSEQ2_TINY
        ),
        "s3prl": shipped("s3prl", checkpoint=str(tmp_path / "s3prl.pt"), upstream=None),
        # A torchaudio state_dict carries no input contract: the checkpoint's is passed on.
        "torchaudio": shipped(
            "torchaudio_wav2vec2_large",
            arch="tiny",
            checkpoint=str(tmp_path / "torchaudio.pt"),
            normalize=True,
        ),
    }
    for name, backbone in backbones.items():
        frames, frame_lengths = backbone(wav, lengths)
        assert backbone.normalize is True, name
        assert torch.equal(frame_lengths, conv_frame_lengths(padded_lengths)), name
        for row, n in enumerate(frame_lengths.tolist()):
            torch.testing.assert_close(frames[row, :n], expected[row, :n], atol=1e-4, rtol=0, msg=name)
