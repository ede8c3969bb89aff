"""The fusion backbone: two backbones on one frame rate, concatenated or gated, exported and trained."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from torch import nn

import sqa
from sqa.core.masking import frame_mask
from sqa.exports.format import export_predictor, load_export
from sqa.models.backbone import W2V_HOP, W2V_WINDOW, LogMelBackbone, conv_frame_lengths
from sqa.models.fusion import FusionBackbone
from sqa.models.predictor import MOSPredictor
from sqa.models.ssl import TorchaudioWav2Vec2
from sqa.training.run import run
from tests.conftest import small_corpus_overrides
from tests.training.test_train import compose_train

# A wav2vec2 of the standard front end (400-sample field, 320-sample hop) at toy widths.
TINY_W2V = {
    "extractor_conv_layer_config": [(16, 10, 5)] + [(16, 3, 2)] * 4 + [(16, 2, 2)] * 2,
    "encoder_embed_dim": 32,
    "encoder_num_layers": 1,
    "encoder_num_heads": 2,
    "encoder_ff_interm_features": 64,
    "encoder_pos_conv_kernel": 16,
    "encoder_pos_conv_groups": 4,
}


def tiny_fusion(mode: str = "concat", dim: int | None = None) -> FusionBackbone:
    """Log-mel (8 channels) beside the tiny wav2vec2 (32 dims), seeded, in eval mode."""
    torch.manual_seed(0)
    return FusionBackbone(
        LogMelBackbone(n_mels=16, channels=8), TorchaudioWav2Vec2(arch_kwargs=TINY_W2V), mode, dim
    ).eval()


class Stub(nn.Module):
    """A backbone of frames all equal to `value`, `fewer` frames short of wav2vec2's count per clip."""

    def __init__(
        self, dim: int, value: float, fewer: int = 0, hop: int = W2V_HOP, min_samples: int = W2V_WINDOW
    ) -> None:
        super().__init__()
        self.output_dim, self.value, self.fewer = dim, value, fewer
        self.hop_length, self.min_samples = hop, min_samples

    def forward(self, wav: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        frame_lengths = (conv_frame_lengths(lengths.clamp_min(W2V_WINDOW)) - self.fewer).clamp_min(1)
        keep = frame_mask(frame_lengths, int(frame_lengths.max()))[..., None].float()
        return keep.expand(-1, -1, self.output_dim) * self.value, frame_lengths


# A zero-padded batch, as the data loaders and the scorer make them: clips of 1 s, 0.56 s and 300
# samples (shorter than the 400-sample window), at a tenth of full scale.
LENGTHS = torch.tensor([16000, 9000, 300])
WAV = 0.1 * torch.randn(3, 16000, generator=torch.Generator().manual_seed(1)) * frame_mask(LENGTHS, 16000)


def test_concat_puts_both_backbones_frames_side_by_side():
    fusion = tiny_fusion()
    with torch.no_grad():
        frames, frame_lengths = fusion(WAV, LENGTHS)
        a, a_lengths = fusion.first(WAV, LENGTHS)
        b, _ = fusion.second(WAV, LENGTHS)
    assert fusion.output_dim == 8 + 32 and fusion.hop_length == W2V_HOP and fusion.min_samples == W2V_WINDOW
    # Both front ends yield wav2vec2's frame count; a clip shorter than the window gets one frame.
    assert frame_lengths.tolist() == a_lengths.tolist() == [49, 27, 1]
    assert frames.shape == (3, 49, 40)
    torch.testing.assert_close(frames, torch.cat([a, b], dim=-1))


def test_each_clip_keeps_the_frames_both_backbones_have():
    fusion = FusionBackbone(Stub(2, 1.0), Stub(3, 2.0, fewer=2))
    frames, frame_lengths = fusion(WAV, LENGTHS)
    assert frame_lengths.tolist() == [47, 25, 1] and frames.shape == (3, 47, 5)
    mask = frame_mask(frame_lengths, 47)
    assert (frames[mask] == torch.tensor([1.0, 1.0, 2.0, 2.0, 2.0])).all() and (frames[~mask] == 0).all()
    # The first backbone short instead: the same frames, trimmed to its count.
    swapped, swapped_lengths = FusionBackbone(Stub(3, 2.0, fewer=2), Stub(2, 1.0))(WAV, LENGTHS)
    assert swapped_lengths.tolist() == [47, 25, 1] and swapped.shape == (3, 47, 5)


def test_a_fusion_needs_as_many_samples_as_its_hungrier_backbone():
    assert FusionBackbone(Stub(2, 1.0, min_samples=400), Stub(2, 1.0, min_samples=1200)).min_samples == 1200


@pytest.mark.parametrize(("mode", "dim"), [("concat", None), ("gated", None), ("gated", 12)])
def test_a_clip_alone_gets_the_frames_it_gets_in_a_padded_batch(mode, dim):
    fusion = tiny_fusion(mode, dim)
    assert fusion.output_dim == {"concat": 40, "gated": dim or 8}[mode]
    with torch.no_grad():
        frames, frame_lengths = fusion(WAV, LENGTHS)
        for row, n in enumerate(LENGTHS.tolist()):
            alone, alone_lengths = fusion(WAV[row : row + 1, :n], LENGTHS[row : row + 1])
            count = int(frame_lengths[row])
            assert int(alone_lengths[0]) == count and alone.shape[1] == count
            torch.testing.assert_close(alone[0], frames[row, :count])
            assert (frames[row, count:] == 0).all()


def test_the_gate_is_one_sigmoid_per_frame_mixing_the_projected_frames():
    fusion = tiny_fusion("gated", 12)
    a, b = torch.randn(2, 5, 8), torch.randn(2, 5, 32)
    with torch.no_grad():
        mixed, gate = fusion.mix(a, b)
        pa, pb = fusion.project_first(a), fusion.project_second(b)
    assert mixed.shape == (2, 5, 12) and gate.shape == (2, 5, 1)
    assert ((gate > 0) & (gate < 1)).all() and gate.std() > 0
    torch.testing.assert_close(mixed, gate * pa + (1 - gate) * pb)


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (
            lambda: FusionBackbone(Stub(2, 1.0), Stub(2, 1.0), "sum"),
            "mode must be one of ('concat', 'gated')",
        ),
        (lambda: FusionBackbone(Stub(2, 1.0), Stub(2, 1.0), "concat", 4), "dim sets the gated mode's width"),
        (lambda: FusionBackbone(Stub(2, 1.0), Stub(2, 1.0), "gated", 0), "dim must be 1 or more"),
        (
            lambda: FusionBackbone(Stub(2, 1.0), Stub(2, 1.0, hop=160)),
            "first steps 320 samples per frame, second 160: a fusion needs both on one frame rate",
        ),
        (
            lambda: FusionBackbone(FusionBackbone(Stub(2, 1.0), Stub(2, 1.0)), Stub(2, 1.0)),
            "first is a fusion backbone; a fusion fuses two plain backbones",
        ),
    ],
)
def test_a_fusion_it_cannot_build_is_refused_with_the_reason(make, expected):
    with pytest.raises(ValueError, match="^" + expected.replace("(", r"\(").replace(")", r"\)")):
        make()


