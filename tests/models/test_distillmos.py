"""The Distill-MOS backbone and zero-shot head on a small random-init network (no package needed).

Segment tiling and crops, batch invariance, every head option of MOSPredictor, exports through
`sqa.load` and `sqa-score`, and the checks on an export's architecture. The comparisons with the
`distillmos` package's own network are in test_distillmos_reference.py.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir
from hydra.errors import InstantiationException
from hydra.utils import instantiate

import sqa
from sqa.core.extras import MissingExtraError
from sqa.exports.format import ExportError, export_predictor, load_export
from sqa.models import distillmos, distillmos_weights
from sqa.models.backbone import conv_frame_lengths
from sqa.models.distillmos import (
    SEGMENT,
    SEGMENT_FRAMES,
    DistillMosBackbone,
    DistillMosZeroShot,
    crop_starts,
    segment_starts,
)
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli as score

from ..conftest import REPO

# A network of the same shape with few channels: milliseconds per segment instead of a second.
SMALL = {"channels": 8, "conv_layers": 3, "dim": 16, "heads": 2, "layers": 2}


def small_backbone(**kwargs: object) -> DistillMosBackbone:
    torch.manual_seed(0)
    backbone = DistillMosBackbone(**{**SMALL, **kwargs})
    with torch.no_grad():
        # Random statistics, so that the normalisations are not the identity.
        for module in backbone.modules():
            if isinstance(module, distillmos.FrozenBatchNorm):
                module.running_mean.normal_()
                module.running_var.uniform_(0.5, 2.0)
    return backbone


def padded(clips: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([c.shape[0] for c in clips])
    wav = torch.zeros(len(clips), int(lengths.max()))
    for i, c in enumerate(clips):
        wav[i, : c.shape[0]] = c
    return wav, lengths


def clips_of(seconds: list[float], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [(0.05 + 0.1 * i) * torch.randn(int(s * 16000), generator=g) for i, s in enumerate(seconds)]


@pytest.mark.parametrize(
    "samples",
    [1, 399, 400, 50_000, SEGMENT - 1, SEGMENT, SEGMENT + 1, 140_000, 2 * SEGMENT + 320, 2 * SEGMENT + 399]
    + [3 * SEGMENT + 200, 1_000_003],
)
def test_segments_tile_every_frame_of_the_clip_with_its_own_audio(samples):
    starts = segment_starts(samples)
    frames = int(conv_frame_lengths(torch.tensor(max(samples, 400))))
    assert starts[0] == 0 and all(s % 320 == 0 for s in starts)
    assert len(starts) == math.ceil(frames / SEGMENT_FRAMES)
    # Every frame lies inside the segment that gives it: the earlier ones are back to back, the
    # last one reaches the clip's last frame and holds only the clip's audio when it can.
    for k, start in enumerate(starts):
        first = k * SEGMENT_FRAMES
        last = frames if k == len(starts) - 1 else first + SEGMENT_FRAMES
        assert first - start // 320 >= 0 and last - start // 320 <= SEGMENT_FRAMES
    if samples >= SEGMENT:
        assert starts[-1] + SEGMENT <= samples


def test_crops_are_the_packages():
    # Up to 7.68 s: one crop. Longer: ceil(over / 1 s) + 1 crops from the start to the end.
    assert crop_starts(50_000) == [0] and crop_starts(SEGMENT) == [0]
    assert crop_starts(SEGMENT + 16_000) == [0, 16_000]
    assert crop_starts(SEGMENT + 16_001) == [0, 8000, 16_001]
    # Rounded down, as int() rounds, not to the nearest sample.
    assert crop_starts(SEGMENT + 16_003) == [0, 8001, 16_003]
    assert crop_starts(140_000) == [0, 8560, 17_120]
    assert crop_starts(SEGMENT + 10 * 16_000 + 7) == [int(c * 160_007) for c in np.linspace(0, 1, 12)]


@pytest.mark.parametrize("train", [False, True])
def test_frames_alone_equal_frames_in_a_padded_batch(train):
    backbone = small_backbone().train(train)
    clips = clips_of([0.01, 3.1, 8.75, 20.3])
    with torch.no_grad():
        batch, batch_lengths = backbone(*padded(clips))
        for i, clip in enumerate(clips):
            alone, lengths = backbone(clip[None], torch.tensor([clip.shape[0]]))
            n = int(lengths[0])
            assert n == int(batch_lengths[i]) == max(1, (clip.shape[0] - 400) // 320 + 1)
            torch.testing.assert_close(batch[i, :n], alone[0], atol=1e-5, rtol=1e-5)
            assert not batch[i, n:].any()


def test_frames_come_from_the_segment_under_them():
    backbone = small_backbone().eval()
    clip = clips_of([20.3])[0]
    with torch.no_grad():
        frames, lengths = backbone(clip[None], torch.tensor([clip.shape[0]]))
        whole = backbone.segment_frames(torch.stack([clip[:SEGMENT], clip[SEGMENT : 2 * SEGMENT]]))
        last = (clip.shape[0] - SEGMENT) // 320 * 320
        tail = backbone.segment_frames(clip[None, last : last + SEGMENT])[0]
    count = (clip.shape[0] - 400) // 320 + 1
    assert int(lengths[0]) == count == 1014 and frames.shape == (1, count, 16)
    torch.testing.assert_close(frames[0, :768], whole.flatten(0, 1))
    torch.testing.assert_close(frames[0, 768:], tail[768 - last // 320 : count - last // 320])


@pytest.mark.parametrize("count", [16, 17])
def test_on_a_cpu_the_cnn_takes_one_segment_at_a_time_and_the_transformer_a_pass_of_up_to_16(count):
    # The CNN's activations are large (one at a time); the transformer's products are faster
    # together. 16 segments are one pass of the transformer, 17 two (16 and 1).
    backbone = small_backbone().train()
    torch.manual_seed(1)
    segments = 0.3 * torch.randn(count, SEGMENT)
    seen: dict[str, list[int]] = {"cnn": [], "layer": []}
    hooks = [
        backbone.cnn.register_forward_hook(lambda m, args, out: seen["cnn"].append(args[0].shape[0])),
        backbone.layers[0].register_forward_hook(lambda m, args, out: seen["layer"].append(args[0].shape[0])),
    ]
    with torch.no_grad():
        together = backbone.segment_frames(segments)
    for hook in hooks:
        hook.remove()
    assert seen == {"cnn": [1] * count, "layer": [16] if count == 16 else [16, 1]}
    with torch.no_grad():
        alone = torch.cat([backbone.segment_frames(segment[None]) for segment in segments])
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)


def test_samples_past_a_clips_length_are_not_read():
    backbone = small_backbone().eval()
    clip = clips_of([2.0])[0]
    noisy = torch.cat([clip, torch.randn(5000)])[None]
    with torch.no_grad():
        torch.testing.assert_close(
            backbone(noisy, torch.tensor([clip.shape[0]]))[0], backbone(clip[None], torch.tensor([32_000]))[0]
        )


def f0_for(clips: list[torch.Tensor]) -> torch.Tensor:
    """A voiced f0 track at 20 ms (N / 320 + 1 frames, as the extractors give), zero-padded."""
    tracks = [220.0 + 30.0 * torch.sin(torch.arange(c.shape[0] // 320 + 1) / 7.0) for c in clips]
    return padded(tracks)[0]


HEAD_OPTIONS = {
    "default": {},
    "midi": {"pitch": "midi", "pitch_dim": 8},
    "histogram": {"pitch": "histogram", "pitch_dim": 8},
    "intonation": {"pitch": "intonation", "pitch_dim": 8},
    "domain": {"num_domains": 3, "domain_dim": 4},
    "judges": {"num_judges": 5, "judge_dim": 4},
    "dimensions": {"dimensions": ["mos", "melody"]},
    "mushra_scale": {"score_range": [0, 100]},
    "s3prl_pooling": {"pooling": "s3prl_padded_mean"},
}


@pytest.mark.parametrize("option", sorted(HEAD_OPTIONS))
def test_every_head_option_scores_alone_as_in_a_batch_and_trains(option):
    model = MOSPredictor(small_backbone(), head_dim=8, **HEAD_OPTIONS[option]).eval()
    clips = clips_of([1.5, 9.0])
    wav, lengths = padded(clips)
    domain, f0 = torch.tensor([2, 1]) if option == "domain" else None, f0_for(clips)
    with torch.no_grad():
        batch = model(wav, lengths, domain, f0)
        for i, clip in enumerate(clips):
            alone = model(
                clip[None],
                lengths[i : i + 1],
                None if domain is None else domain[i : i + 1],
                f0_for([clip]),
            )
            torch.testing.assert_close(batch.scores[i], alone.scores[0], atol=1e-5, rtol=1e-5)
    assert batch.scores.shape == (2, len(model.dimensions))
    assert batch.frame_lengths.tolist() == [(n - 400) // 320 + 1 for n in lengths.tolist()]
    model.train()
    out = model(wav, lengths, domain, f0)
    out.scores.sum().backward()
    assert model.backbone.layers[0].linear1.weight.grad.abs().sum() > 0


def test_freeze_cnn_keeps_the_spectrogram_cnn_fixed():
    backbone = small_backbone(freeze_cnn=True)
    assert not any(p.requires_grad for p in backbone.cnn.parameters())
    assert all(p.requires_grad for p in backbone.layers.parameters())


@pytest.mark.parametrize("below", [0, 1, 2])
def test_frozen_layers_keep_the_projection_and_the_layers_below_fixed(below):
    backbone = small_backbone(freeze_cnn=True, frozen_layers=below)
    fixed = [backbone.cnn, *backbone.layers[:below]]
    if below:
        fixed += [backbone.projection, backbone.input_norm, backbone.projection_norm]
    learning = [*backbone.layers[below:], backbone.output_norm]
    if not below:
        learning += [backbone.projection, backbone.input_norm, backbone.projection_norm]
    assert not any(p.requires_grad for m in fixed for p in m.parameters())
    assert all(p.requires_grad for m in learning for p in m.parameters())
    assert {id(m) for m in backbone.front_modules()} == {id(m) for m in fixed}


@pytest.mark.parametrize("below", [1, 2])
def test_frozen_layers_change_what_learns_not_the_frames(below):
    expected, _ = frames_and_gradients(small_backbone())
    for keep in (0, 1 << 30):
        backbone = small_backbone(freeze_cnn=True, frozen_layers=below)
        backbone.keep_fronts(keep)
        for _ in range(2):
            torch.testing.assert_close(frames_and_gradients(backbone)[0], expected, atol=0, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"freeze_cnn": True, "frozen_layers": 3}, r"in \[0, 2\]"),
        ({"freeze_cnn": True, "frozen_layers": -1}, r"in \[0, 2\]"),
        ({"freeze_cnn": False, "frozen_layers": 1}, "set freeze_cnn=true"),
    ],
)
def test_frozen_layers_out_of_range_or_without_a_frozen_cnn_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        small_backbone(**kwargs)


def clips_of_two_segments() -> tuple[torch.Tensor, torch.Tensor]:
    """Two clips: one of two segments, one shorter than a segment (three segments in all)."""
    torch.manual_seed(3)
    return padded([0.3 * torch.randn(SEGMENT + 5000), 0.3 * torch.randn(9000)])


def frames_and_gradients(backbone: DistillMosBackbone) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The frames of `clips_of_two_segments`, and the gradients of their sum of squares (learning weights)."""
    backbone.zero_grad()
    frames, _ = backbone(*clips_of_two_segments())
    frames.pow(2).sum().backward()
    return frames.detach(), [p.grad.clone() for p in backbone.parameters() if p.requires_grad]


