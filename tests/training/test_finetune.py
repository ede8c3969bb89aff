"""Starting points: the head at the training mean, a frozen-then-slower backbone, an export's architecture."""

from __future__ import annotations

import functools
import json

import numpy as np
import pytest
import torch

from sqa.exports.format import ExportError, export_predictor, load_export, read_architecture
from sqa.models.backbone import LogMelBackbone
from sqa.models.calibrated import CalibratedPredictor
from sqa.models.distillmos import DistillMosBackbone
from sqa.models.predictor import MOSPredictor
from sqa.training.finetune import Anchor, backbone_optimizer, pretrained_parameters
from sqa.training.lit_module import MOSModule
from sqa.training.losses import margin_l1
from sqa.training.run import build, run
from tests.training.test_lit_module import items, loader, trainer
from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus

SR = 16000


def tiny_predictor(**kwargs) -> MOSPredictor:
    torch.manual_seed(0)
    return MOSPredictor(LogMelBackbone(channels=16, conv_layers=1), **kwargs)


def scores(predictor: MOSPredictor) -> torch.Tensor:
    """Scores on the predictor's own scale of three random clips of unequal lengths."""
    torch.manual_seed(1)
    wav = torch.randn(3, 12000)
    with torch.no_grad():
        return predictor.to_scale(predictor.eval()(wav, torch.tensor([12000, 9000, 4000])).scores)


@pytest.mark.parametrize(
    ("kwargs", "start"),
    [
        ({}, [3.7]),
        ({"range_clip": False}, [3.7]),
        ({"score_range": [0, 100]}, [62.0]),
        ({"dimensions": ["mos", "lyrics"]}, [2.2, 4.1]),
    ],
)
def test_start_at_scores_every_clip_with_the_given_scores(kwargs, start):
    predictor = tiny_predictor(**kwargs)
    before = scores(predictor)
    assert not torch.allclose(before, torch.tensor(start).expand_as(before), atol=1e-3)
    predictor.start_at(start)
    assert torch.allclose(scores(predictor), torch.tensor(start).expand(3, len(start)), atol=1e-4)


def test_start_at_keeps_off_the_range_clips_asymptotes_and_checks_its_length():
    predictor = tiny_predictor()
    predictor.start_at([5.0])
    assert scores(predictor)[:, 0] == pytest.approx([4.99] * 3, abs=1e-4)
    predictor.start_at([1.0])
    assert scores(predictor)[:, 0] == pytest.approx([1.01] * 3, abs=1e-4)
    with pytest.raises(ValueError, match="start_at needs 1 scores"):
        predictor.start_at([3.0, 3.0])


@pytest.fixture(scope="module")
def manifest(tmp_path_factory):
    return write_per_system_corpus(tmp_path_factory.mktemp("per-system"))


def train_labels(manifest) -> list[float]:
    rows = [line.split(",") for line in manifest.read_text(encoding="utf-8").splitlines()[1:]]
    return [float(r[1]) for r in rows if r[4] == "train"]


def test_head_init_train_mean_starts_a_run_as_the_constant_predictor(manifest):
    _, module = build(compose_train([*tiny_run_overrides(manifest), "head_init=train_mean"]))
    assert scores(module.predictor)[:, 0] == pytest.approx([np.mean(train_labels(manifest))] * 3, abs=1e-4)
    _, random = build(compose_train([*tiny_run_overrides(manifest), "head_init=random"]))
    assert scores(random.predictor)[:, 0] != pytest.approx([np.mean(train_labels(manifest))] * 3, abs=1e-3)
    with pytest.raises(ValueError, match="head_init must be one of"):
        build(compose_train([*tiny_run_overrides(manifest), "head_init=zero"]))