# The 300-sample clip is shorter than the window: the scorer says so, and pads it as the model does.
@pytest.mark.filterwarnings("ignore::sqa.scoring.clips.ClipWarning")
@pytest.mark.parametrize("mode", ["concat", "gated"])
def test_a_fusion_export_scores_as_the_model_it_was_made_from(mode, tmp_path):
    torch.manual_seed(0)
    model = MOSPredictor(tiny_fusion(mode), head_dim=8).eval()
    export_predictor(model, tmp_path / "exp", 16000, ["d"])
    backbone = yaml.safe_load((tmp_path / "exp" / "config.yaml").read_text())["model"]["backbone"]
    assert backbone["_target_"] == "sqa.models.fusion.FusionBackbone" and backbone["mode"] == mode
    assert backbone["first"]["_target_"] == "sqa.models.backbone.LogMelBackbone"
    assert backbone["second"]["_target_"] == "sqa.models.ssl.TorchaudioWav2Vec2"
    card = (tmp_path / "exp" / "README.md").read_text(encoding="utf-8")
    assert "FusionBackbone (LogMelBackbone + TorchaudioWav2Vec2)" in card
    loaded = load_export(tmp_path / "exp")[0]
    assert isinstance(loaded.backbone, FusionBackbone) and loaded.backbone.config == model.backbone.config
    clips = [WAV[row, :n].numpy() for row, n in enumerate(LENGTHS.tolist())]
    with torch.no_grad():
        expected = [float(model(torch.from_numpy(c)[None], torch.tensor([len(c)])).score) for c in clips]
    np.testing.assert_allclose(sqa.load(tmp_path / "exp").score(clips, 16000), expected, rtol=1e-5, atol=1e-5)


# Log-mel and wav2vec2 at toy widths: the fusion config trains as any backbone choice does.
TINY_FUSION_OVERRIDES = [
    "model/backbone=fusion",
    "model.backbone.first.n_mels=32",
    "model.backbone.first.channels=32",
    "model.backbone.second.arch_kwargs={"
    + ",".join(f"{k}:{json.dumps(v).replace(' ', '')}" for k, v in TINY_W2V.items())
    + "}",
]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["concat", "gated"])
def test_a_tiny_fusion_model_beats_the_constant_predictor(mode, small_synthetic_root, tmp_path):
    """40 Adam steps on the small synthetic corpus: 25 s per mode on 2 cores, minutes when they are busy."""
    overrides = [
        *small_corpus_overrides(small_synthetic_root),
        *TINY_FUSION_OVERRIDES,
        f"model.backbone.mode={mode}",
        f"model.backbone.dim={16 if mode == 'gated' else 'null'}",
        "data.num_workers=0",
        "optim=adam",
        "optim.lr=3e-3",
        "trainer.max_steps=40",
        "trainer.val_check_interval=10",
        "trainer.enable_progress_bar=false",
        "early_stopping_patience=null",
        "bootstrap=20",
    ]
    run(compose_train(overrides), tmp_path / "run")
    check = json.loads((tmp_path / "run" / "run_info.json").read_text(encoding="utf-8"))["learning_check"]
    assert check["test"]["rmse"] < check["test"]["constant_rmse"]
    assert check["valid"]["rmse"] < check["valid"]["constant_rmse"]


@pytest.mark.parametrize("part", ["first", "second"])
def test_a_missing_weights_file_of_either_part_stops_the_run_before_the_corpus_is_read(part, tmp_path):
    from sqa.training.run import build

    missing = tmp_path / "weights.pt"
    cfg = compose_train(
        [
            "data=csv",
            f"data.corpus.path={tmp_path / 'no-manifest.csv'}",
            "model/backbone=fusion",
            f"model/backbone@model.backbone.{part}=torchaudio_wav2vec2_large",
            f"model.backbone.{part}.checkpoint={missing}",
        ]
    )
    with pytest.raises(
        FileNotFoundError, match=f"^model.backbone.{part}.checkpoint: {missing} does not exist$"
    ):
        build(cfg)