def cnn_segments(backbone: DistillMosBackbone) -> list[int]:
    """A counter of the segments the backbone's CNN is given, from now on."""
    seen = [0]
    backbone.cnn.register_forward_hook(lambda module, args, out: seen.__setitem__(0, seen[0] + out.shape[0]))
    return seen


@pytest.mark.parametrize("below", [0, 1])
def test_kept_fronts_give_the_whole_networks_frames_and_gradients_with_one_front_pass_a_segment(below):
    expected, expected_grads = frames_and_gradients(small_backbone(freeze_cnn=True, frozen_layers=below))
    backbone = small_backbone(freeze_cnn=True, frozen_layers=below)
    seen = cnn_segments(backbone)
    backbone.keep_fronts(1 << 30)
    for _ in range(3):
        frames, grads = frames_and_gradients(backbone)
        torch.testing.assert_close(frames, expected, atol=0, rtol=0)
        for grad, want in zip(grads, expected_grads, strict=True):
            torch.testing.assert_close(grad, want, atol=1e-6, rtol=1e-5)
    assert seen == [3] and len(backbone._fronts) == 3
    backbone.keep_fronts(0)
    frames_and_gradients(backbone)
    assert seen == [6] and backbone._fronts is None


def test_kept_fronts_stay_within_their_bytes():
    backbone = small_backbone(freeze_cnn=True)
    one = SEGMENT_FRAMES * backbone.cnn.output_dim * 4
    expected, _ = frames_and_gradients(backbone)
    for budget, kept in [(one - 1, 0), (one, 1), (3 * one - 1, 2), (3 * one, 3)]:
        backbone.keep_fronts(budget)
        frames, _ = frames_and_gradients(backbone)
        assert len(backbone._fronts) == kept
        torch.testing.assert_close(frames, expected, atol=0, rtol=0)


