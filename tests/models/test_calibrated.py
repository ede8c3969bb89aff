"""The calibrated head: the `distillmos` package's own pooling on each clip's frames, then a monotone map."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from scipy import stats

import sqa
from sqa.exports.format import export_predictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.calibrated import CalibratedPredictor
from sqa.models.distillmos import DistillMosBackbone
from sqa.training.plan import compose_train

distillmos = pytest.importorskip(
    "distillmos", reason="the distillmos extra is not installed (pip install 'sqa[distillmos]')"
)

# Two short clips (one segment each) of different lengths: the shorter one is padded in a batch.
LENGTHS = (16_000 + 17, 28_800)


@pytest.fixture(scope="module")
def reference() -> torch.nn.Module:
    """The package's own model with its weights (it prints where it loaded them from)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return distillmos.ConvTransformerSQAModel().eval()


@pytest.fixture(scope="module")
def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Voiced clips (a pulse train with vibrato, two noise levels) padded into one batch."""
    g = torch.Generator().manual_seed(1)
    wav = torch.zeros(len(LENGTHS), max(LENGTHS))
    for i, (n, noise) in enumerate(zip(LENGTHS, (0.01, 0.2), strict=True)):
        t = torch.arange(n) / 16000
        phase = 2 * torch.pi * (200 * t + 3 * torch.sin(2 * torch.pi * 5 * t))
        wav[i, :n] = 0.2 * sum(torch.sin(k * phase) / k for k in range(1, 10)) + noise * torch.randn(
            n, generator=g
        )
    return wav, torch.tensor(LENGTHS)


@pytest.fixture(scope="module")
def model() -> CalibratedPredictor:
    return CalibratedPredictor(
        DistillMosBackbone(pretrained=True), score_range=(0, 100), pretrained=True
    ).eval()


@pytest.fixture(scope="module")
def frames(model, batch):
    with torch.no_grad():
        return model.backbone(*batch)


def test_the_network_score_is_the_packages_pooling_over_each_clips_own_frames(reference, model, frames):
    feats, frame_lengths = frames
    pool = reference.transformer_pool_attn.pool
    with torch.no_grad():
        got = model.network_score(feats, frame_lengths)
        expected = [
            float(1 + 4 * torch.sigmoid(pool(feats[i : i + 1, : int(n)]))[0, 0])
            for i, n in enumerate(frame_lengths)
        ]
    assert got.tolist() == pytest.approx(expected, abs=1e-5)
    # The padded clip's score is its own: the frames past its end would move it.
    with torch.no_grad():
        unmasked = float(1 + 4 * torch.sigmoid(pool(feats[0:1]))[0, 0])
    assert abs(unmasked - expected[0]) > 1e-4
    assert abs(expected[0] - expected[1]) > 0.05


def test_the_map_is_increasing_and_affine_about_3_and_the_scale_is_the_corpus(model, frames):
    feats, frame_lengths = frames
    lengths = torch.tensor(LENGTHS)
    with torch.no_grad():
        network = model.network_score(feats, frame_lengths)
        identity = model.score_frames(feats, frame_lengths, lengths)
        assert identity.score.tolist() == pytest.approx(network.tolist(), abs=1e-6)
        model.log_gain.fill_(math.log(2.0))
        model.offset.fill_(-0.25)
        mapped = model.score_frames(feats, frame_lengths, lengths)
        model.log_gain.zero_()
        model.offset.zero_()
    assert mapped.score.tolist() == pytest.approx((2.0 * (network - 3.0) + 3.0 - 0.25).tolist(), abs=1e-6)
    # Every valid frame carries the clip's score, the padding none.
    first = int(frame_lengths[0])
    assert mapped.frame_scores[0, :first].tolist() == pytest.approx([float(mapped.score[0])] * first)
    assert float(mapped.frame_scores[0, first:].abs().sum()) == 0.0
    # 1-5 internal onto 0-100: 1 -> 0, 5 -> 100, and back.
    assert model.to_scale(torch.tensor([1.0, 3.0, 5.0])).tolist() == pytest.approx([0.0, 50.0, 100.0])
    assert model.to_internal(torch.tensor([0.0, 100.0])).tolist() == pytest.approx([1.0, 5.0])


def test_any_positive_gain_keeps_the_networks_order_of_clips():
    network = torch.tensor([1.3, 4.2, 2.2, 3.9, 2.8])
    model = CalibratedPredictor(DistillMosBackbone(channels=8, conv_layers=2, dim=16, heads=2, layers=1))
    with torch.no_grad():
        model.log_gain.fill_(-4.0)
        model.offset.fill_(7.0)
        mapped = model.log_gain.exp() * (network - 3.0) + 3.0 + model.offset
    assert stats.spearmanr(mapped, network).statistic == pytest.approx(1.0)


def test_only_the_map_learns_unless_the_head_is_asked_to():
    backbone = DistillMosBackbone(channels=8, conv_layers=2, dim=16, heads=2, layers=1)
    frozen = CalibratedPredictor(backbone)
    head = [p for m in (frozen.attention, frozen.output) for p in m.parameters()]
    assert head and not any(p.requires_grad for p in head)
    assert frozen.log_gain.requires_grad and frozen.offset.requires_grad
    learning = CalibratedPredictor(
        DistillMosBackbone(channels=8, conv_layers=2, dim=16, heads=2, layers=1), train_head=True
    )
    assert all(p.requires_grad for m in (learning.attention, learning.output) for p in m.parameters())


def test_an_export_scores_a_padded_batch_as_the_model_scores_each_clip_alone(model, batch, tmp_path):
    wav, lengths = batch
    with torch.no_grad():
        model.offset.fill_(0.4)
        alone = [
            float(model.to_scale(model(wav[i : i + 1, :n], lengths[i : i + 1]).score)[0])
            for i, n in enumerate(LENGTHS)
        ]
        export_predictor(model, tmp_path / "export", sample_rate=16000, domains=[])
        model.offset.zero_()
    scores = sqa.load(tmp_path / "export").score([wav[i, :n].numpy() for i, n in enumerate(LENGTHS)], 16000)
    assert scores == pytest.approx(alone, abs=1e-3)
    assert np.ptp(alone) > 1.0


def test_the_model_config_builds_it_with_the_packages_head():
    cfg = compose_train(["experiment=calibrated"])
    built = instantiate(cfg.model, num_domains=1, num_judges=0, score_range=[0, 100])
    assert isinstance(built, CalibratedPredictor) and built.score_range == (0.0, 100.0)
    reference_model = CalibratedPredictor(DistillMosBackbone(pretrained=True), pretrained=True)
    assert torch.equal(built.output.weight, reference_model.output.weight)
    assert cfg.finetune.freeze_backbone_steps == cfg.trainer.max_steps


def test_what_the_calibrated_head_cannot_do_is_refused():
    tiny = DistillMosBackbone(channels=8, conv_layers=2, dim=16, heads=2, layers=1)
    with pytest.raises(ValueError, match="needs a DistillMosBackbone, got LogMelBackbone"):
        CalibratedPredictor(LogMelBackbone())
    with pytest.raises(ValueError, match="scores the mean listener"):
        CalibratedPredictor(tiny, num_judges=3)
    with pytest.raises(ValueError, match=r"score_range must be \[low, high\]"):
        CalibratedPredictor(tiny, score_range=(5, 1))
    with pytest.raises(ValueError, match="head_init=train_mean does not apply"):
        CalibratedPredictor(tiny).start_at([3.0])
    with pytest.raises(ValueError, match="pools with its own attention"):
        CalibratedPredictor(tiny).pooling = "masked_mean"
