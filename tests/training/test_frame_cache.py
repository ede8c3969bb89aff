"""The frozen backbone's frame cache: exact frames, one backbone pass per clip, the same training."""

from __future__ import annotations

import copy
import functools

import lightning as L
import pytest
import torch

from sqa.models.backbone import LogMelBackbone
from sqa.models.ensemble import EnsemblePredictor
from sqa.models.predictor import MOSPredictor
from sqa.training.frame_cache import FrameCache, FrameStore, fingerprint
from sqa.training.lit_module import MOSModule
from sqa.training.losses import margin_l1
from tests.training.test_lit_module import items, loader, trainer


class Counting(torch.nn.Module):
    """A backbone that counts the clips it is given."""

    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.inner = backbone
        self.clips = 0

    def forward(self, wav, lengths):
        self.clips += len(lengths)
        return self.inner(wav, lengths)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    wav = torch.randn(3, 9000)
    lengths = torch.tensor([9000, 5000, 700])
    return wav, lengths


def test_cached_frames_are_the_backbones_and_each_clip_passes_once():
    torch.manual_seed(0)
    backbone = Counting(LogMelBackbone(channels=16).eval())
    wav, lengths = batch()
    expected, expected_lengths = backbone.inner(wav, lengths)
    cache = FrameCache(1 << 20)
    for _ in range(2):
        frames, frame_lengths = cache.frames(backbone, wav, lengths)
        assert torch.equal(frame_lengths, expected_lengths)
        for i, n in enumerate(frame_lengths):
            assert torch.allclose(frames[i, :n], expected[i, :n], atol=1e-6)
    assert backbone.clips == 3 and (cache.hits, cache.misses) == (3, 3)
    # The second clip beside a clip the cache has not seen, padded otherwise: only its own samples count.
    other = torch.randn(1, 9000)
    second = torch.nn.functional.pad(wav[1:2, :5000], (0, 4000))
    mixed = torch.cat([second, other])
    frames, frame_lengths = cache.frames(backbone, mixed, torch.tensor([5000, 9000]))
    assert backbone.clips == 4
    assert torch.allclose(frames[0, : frame_lengths[0]], expected[1, : expected_lengths[1]], atol=1e-6)


def test_another_crop_is_another_clip_and_a_full_cache_stores_nothing_more():
    backbone = Counting(LogMelBackbone(channels=16).eval())
    wav, lengths = batch()
    cache = FrameCache(1 << 20)
    cache.frames(backbone, wav, lengths)
    cache.frames(backbone, wav[:, 100:], lengths - 100)
    assert cache.misses == 6 and cache.hits == 0
    empty = FrameCache(0)
    for _ in range(2):
        frames, _ = empty.frames(backbone, wav, lengths)
    assert empty.frames_of == {} and empty.misses == 6
    assert frames.shape[0] == 3
    cache.clear()
    assert cache.frames_of == {} and cache.bytes == 0


def fit(tmp_path, **schedule) -> tuple[MOSPredictor, MOSModule]:
    torch.manual_seed(0)
    predictor = MOSPredictor(LogMelBackbone(channels=16, conv_layers=1))
    module = MOSModule(predictor, margin_l1, functools.partial(torch.optim.SGD, lr=0.05), **schedule)
    first, second = items(3), items(3, offset=3)
    # Each batch twice: the second pass finds its clips in the cache.
    trainer(tmp_path, max_steps=4, limit_val_batches=0).fit(module, loader(first, second, first, second))
    return predictor, module


@pytest.mark.parametrize("steps", [4, 2])
def test_training_with_the_cache_equals_training_without_it(tmp_path, steps):
    cached, module = fit(tmp_path, freeze_backbone_steps=steps)
    plain, without = fit(tmp_path, freeze_backbone_steps=steps, frame_cache_mb=0)
    assert without.frame_cache is None
    for (key, a), b in zip(cached.state_dict().items(), plain.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), key
    if steps == 4:
        # Frozen throughout: the first pass filled the cache, the second used it.
        assert (module.frame_cache.misses, module.frame_cache.hits) == (6, 6)
    else:
        # Unfrozen after two steps: the cache was emptied and no longer used.
        assert module.frame_cache.frames_of == {} and module.frame_cache.hits == 0
    with pytest.raises(ValueError, match="frame_cache_mb"):
        MOSModule(cached, margin_l1, torch.optim.SGD, freeze_backbone_steps=1, frame_cache_mb=-1)


class Renamed(LogMelBackbone):
    """The same layers as LogMelBackbone under another class."""