def test_a_front_that_learns_is_never_kept():
    # A CNN that learns has no fixed front at all.
    backbone = small_backbone()
    backbone.keep_fronts(1 << 30)
    frames_and_gradients(backbone)
    assert backbone._fronts is None and backbone.cnn.convs[0].weight.grad.abs().sum() > 0
    # A fixed CNN set to learn after fronts were kept: no front is kept or reused from then on.
    backbone = small_backbone(freeze_cnn=True)
    backbone.keep_fronts(1 << 30)
    frames_and_gradients(backbone)
    backbone.cnn.requires_grad_(True)
    seen = cnn_segments(backbone)
    frames_and_gradients(backbone)
    assert seen == [3] and backbone.cnn.convs[0].weight.grad.abs().sum() > 0


def test_loading_weights_forgets_the_kept_fronts():
    other = small_backbone(freeze_cnn=True, frozen_layers=1)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    expected, _ = frames_and_gradients(other)
    backbone = small_backbone(freeze_cnn=True, frozen_layers=1)
    backbone.keep_fronts(1 << 30)
    before, _ = frames_and_gradients(backbone)
    backbone.load_state_dict(other.state_dict())
    frames, _ = frames_and_gradients(backbone)
    assert not torch.allclose(before, expected)
    torch.testing.assert_close(frames, expected, atol=0, rtol=0)


