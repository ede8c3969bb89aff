"""What the frame store keys a backbone's cache by: everything that changes its frames, nothing else."""

from __future__ import annotations

import copy
import enum
import json
from pathlib import Path

import torch

from sqa.models.distillmos import DistillMosBackbone
from sqa.models.ssl import TorchaudioWav2Vec2
from sqa.training.frame_cache import FrameStore, fingerprint
from tests.models.test_ssl_sources import every_backbone
from tests.training.test_frame_cache import passes

MAX_BYTES = 1 << 24


def clips() -> tuple[torch.Tensor, torch.Tensor]:
    """Two clips (2, 6000) off zero mean and unit variance, so that normalising them changes them."""
    generator = torch.Generator().manual_seed(3)
    wav = 0.3 * torch.randn(2, 6000, generator=generator) + 0.2
    return wav, torch.tensor([6000, 4100])


def tiny_wav2vec2(normalize: bool, like: torch.nn.Module | None = None) -> TorchaudioWav2Vec2:
    """The random-init tiny torchaudio wav2vec2 in eval mode, with the weights of `like` if given."""
    torch.manual_seed(0)
    backbone = TorchaudioWav2Vec2(normalize=normalize).eval()
    if like is not None:
        backbone.load_state_dict(like.state_dict())
    return backbone


@torch.no_grad()
def test_backbones_that_differ_only_in_normalize_get_their_own_frames():
    raw = tiny_wav2vec2(normalize=False)
    normalised = tiny_wav2vec2(normalize=True, like=raw)
    for (name, a), b in zip(raw.state_dict().items(), normalised.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    store = FrameStore()
    wav, lengths = clips()
    own = {}
    for backbone in (raw, normalised):
        cache = store.cache_for(backbone, MAX_BYTES)
        frames, frame_lengths = cache.frames(backbone, wav, lengths)
        expected, expected_lengths = backbone(wav, lengths)
        assert torch.equal(frame_lengths, expected_lengths)
        assert torch.allclose(frames, expected, atol=1e-5)
        own[id(backbone)] = (cache, frames)
    (raw_cache, raw_frames), (normalised_cache, normalised_frames) = own.values()
    assert raw_cache is not normalised_cache and normalised_cache.hits == 0
    # Not a vacuous check: the two backbones' frames of these clips differ.
    assert (raw_frames - normalised_frames).abs().max() > 1e-2
    # The flag set as an attribute alone (its config left as it was) is another backbone too.
    flipped = copy.deepcopy(raw)
    flipped.normalize = True
    assert store.cache_for(flipped, MAX_BYTES) is not raw_cache
    # So is the training mode (dropout, and a GroupNorm front end's batching, change frames).
    assert store.cache_for(copy.deepcopy(raw).train(), MAX_BYTES) is not raw_cache


@torch.no_grad()
def test_two_equal_backbones_still_share_one_cache():
    first = tiny_wav2vec2(normalize=True)
    second = tiny_wav2vec2(normalize=True, like=first)
    store = FrameStore()
    wav, lengths = clips()
    cache = store.cache_for(first, MAX_BYTES)
    cache.frames(first, wav, lengths)
    counted = passes(second)
    assert store.cache_for(second, MAX_BYTES) is cache
    frames, _ = cache.frames(second, wav, lengths)
    assert sum(counted) == 0 and (cache.hits, cache.misses) == (2, 2)
    assert torch.allclose(frames, second(wav, lengths)[0], atol=1e-5)


def distillmos() -> DistillMosBackbone:
    """A small random-init Distill-MOS network with a fixed CNN (so it can keep fronts), in eval mode."""
    torch.manual_seed(0)
    return DistillMosBackbone(channels=8, conv_layers=2, dim=16, heads=2, layers=1, freeze_cnn=True).eval()


@torch.no_grad()
def test_a_distillmos_backbone_that_kept_fronts_shares_with_its_twin():
    # A fine-tuning candidate keeps its CNN's fronts (`keep_fronts`) before its first cached pass;
    # the frozen candidate over the same network keeps none. They must still read one cache.
    keeping, plain = distillmos(), distillmos()
    keeping.keep_fronts(1 << 20)
    wav, lengths = clips()
    keeping(wav, lengths)
    assert keeping._fronts and keeping._front_used > 0
    store = FrameStore()
    assert store.cache_for(keeping, MAX_BYTES) is store.cache_for(plain, MAX_BYTES)
    # Its configuration still counts: a network that fixes one more layer is another.
    torch.manual_seed(0)
    deeper = DistillMosBackbone(
        channels=8, conv_layers=2, dim=16, heads=2, layers=1, freeze_cnn=True, frozen_layers=1
    ).eval()
    deeper.load_state_dict(plain.state_dict())
    assert store.cache_for(deeper, MAX_BYTES) is not store.cache_for(plain, MAX_BYTES)


@torch.no_grad()
def test_no_backbone_changes_its_key_by_running(tmp_path: Path):
    # A key that changed as a backbone ran (a counter, a tensor kept from the last batch) would
    # never hit again: every kind of backbone keeps its fingerprint across a forward pass.
    wav, lengths = clips()
    for name, backbone in every_backbone(tmp_path).items():
        backbone.eval()
        before = fingerprint(backbone)
        backbone(wav, lengths)
        assert fingerprint(backbone) == before, name


class _Mode(enum.Enum):
    FAST = 1
    SLOW = 2


def _relu(x):
    return x


def test_each_kind_of_setting_counts_by_its_value_and_only_equal_settings_are_equal():
    from sqa.training.frame_cache import configuration_value as value

    # Every pair differs in one setting; each side must give another key.
    pairs = [
        (None, False),
        (True, 1),
        ("a", "b"),
        (2, 3),
        (0.5, 0.25),
        (_Mode.FAST, _Mode.SLOW),
        (torch.relu, torch.tanh),
        (_relu, torch.nn.functional.relu),
        ({"a": 1}, {"a": 2}),
        ({"a": 1}, {"b": 1}),
        ([1, 2], [1, 3]),
        ((1, 2), (2, 1)),
        (torch.nn.Identity(), object()),
    ]
    for a, b in pairs:
        assert json.dumps(value(a)) != json.dumps(value(b)), (a, b)
    # Equal settings give equal keys: a copy, a tuple as its list, a dataclass as its fields.
    assert value({"a": [1, (2, 3)]}) == value({"a": [1, [2, 3]]}) == {"a": [1, [2, 3]]}
    assert value(_Mode.FAST) == "_Mode.FAST"
    assert value(_relu) == f"{__name__}._relu"
    assert value(torch.nn.Identity()) == "<torch.nn.modules.linear.Identity>"


def test_the_order_attributes_were_set_in_does_not_change_the_key():
    first, second = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    second.load_state_dict(first.state_dict())
    first.alpha, first.beta = 1, 2
    second.beta, second.alpha = 2, 1
    assert fingerprint(first) == fingerprint(second)
    second.alpha = 3
    assert fingerprint(first) != fingerprint(second)