def passes(backbone: torch.nn.Module) -> list[int]:
    """A list that grows by the batch size at each forward pass of `backbone`."""
    calls: list[int] = []
    backbone.register_forward_hook(lambda module, args, out: calls.append(len(args[1])))
    return calls


def test_a_fingerprint_follows_every_weight_buffer_and_the_class():
    torch.manual_seed(0)
    base = LogMelBackbone(channels=16, conv_layers=1)
    assert fingerprint(copy.deepcopy(base)) == fingerprint(base)
    moved = copy.deepcopy(base)
    with torch.no_grad():
        next(moved.parameters()).view(-1)[0] += 1e-3
    unsaved = copy.deepcopy(base)
    unsaved.fbank[0, 0] += 1e-3  # a buffer that is not in the state dict
    renamed = Renamed(channels=16, conv_layers=1)
    renamed.load_state_dict(base.state_dict())
    assert len({fingerprint(m) for m in (base, moved, unsaved, renamed)}) == 4


def shared_fit(
    tmp_path, backbone: torch.nn.Module, store: FrameStore, steps: int = 2, freeze: int = 2
) -> tuple[MOSModule, L.Trainer]:
    """A module over `backbone` sharing `store` and its trainer, after `steps` steps on six clips."""
    torch.manual_seed(0)
    module = MOSModule(
        MOSPredictor(backbone),
        margin_l1,
        functools.partial(torch.optim.SGD, lr=0.05),
        freeze_backbone_steps=freeze,
    )
    module.share_frames(store)
    fitting = trainer(tmp_path, max_steps=steps, limit_val_batches=0)
    fitting.fit(module, loader(items(3), items(3, offset=3)))
    return module, fitting


def test_modules_over_equal_frozen_backbones_pass_each_clip_once_between_them(tmp_path):
    torch.manual_seed(0)
    base = LogMelBackbone(channels=16, conv_layers=1)
    store = FrameStore()
    first, second, other = copy.deepcopy(base), copy.deepcopy(base), copy.deepcopy(base)
    with torch.no_grad():
        next(other.parameters()).view(-1)[0] += 1e-3
    counts = [passes(b) for b in (first, second, other)]
    modules = [shared_fit(tmp_path, b, store)[0] for b in (first, second, other)]
    # The second found every clip; the one with another weight had its own cache.
    assert [sum(c) for c in counts] == [6, 0, 6]
    assert modules[0].frame_cache is modules[1].frame_cache is not modules[2].frame_cache
    # Sharing changes no number: the same training as a module with its own cache.
    torch.manual_seed(0)
    alone = MOSPredictor(copy.deepcopy(base))
    own = MOSModule(alone, margin_l1, functools.partial(torch.optim.SGD, lr=0.05), freeze_backbone_steps=2)
    trainer(tmp_path, max_steps=2, limit_val_batches=0).fit(own, loader(items(3), items(3, offset=3)))
    for (key, a), b in zip(
        modules[1].predictor.state_dict().items(), alone.state_dict().values(), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-6), key


@pytest.mark.parametrize(("steps", "expected"), [(2, 0), (3, 3)])
def test_testing_reuses_frames_only_while_the_backbone_is_as_it_started(tmp_path, steps, expected):
    # Frozen for 2 steps: after 2 steps the backbone never learned; after 3 it learned at step 2.
    backbone = LogMelBackbone(channels=16, conv_layers=1)
    counted = passes(backbone)
    module, fitting = shared_fit(tmp_path, backbone, FrameStore(), steps=steps)
    before = sum(counted)
    module.test_names = ["t"]
    # Tested by the trainer that trained it, at its last step, as a run tests.
    fitting.test(module, dataloaders=[loader(items(3))], verbose=False)
    assert sum(counted) - before == expected
    # A later trainer starts at step 0: a backbone that learned is still not taken as untouched.
    trainer(tmp_path).test(module, dataloaders=[loader(items(3))], verbose=False)
    assert sum(counted) - before == 2 * expected
    plain = MOSModule(copy.deepcopy(module.predictor), loss=None, optimizer=None, test_names=["t"])
    trainer(tmp_path).test(plain, dataloaders=[loader(items(3))], verbose=False)
    assert [r["pred"] for r in module.test_predictions] == pytest.approx(
        [r["pred"] for r in plain.test_predictions], abs=1e-5
    )