def test_kept_fronts_outlive_a_reload_of_the_same_front_and_a_second_request():
    # A resumed fit reloads its own checkpoint and asks to keep fronts again: they stay, and no
    # segment passes through the CNN again.
    backbone = small_backbone(freeze_cnn=True, frozen_layers=1)
    backbone.keep_fronts(1 << 30)
    before, _ = frames_and_gradients(backbone)
    seen = cnn_segments(backbone)
    with torch.no_grad():
        backbone.layers[1].linear1.weight.add_(0.1)  # a layer above the front learned
    learned = copy.deepcopy(backbone.state_dict())
    backbone.load_state_dict(learned)
    backbone.keep_fronts(1 << 30)
    frames, _ = frames_and_gradients(backbone)
    assert seen == [0] and len(backbone._fronts) == 3
    assert not torch.allclose(frames, before)
    fresh = small_backbone(freeze_cnn=True, frozen_layers=1)
    fresh.load_state_dict(learned)
    torch.testing.assert_close(frames, frames_and_gradients(fresh)[0], atol=0, rtol=0)
    # One weight of the front itself changed: its kept fronts are forgotten, then computed anew.
    learned["layers.0.linear1.weight"] += 0.1
    backbone.load_state_dict(learned)
    assert backbone._fronts == {}
    frames_and_gradients(backbone)
    assert seen == [3]
    # Those of the new front stay through the next reload of it.
    backbone.load_state_dict(learned)
    frames_and_gradients(backbone)
    assert seen == [3] and len(backbone._fronts) == 3


def test_the_config_composes_and_fine_tunes():
    small = [f"model.backbone.{k}={v}" for k, v in SMALL.items()]
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "train", overrides=["model/backbone=distillmos", "model.backbone.pretrained=false", *small]
        )
    model = instantiate(cfg.model)
    assert isinstance(model.backbone, DistillMosBackbone) and model.backbone.config.freeze_cnn
    out = model(torch.randn(2, 20_000), torch.tensor([20_000, 9000]))
    out.score.sum().backward()
    assert model.head[0].weight.grad is not None and model.backbone.cnn.convs[0].weight.grad is None
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=["model/backbone=distillmos", "data.sample_rate=22050"])
    with pytest.raises(InstantiationException, match="16 kHz"):
        instantiate(cfg.model.backbone)


def write_clips(folder, clips: list[torch.Tensor]) -> list[str]:
    import soundfile as sf

    paths = []
    for i, clip in enumerate(clips):
        paths.append(str(folder / f"clip{i}.wav"))
        sf.write(paths[-1], clip.numpy(), 16000, subtype="FLOAT")
    return paths


