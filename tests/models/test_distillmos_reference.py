"""sqa's Distill-MOS against the `distillmos` package's own modules and forward, on its weights.

Clips shorter (3.1 s: one padded segment) and longer (8.1 s: two segments, two crops) than
7.68 s, alone and in a padded batch. Each full-size segment costs about a second on one CPU thread.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate

import sqa
from sqa.exports.format import export_predictor
from sqa.models.distillmos import SEGMENT, DistillMosBackbone, zero_shot_predictor

from ..conftest import REPO

distillmos = pytest.importorskip(
    "distillmos", reason="the distillmos extra is not installed (pip install 'sqa[distillmos]')"
)

# The long clip's two crops start at 0 and 7120, its two segments at 0 and 7040.
SHORT, LONG = 49_600 + 17, 130_000


@pytest.fixture(scope="module")
def reference() -> torch.nn.Module:
    """The package's own model with its weights (it prints where it loaded them from)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return distillmos.ConvTransformerSQAModel().eval()


@pytest.fixture(scope="module")
def clips() -> list[torch.Tensor]:
    """A voiced, noisy clip of each length: a 180 Hz pulse train with a slow vibrato."""
    g = torch.Generator().manual_seed(0)
    out = []
    for n, noise in ((SHORT, 0.02), (LONG, 0.1)):
        t = torch.arange(n) / 16000
        phase = 2 * torch.pi * (180 * t + 3 * torch.sin(2 * torch.pi * 5 * t))
        voiced = sum(torch.sin(k * phase) / k for k in range(1, 12))
        out.append(0.2 * voiced + noise * torch.randn(n, generator=g))
    return out


def padded(clips: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([c.shape[0] for c in clips])
    wav = torch.zeros(len(clips), int(lengths.max()))
    for i, c in enumerate(clips):
        wav[i, : c.shape[0]] = c
    return wav, lengths


def package_frames(reference: torch.nn.Module, segment: torch.Tensor) -> torch.Tensor:
    """The frames (384, 200) the package's modules give one segment (N <= 122880), before its pooling."""
    x = torch.nn.functional.pad(segment, (0, SEGMENT - segment.shape[0]))[None]
    # The package's forward scales each segment to its peak before its modules.
    x = x / (torch.max(torch.abs(x), dim=1, keepdim=True).values + 1e-8)
    head = reference.transformer_pool_attn
    features = reference.cnn(x).permute(0, 2, 1)
    features = head.norm_input(features.transpose(-1, -2)).transpose(-1, -2)
    features = head.transformer(features)
    return head.norm_trans(features.transpose(-1, -2)).transpose(-1, -2)[0]


@pytest.fixture(scope="module")
def expected_frames(reference, clips) -> list[torch.Tensor]:
    """Each clip's frames from the package's modules: 7.68 s from its start, the rest from its end."""
    short, long = clips
    with torch.no_grad():
        first = package_frames(reference, short)
        count = (SHORT - 400) // 320 + 1
        out = [first[:count]]
        start = (LONG - SEGMENT) // 320 * 320
        count = (LONG - 400) // 320 + 1
        tail = package_frames(reference, long[start : start + SEGMENT])
        out.append(
            torch.cat(
                [package_frames(reference, long[:SEGMENT]), tail[384 - start // 320 : count - start // 320]]
            )
        )
    return out


def test_the_pretrained_backbone_holds_every_weight_of_the_packages_network(reference):
    backbone = DistillMosBackbone(pretrained=True)
    package = reference.state_dict()
    pool = [k for k in package if ".pool." in k]
    # The position code is computed, BatchNorm's update counters are not kept: every other tensor is sqa's.
    kept = [k for k in package if k not in pool and "num_batches" not in k and not k.endswith(".pe")]
    assert sum(t.numel() for t in backbone.state_dict().values()) == sum(package[k].numel() for k in kept)
    torch.testing.assert_close(backbone.cnn.convs[5].weight, package["cnn.cnn.10.weight"], rtol=0, atol=0)
    pe = package["transformer_pool_attn.transformer.position_encoding.pe"][0]
    # The package stores the code its authors' machine computed in float32; the arguments reach
    # 383 rad, where one float32 ulp of the argument is 3e-5, so CPUs whose sin and exp round
    # differently disagree by that much (1.5e-5 seen on one). A wrong formula is off by far more.
    torch.testing.assert_close(backbone.positions, pe, rtol=0, atol=5e-5)


def test_backbone_frames_equal_the_packages_modules_alone_and_in_a_padded_batch(clips, expected_frames):
    backbone = DistillMosBackbone(pretrained=True).eval()
    with torch.no_grad():
        batch, batch_lengths = backbone(*padded(clips[::-1]))
        for i, (clip, expected) in enumerate(zip(clips, expected_frames, strict=True)):
            alone, lengths = backbone(clip[None], torch.tensor([clip.shape[0]]))
            assert int(lengths[0]) == expected.shape[0] == int(batch_lengths[1 - i])
            torch.testing.assert_close(alone[0], expected, atol=1e-5, rtol=0)
            torch.testing.assert_close(batch[1 - i, : expected.shape[0]], expected, atol=1e-5, rtol=0)


def test_zero_shot_scores_equal_the_packages_alone_and_from_an_export_in_a_batch(reference, clips, tmp_path):
    with torch.no_grad():
        expected = [float(reference(clip[None]).flatten()[0]) for clip in clips]
        model = zero_shot_predictor()
        alone = [float(model(clip[None], torch.tensor([clip.shape[0]])).score[0]) for clip in clips]
    assert alone == pytest.approx(expected, abs=1e-4)
    # The export carries the weights: it scores the clips together (one padded batch) as the package does.
    export_predictor(model, tmp_path / "export", sample_rate=16000, domains=[])
    scores = sqa.load(tmp_path / "export").score([c.numpy() for c in clips], 16000)
    assert scores == pytest.approx(expected, abs=1e-4)
    assert np.ptp(expected) > 0.1  # the two clips score apart: a constant would not pass


def test_the_backbone_config_loads_the_packages_weights(reference):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["model/backbone=distillmos"])
    model = instantiate(cfg.model)
    torch.testing.assert_close(
        model.backbone.layers[6].linear2.weight,
        reference.state_dict()[
            "transformer_pool_attn.transformer.transformer_encoder.layers.6.linear2.weight"
        ],
        rtol=0,
        atol=0,
    )