@pytest.mark.parametrize(("shared", "expected"), [(True, 0), (False, 3)])
def test_an_evaluation_only_module_reads_the_store_it_is_given(tmp_path, shared, expected):
    backbone = LogMelBackbone(channels=16, conv_layers=1)
    store = FrameStore()
    module, _ = shared_fit(tmp_path, backbone, store)
    counted = passes(backbone)
    tester = MOSModule(
        module.predictor, loss=None, optimizer=None, test_names=["t"], frame_store=store if shared else None
    )
    trainer(tmp_path).test(tester, dataloaders=[loader(items(3))], verbose=False)
    assert sum(counted) == expected


@pytest.mark.parametrize(("shared", "expected"), [(True, [0, 3]), (False, [3, 3])])
def test_an_ensembles_members_read_the_store_member_by_member(tmp_path, shared, expected):
    # The first member's frozen backbone filled the store while it trained; the second's did not.
    store = FrameStore()
    trained, _ = shared_fit(tmp_path, LogMelBackbone(channels=16, conv_layers=1), store)
    torch.manual_seed(5)
    other = MOSPredictor(LogMelBackbone(channels=8, conv_layers=1))
    counted = [passes(trained.predictor.backbone), passes(other.backbone)]
    ensemble = EnsemblePredictor([trained.predictor, other], [[0.25, 0.75]], [0.1]).eval()
    tester = MOSModule(
        ensemble, loss=None, optimizer=None, test_names=["t"], frame_store=store if shared else None
    )
    trainer(tmp_path).test(tester, dataloaders=[loader(items(3))], verbose=False)
    assert [sum(c) for c in counted] == expected
    # The same scores as the ensemble run whole: 0.1 + 0.25 · first + 0.75 · second.
    with torch.no_grad():
        wav, lengths = batch()
        whole = ensemble(wav, lengths)
        combined = ensemble.combine([m(wav, lengths) for m in ensemble.members], lengths)
        by_hand = 0.1 + 0.25 * trained.predictor(wav, lengths).score + 0.75 * other(wav, lengths).score
    assert torch.allclose(combined.scores, whole.scores) and torch.allclose(whole.score, by_hand, atol=1e-6)
    plain = MOSModule(ensemble, loss=None, optimizer=None, test_names=["t"])
    trainer(tmp_path).test(plain, dataloaders=[loader(items(3))], verbose=False)
    assert [r["pred"] for r in tester.test_predictions] == pytest.approx(
        [r["pred"] for r in plain.test_predictions], abs=1e-5
    )
    with pytest.raises(ValueError, match="one prediction per member"):
        ensemble.combine([whole], lengths)
    # A module that may train its members never takes their frames from the store, frozen or not.
    learner = MOSModule(
        ensemble, margin_l1, torch.optim.SGD, test_names=["t"], frame_store=store, freeze_backbone_steps=1
    )
    before = sum(counted[0])
    trainer(tmp_path).test(learner, dataloaders=[loader(items(3))], verbose=False)
    assert sum(counted[0]) - before == 3


@pytest.mark.parametrize("expected", [40, None])
def test_filling_the_cache_says_it_starts_and_how_far_it_is(caplog, monkeypatch, expected):
    import logging

    from sqa.training import frame_cache

    # 100 s starts; 104 s is within 10 s of it; 110 s is exactly 10 s on, and reports; 112 s is
    # within 10 s of that; 125 s reports.
    clock = iter([100.0, 104.0, 110.0, 112.0, 125.0])
    monkeypatch.setattr(frame_cache.time, "monotonic", lambda: next(clock))
    backbone = LogMelBackbone(channels=512, conv_layers=1).eval()
    wav = torch.randn(5, 16000)
    size = backbone(wav[:1], torch.tensor([16000]))[0].numel() * 4
    # Room for exactly three clips' frames: the fourth and fifth are computed, not kept.
    cache = FrameCache(3 * size, progress_seconds=10.0)
    cache.expected = expected
    caplog.set_level(logging.INFO, logger="sqa")
    for i in range(5):
        cache.frames(backbone, wav[i : i + 1], torch.tensor([16000]))
    cache.frames(backbone, wav[:1], torch.tensor([16000]))  # a hit: no pass, nothing to say
    assert (len(cache.frames_of), cache.bytes) == (3, 3 * size)
    count, of = (" (40)", " of about 40") if expected else ("", "")
    mb = size / 2**20
    assert [r.getMessage() for r in caplog.records] == [
        f"frame cache: each clip{count} passes once through the frozen backbone, its frames then reused; "
        "this first pass is the slow part (progress every 10 s)",
        f"frame cache: 2 clip(s){of} through the backbone, 10 s, {2 * mb:.1f} MB kept; computing 1 more",
        f"frame cache: 4 clip(s){of} through the backbone, 25 s, {3 * mb:.1f} MB kept; computing 1 more",
    ]