@pytest.mark.parametrize("kind", ["fine_tuned", "zero_shot"])
def test_an_export_scores_through_sqa_load_and_sqa_score_as_in_memory(kind, tmp_path, monkeypatch):
    backbone = small_backbone()
    torch.manual_seed(1)
    model = (
        MOSPredictor(backbone, head_dim=8) if kind == "fine_tuned" else DistillMosZeroShot(backbone)
    ).eval()
    export_predictor(model, tmp_path / "export", sample_rate=16000, domains=[])
    config = yaml.safe_load((tmp_path / "export" / "config.yaml").read_text())
    assert config["model"]["backbone"]["_target_"] == "sqa.models.distillmos.DistillMosBackbone"
    assert "pretrained" not in config["model"]["backbone"]

    # Loading and scoring never look for the package or its weight file.
    def no_package() -> None:
        raise AssertionError("the distillmos package was looked for")

    monkeypatch.setattr(distillmos_weights, "package_weights_path", no_package)
    clips = clips_of([2.5, 12.0, 0.5])
    with torch.no_grad():
        expected = model(*padded(clips)).score.tolist()
    scorer = sqa.load(tmp_path / "export")
    assert scorer.score([c.numpy() for c in clips], 16000) == pytest.approx(expected, abs=1e-5)
    paths = write_clips(tmp_path, clips)
    assert (
        score.main(["--checkpoint", str(tmp_path / "export"), "--output", str(tmp_path / "s.json"), *paths])
        == 0
    )
    rows = json.loads((tmp_path / "s.json").read_text())
    assert [r["score"] for r in rows] == pytest.approx(expected, abs=1e-5)
    if kind == "zero_shot":
        with pytest.raises(ValueError, match="attention head"):
            sqa.load(tmp_path / "export", pooling="masked_mean")


def test_zero_shot_frames_carry_the_clip_score():
    model = DistillMosZeroShot(small_backbone()).eval()
    clips = clips_of([3.0, 10.0])
    with torch.no_grad():
        out = model(*padded(clips))
    assert out.frame_lengths.tolist() == [149, 499]
    torch.testing.assert_close(out.frame_scores[1, :499], out.score[1].expand(499))
    assert not out.frame_scores[0, 149:].any() and ((out.score > 1) & (out.score < 5)).all()


def edit_backbone(export, **changes: object) -> None:
    path = export / "config.yaml"
    config = yaml.safe_load(path.read_text())
    config["model"]["backbone"].update(changes)
    path.write_text(yaml.safe_dump(config))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"conv_layers": 8}, "conv_layers must be 1..7"),
        ({"conv_layers": 60_000}, "conv_layers must be 1..7"),
        ({"heads": 3}, "cannot build model.backbone"),
        ({"sample_rate": 8000}, "16 kHz"),
        # About 1.6 G parameters: refused from the architecture built on the meta device.
        ({"dim": 4096, "heads": 8, "layers": 8}, "parameters; an export holds at most"),
        # It would read the package's weight file: an export's weights are in its model.pt.
        ({"pretrained": True}, "never names files to read"),
    ],
)
def test_an_export_declaring_another_architecture_is_refused(changes, message, tmp_path):
    model = MOSPredictor(small_backbone(), head_dim=8)
    export_predictor(model, tmp_path / "export", sample_rate=16000, domains=[])
    edit_backbone(tmp_path / "export", **changes)
    with pytest.raises(ExportError, match=message):
        load_export(tmp_path / "export")


def test_an_exports_declared_size_is_the_models():
    model = DistillMosZeroShot(DistillMosBackbone())
    with torch.device("meta"):
        sized = DistillMosZeroShot(DistillMosBackbone())
    assert {k: v.shape for k, v in sized.state_dict().items()} == {
        k: v.shape for k, v in model.state_dict().items()
    }
    # Distill-MOS v7's parameters (its 16.9 MB weight file).
    assert sum(p.numel() for p in model.parameters()) == 4_133_226


def test_pretrained_weights_without_the_package_name_the_extra(monkeypatch):
    util = distillmos_weights.importlib.util
    real = util.find_spec
    monkeypatch.setattr(util, "find_spec", lambda name: None if name == "distillmos" else real(name))
    with pytest.raises(MissingExtraError, match=r"pip install 'sqa\[distillmos\]'"):
        DistillMosBackbone(pretrained=True)