def fit_steps(tmp_path, steps: int, **schedule) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(backbone weights, head weights) after each of `steps` SGD steps of a tiny module."""
    predictor = tiny_predictor()
    module = MOSModule(
        predictor, margin_l1, functools.partial(torch.optim.SGD, lr=0.05), valid_names=[], **schedule
    )
    seen = []

    class Record(__import__("lightning").Callback):
        def on_train_batch_end(self, *args, **kwargs):
            seen.append(
                (
                    predictor.backbone.convs[0].weight.detach().clone(),
                    predictor.head[0].weight.detach().clone(),
                )
            )

    trainer(tmp_path, max_steps=steps, callbacks=[Record()], limit_val_batches=0).fit(
        module, loader(*[items(4, offset=4 * k) for k in range(steps)])
    )
    return seen


def test_a_frozen_backbone_learns_only_after_its_steps_and_at_its_scaled_rate(tmp_path):
    torch.manual_seed(0)
    start = tiny_predictor().backbone.convs[0].weight.detach().clone()
    frozen = fit_steps(tmp_path, 5, freeze_backbone_steps=3, backbone_lr_scale=0.5)
    # Steps 1-3 leave the backbone as it was while the head learns; steps 4 and 5 move it.
    for backbone, _ in frozen[:3]:
        assert torch.equal(backbone, start)
    assert not torch.equal(frozen[2][1], frozen[0][1])
    assert not torch.equal(frozen[3][0], start)
    assert not torch.equal(frozen[4][0], frozen[3][0])
    # Without a freeze the backbone moves from the first step.
    plain = fit_steps(tmp_path, 1)
    assert not torch.equal(plain[0][0], start)


def test_the_backbone_rate_is_scaled_and_the_head_rate_is_not(tmp_path):
    module = MOSModule(
        tiny_predictor(), margin_l1, functools.partial(torch.optim.SGD, lr=0.2), backbone_lr_scale=0.25
    )
    configured = module.configure_optimizers()
    optimizer = configured["optimizer"]
    assert [group["lr"] for group in optimizer.param_groups] == pytest.approx([0.2, 0.05])
    backbone_ids = {id(p) for p in module.predictor.backbone.parameters()}
    assert {id(p) for p in optimizer.param_groups[1]["params"]} == backbone_ids
    assert not backbone_ids & {id(p) for p in optimizer.param_groups[0]["params"]}
    # One group, the paper's optimiser, without a schedule.
    assert isinstance(
        MOSModule(tiny_predictor(), margin_l1, torch.optim.SGD).configure_optimizers(), torch.optim.SGD
    )
    for bad in ({"freeze_backbone_steps": -1}, {"backbone_lr_scale": 0.0}, {"backbone_lr_scale": 1.5}):
        with pytest.raises(ValueError):
            MOSModule(tiny_predictor(), margin_l1, torch.optim.SGD, **bad)


def test_a_backbone_frozen_in_part_keeps_that_part_frozen(tmp_path):
    predictor = tiny_predictor()
    predictor.backbone.convs[0].bias.requires_grad_(False)
    module = MOSModule(predictor, margin_l1, torch.optim.SGD, freeze_backbone_steps=1)
    optimizer = module.configure_optimizers()["optimizer"]
    grouped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert id(predictor.backbone.convs[0].bias) not in grouped


def test_init_from_an_exports_architecture_fine_tunes_that_architecture(manifest, tmp_path):
    # An export with an architecture unlike the default config's, on 1-5.
    source = tiny_predictor(head_dim=8, dropout=0.0)
    export = tmp_path / "source"
    export_predictor(source, export, sample_rate=SR, domains=["default"])
    recorded = read_architecture(export)
    assert recorded.model["head_dim"] == 8 and recorded.f0_extractor is None
    overrides = [
        *tiny_run_overrides(manifest),
        f"init_from={{checkpoint: {export}, architecture: export, modules: [backbone, head]}}",
        "optim.lr=0",
    ]
    run_dir = tmp_path / "run"
    run(compose_train(overrides), run_dir)
    tuned, config, _ = load_export(run_dir / "export")
    assert config["model"]["head_dim"] == 8
    assert config["model"]["backbone"]["channels"] == 16
    # At learning rate 0 the fine-tuned model is the export's, weight for weight.
    original, _, _ = load_export(export)
    for key, value in original.state_dict().items():
        assert torch.equal(tuned.state_dict()[key], value), key
    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    assert "learning_check" in info
    # Not trained from scratch: no small-corpus note, though the corpus is as small as the tiny run's.
    assert "small corpus: " not in (run_dir / "train.log").read_text(encoding="utf-8")


def test_init_from_architecture_is_checked(manifest, tmp_path):
    bad = [
        *tiny_run_overrides(manifest),
        f"init_from={{checkpoint: {tmp_path}, architecture: mine, modules: [head]}}",
    ]
    with pytest.raises(ValueError, match="init_from.architecture must be one of"):
        build(compose_train(bad))
    missing = [
        *tiny_run_overrides(manifest),
        f"init_from={{checkpoint: {tmp_path}, architecture: export, modules: [head]}}",
    ]
    with pytest.raises(ExportError, match="config.yaml"):
        build(compose_train(missing))


def test_the_anchor_penalty_is_its_weight_times_the_squared_distance_from_the_start():
    first, second = torch.nn.Parameter(torch.tensor([1.0, -2.0])), torch.nn.Parameter(torch.ones(2, 2))
    anchor = Anchor([first, second], weight=0.3)
    assert float(anchor().detach()) == 0.0
    with torch.no_grad():
        first += torch.tensor([0.5, 0.0])
        second[1, 0] -= 2.0
    # 0.3 · (0.5² + 2²), by hand; the other parameter unmoved counts nothing.
    assert float(anchor().detach()) == pytest.approx(0.3 * (0.25 + 4.0))
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finetune.anchor"):
            Anchor([first], weight=bad)
    # 0 is a weight: the penalty is there, and nothing.
    assert float(Anchor([first], weight=0.0)().detach()) == 0.0


@pytest.mark.parametrize("frozen", [0, 3])
def test_the_backbone_group_learns_at_0_for_its_frozen_steps_then_at_its_scaled_rate(frozen):
    # Under DDP its parameters keep requires_grad while frozen: the rate alone holds them still.
    head, body = torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))
    config = backbone_optimizer(functools.partial(torch.optim.SGD, lr=0.5), [head, body], [body], 0.1, frozen)
    optimizer, schedule = config["optimizer"], config["lr_scheduler"]["scheduler"]
    seen = []
    for _ in range(5):
        seen.append([group["lr"] for group in optimizer.param_groups])
        optimizer.step()
        schedule.step()
    assert seen == [[0.5, 0.0 if step < frozen else pytest.approx(0.05)] for step in range(5)]


class PretrainedHeadNet(torch.nn.Module):
    """A backbone and a head of the same shapes, the head declared pretrained (as the calibrated family's)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone, self.head = torch.nn.Linear(3, 3), torch.nn.Linear(3, 3)

    def pretrained_head_parameters(self) -> list[torch.nn.Parameter]:
        return list(self.head.parameters())


def by_hand(pairs) -> float:
    """Σ‖θ − θ₀‖² over (θ, θ₀) pairs."""
    return sum(float(((p.detach() - start) ** 2).sum()) for p, start in pairs)


def test_the_anchor_compares_each_learning_parameter_with_its_own_start_whatever_is_frozen():
    # A frozen backbone before a learning pretrained head: the head is pulled toward its own start.
    net = PretrainedHeadNet()
    anchored = pretrained_parameters(net)
    assert [id(p) for p in anchored] == [id(p) for p in (*net.backbone.parameters(), *net.head.parameters())]
    starts = [p.detach().clone() for p in anchored]
    anchor = Anchor(anchored, weight=0.5)
    net.backbone.requires_grad_(False)
    with torch.no_grad():
        for k, p in enumerate(net.head.parameters()):
            p += 0.1 * (k + 1)
    assert float(anchor().detach()) == pytest.approx(
        0.5 * by_hand(zip(anchored[2:], starts[2:], strict=True))
    )
    # Only some anchored parameters frozen: the first and the third learn, each against its own start.
    first, second, third = (torch.nn.Parameter(torch.full((2,), float(v))) for v in (1.0, 5.0, -3.0))
    anchor = Anchor([first, second, third], weight=1.0)
    second.requires_grad_(False)
    with torch.no_grad():
        first += torch.tensor([0.5, 0.0])
        third -= torch.tensor([0.0, 2.0])
    # 0.5² + 2², by hand: the third measured from -3, not from the frozen second's 5.
    assert float(anchor().detach()) == pytest.approx(0.25 + 4.0)


def test_the_anchor_gradient_pulls_each_weight_back_toward_its_start():
    weight = torch.nn.Parameter(torch.tensor([2.0, -1.0]))
    anchor = Anchor([weight], weight=0.5)
    with torch.no_grad():
        weight += torch.tensor([1.0, -3.0])
    anchor().backward()
    # d/dθ 0.5 · (θ − θ₀)² = 2 · 0.5 · (θ − θ₀).
    assert weight.grad.tolist() == pytest.approx([1.0, -3.0])


def test_the_anchored_parameters_are_the_pretrained_ones_that_learn():
    # The network's own sizes, which its pretrained head needs (the backbone's weights stay random).
    backbone = DistillMosBackbone()
    head = CalibratedPredictor(backbone, train_head=True, pretrained=True)
    anchored = {id(p) for p in pretrained_parameters(head)}
    assert {id(p) for m in (head.attention, head.output) for p in m.parameters()} <= anchored
    assert {id(p) for p in backbone.parameters()} <= anchored
    # The calibration map starts at the identity, not at pretrained values: never anchored.
    assert not {id(head.log_gain), id(head.offset)} & anchored
    # A head that starts random, or one that does not learn, has no pretrained point to keep.
    for random_or_fixed in ({"train_head": True, "pretrained": False}, {"train_head": False}):
        model = CalibratedPredictor(
            DistillMosBackbone(channels=8, conv_layers=2, dim=16, heads=2, layers=1), **random_or_fixed
        )
        assert not {id(p) for m in (model.attention, model.output) for p in m.parameters()} & {
            id(p) for p in pretrained_parameters(model)
        }


def anchored_fit(tmp_path, weight: float) -> tuple[MOSModule, torch.Tensor]:
    """A tiny module trained 6 steps with `anchor=weight`; its backbone's first weight at the start."""
    predictor = tiny_predictor()
    start = predictor.backbone.convs[0].weight.detach().clone()
    module = MOSModule(
        predictor, margin_l1, functools.partial(torch.optim.SGD, lr=0.2), valid_names=[], anchor=weight
    )
    trainer(tmp_path, max_steps=6, limit_val_batches=0).fit(
        module, loader(*[items(4, offset=4 * k) for k in range(6)])
    )
    return module, start


def test_training_with_an_anchor_stays_nearer_the_start_and_a_checkpoint_keeps_the_start(tmp_path):
    free, start = anchored_fit(tmp_path / "free", 0.0)
    held, same_start = anchored_fit(tmp_path / "held", 2.0)
    assert torch.equal(start, same_start) and free.anchor is None

    def moved(module: MOSModule) -> float:
        return float((module.predictor.backbone.convs[0].weight - start).norm())

    assert 0 < moved(held) < 0.8 * moved(free)
    # θ₀ travels in the module's state (a checkpoint), not in the predictor's (an export).
    state = held.state_dict()
    assert torch.equal(state["anchor.start0"], start)
    assert not any(key.startswith("anchor") for key in held.predictor.state_dict())
    fresh = MOSModule(tiny_predictor(), margin_l1, torch.optim.SGD, anchor=2.0)
    with torch.no_grad():
        fresh.anchor.start0.add_(1.0)
    fresh.load_state_dict(state)
    assert torch.equal(fresh.anchor.start0, start)


def fixed_front_backbone() -> DistillMosBackbone:
    """A small Distill-MOS network whose CNN and lowest transformer layer stay fixed (seeded)."""
    torch.manual_seed(0)
    return DistillMosBackbone(
        channels=8, conv_layers=2, dim=16, heads=2, layers=2, freeze_cnn=True, frozen_layers=1
    )


def fronts_fit(
    tmp_path, steps: int, frame_cache_mb: int, by_epochs: bool = False
) -> tuple[MOSPredictor, list[int], list[bool]]:
    """A small Distill-MOS (CNN and lowest layer fixed) trained `steps` steps, its backbone frozen for 2.

    `by_epochs`: the fit has no step limit (max_steps -1) and ends after one epoch of `steps` batches.
    Returns the predictor, the segments its CNN was given, and whether fronts were kept at each step.
    """
    backbone = fixed_front_backbone()
    predictor = MOSPredictor(backbone)
    segments = [0]
    backbone.cnn.register_forward_hook(lambda m, args, out: segments.__setitem__(0, segments[0] + len(out)))
    kept = []

    class Record(__import__("lightning").Callback):
        def on_train_batch_end(self, *args, **kwargs):
            kept.append(backbone._fronts is not None)

    module = MOSModule(
        predictor,
        margin_l1,
        functools.partial(torch.optim.SGD, lr=0.5),
        valid_names=[],
        freeze_backbone_steps=2,
        frame_cache_mb=frame_cache_mb,
    )
    clips = items(4)
    limit = {"max_steps": -1, "max_epochs": 1} if by_epochs else {"max_steps": steps}
    trainer(tmp_path, **limit, callbacks=[Record()], limit_val_batches=0).fit(
        module, loader(*[clips] * steps)
    )
    return predictor, segments, kept


def test_fine_tuning_on_kept_fronts_trains_as_on_the_whole_network_with_one_front_pass_a_clip(tmp_path):
    plain, plain_segments, plain_kept = fronts_fit(tmp_path / "plain", 5, frame_cache_mb=0)
    kept, segments, kept_at = fronts_fit(tmp_path / "kept", 5, frame_cache_mb=64)
    # Without caches the CNN sees every clip at every step; with them once, in the first step.
    assert plain_segments == [20] and not any(plain_kept)
    assert segments == [4] and all(kept_at)
    # The backbone learned (its upper layer moved from where it started).
    start = fixed_front_backbone().layers[1].linear1.weight
    assert not torch.allclose(kept.backbone.layers[1].linear1.weight, start)
    for (name, a), b in zip(kept.state_dict().items(), plain.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=name)
    # The fit frees them.
    assert kept.backbone._fronts is None


@pytest.mark.parametrize(
    ("steps", "keeps", "by_epochs"), [(2, False, False), (3, True, False), (2, True, True)]
)
def test_fronts_are_kept_only_in_a_fit_whose_backbone_learns(tmp_path, steps, keeps, by_epochs):
    # Frozen for 2 steps: a fit of 2 never trains the backbone, one of 3 does. A fit without a step
    # limit may run past its frozen steps, so it keeps them, however few its epochs' batches.
    _, _, kept = fronts_fit(tmp_path, steps, frame_cache_mb=64, by_epochs=by_epochs)
    assert kept == [keeps] * steps
