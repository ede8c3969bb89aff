"""The LightningModule: its training hooks (called directly or in a short fit) and its validation and
test aggregation, driven through a Lightning trainer."""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from sqa import metrics
from sqa.data.batching import collate
from sqa.data.corpus import ROLE_REFERENCE, ROLES, LabelCounts
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.training.lit_module import MOSModule
from sqa.training.losses import margin_l1
from sqa.training.selection import TIEBREAK_KEY, SelectionRule, choose_rule

SR = 16000


def items(n: int, offset: int = 0) -> list[dict]:
    """`n` clips of different lengths, pitches and labels, three systems."""
    g = torch.Generator().manual_seed(offset)
    out = []
    for k in range(n):
        i = offset + k
        t = torch.arange(int(SR * (0.3 + 0.1 * i))) / SR
        wav = 0.2 * torch.sin(2 * torch.pi * (150 + 40 * i) * t) + 0.01 * torch.randn(t.shape, generator=g)
        label = 1.0 + 0.7 * i
        out.append(
            {
                "index": i,
                "wav": wav,
                "f0": None,
                "mos": label,
                "target": [label],
                "mask": [True],
                "judge": None,
                "domain": 0,
                "sample_id": f"c{i}",
                "wav_path": f"c{i}.wav",
                "system_id": f"s{i % 3}",
                "test_set": "",
            }
        )
    return out


def trainer(tmp_path, **settings: Any) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        **settings,
    )


@pytest.fixture(scope="module")
def predictor() -> MOSPredictor:
    torch.manual_seed(0)
    return MOSPredictor(LogMelBackbone()).eval()


def loader(*batches: list[dict]) -> DataLoader:
    """A loader yielding these collated batches, in this order."""
    return DataLoader([collate(b) for b in batches], batch_size=None)


def labels(clips: list[dict]) -> list[float]:
    return [c["mos"] for c in clips]


def scores(module: MOSModule, clips: list[dict]) -> list[float]:
    """Each clip's prediction, scored alone."""
    with torch.no_grad():
        return [float(module(collate([c])).score[0]) for c in clips]


def test_validation_loss_is_the_mean_over_clips_not_over_batches(predictor, tmp_path):
    clips = items(4)
    # Batches of 3 and 1 clips: a mean of batch means would weight the lone clip three times.
    module = MOSModule(predictor, loss=margin_l1, optimizer=None, valid_names=["v"])
    (logged,) = trainer(tmp_path).validate(module, dataloaders=[loader(clips[:3], clips[3:])], verbose=False)
    with torch.no_grad():
        per_clip = [float(margin_l1(module(collate([c])), torch.tensor([[c["mos"]]]))) for c in clips]
    batch_means = [sum(per_clip[:3]) / 3, per_clip[3]]
    assert abs(sum(per_clip) / 4 - sum(batch_means) / 2) > 1e-3
    assert logged["val/loss"] == pytest.approx(sum(per_clip) / 4, rel=1e-5)
    # One clip: its own loss (a count of one is a mean, not an empty validation).
    (logged,) = trainer(tmp_path).validate(module, dataloaders=[loader(clips[3:])], verbose=False)
    assert logged["val/loss"] == pytest.approx(per_clip[3], rel=1e-5)


def test_selecting_on_the_validation_loss_scores_its_sum_and_count_reduced_over_the_processes(
    predictor, tmp_path
):
    clips = items(4)
    rule = choose_rule({"v": LabelCounts(40, 9, 20, 9, clips_per_system=4)}, metric="loss")
    module = MOSModule(predictor, loss=margin_l1, optimizer=None, valid_names=["v"], selection=rule)
    # DDP with one process: the loss's sum and count go through the processes' reduction.
    ddp = L.Trainer(
        accelerator="cpu",
        devices=1,
        strategy="ddp",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    try:
        (logged,) = ddp.validate(module, dataloaders=[loader(clips[:3], clips[3:])], verbose=False)
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    with torch.no_grad():
        per_clip = [float(margin_l1(module(collate([c])), torch.tensor([[c["mos"]]]))) for c in clips]
    assert logged["val/selection"] == logged["val/loss"] == pytest.approx(sum(per_clip) / 4, rel=1e-5)


def test_the_selection_score_weights_validation_sets_by_their_clip_counts(predictor, tmp_path):
    a, b = items(5), items(2, offset=5)
    counts = LabelCounts(40, 9, 20, 9, clips_per_system=4)
    rule = choose_rule({"a": counts, "b": counts}, metric="rmse", level="utt")
    module = MOSModule(predictor, loss=margin_l1, optimizer=None, valid_names=["a", "b"], selection=rule)
    loaders = [loader(a[:2], a[2:]), loader(b)]
    logged = trainer(tmp_path).validate(module, dataloaders=loaders, verbose=False)[0]
    rmse = {
        name: metrics.evaluate(scores(module, c), [x["mos"] for x in c], [x["system_id"] for x in c])["utt"][
            "rmse"
        ]
        for name, c in (("a", a), ("b", b))
    }
    assert abs(rmse["a"] - rmse["b"]) > 1e-3
    assert logged["val/a/utt_rmse"] == pytest.approx(rmse["a"], rel=1e-5)
    assert logged["val/selection"] == pytest.approx((5 * rmse["a"] + 2 * rmse["b"]) / 7, rel=1e-5)
    assert logged[TIEBREAK_KEY] == pytest.approx((5 * rmse["a"] + 2 * rmse["b"]) / 7, rel=1e-5)
    # A ranking rule on set a only (b has too few clips per system): its tiebreak is a's RMSE alone.
    thin = LabelCounts(40, 9, 20, 9, clips_per_system=2)
    rule = choose_rule({"a": counts, "b": thin})
    assert rule.sets == ("a",)
    module = MOSModule(predictor, loss=margin_l1, optimizer=None, valid_names=["a", "b"], selection=rule)
    logged = trainer(tmp_path).validate(module, dataloaders=loaders, verbose=False)[0]
    assert logged[TIEBREAK_KEY] == pytest.approx(rmse["a"], rel=1e-5)


def test_test_results_are_per_set_metrics_of_the_clips_in_dataset_order(predictor, tmp_path):
    p1, p2 = items(4), items(3, offset=4)
    module = MOSModule(predictor, loss=None, optimizer=None, test_names=["p1", "p2"], bootstrap=0)
    # Batches out of dataset order: rows are put back in index order before any metric.
    trainer(tmp_path).test(module, dataloaders=[loader(p1[2:], p1[:2]), loader(p2)], verbose=False)
    assert [r["sample_id"] for r in module.test_predictions] == [f"c{i}" for i in range(7)]
    assert [r["test_set"] for r in module.test_predictions] == ["p1"] * 4 + ["p2"] * 3
    # A single loader (Lightning passes no dataloader index) is the first named set.
    single = MOSModule(predictor, loss=None, optimizer=None, test_names=["p1"], bootstrap=0)
    trainer(tmp_path).test(single, dataloaders=loader(p1), verbose=False)
    assert [r["test_set"] for r in single.test_predictions] == ["p1"] * 4
    clips = p1 + p2
    expected = metrics.evaluate_sets(
        scores(module, clips),
        [c["mos"] for c in clips],
        [c["system_id"] for c in clips],
        ["p1"] * 4 + ["p2"] * 3,
    )
    assert set(module.test_results) == {"p1", "p2", metrics.AVERAGE_KEY}
    for name in ("p1", "p2"):
        for level in ("utt", "sys"):
            for key in ("rmse", "lcc"):
                assert module.test_results[name][level][key] == pytest.approx(
                    expected[name][level][key], rel=1e-5
                )


def rated(n: int, offset: int = 0) -> list[dict]:
    """`n` clips rated 0-100 on the overall MOS and on melody; every third clip's melody label is missing."""
    clips = items(n, offset)
    for k, clip in enumerate(clips):
        melody = math.nan if k % 3 == 1 else float((15 + 29 * k) % 97)
        clip["target"], clip["mask"] = [float(5 + (37 * k + offset) % 91), melody], [True, k % 3 != 1]
    return clips


def hundred_point_batch(offset: int = 0) -> dict:
    """Three rated clips, the second without a melody label."""
    return collate(rated(3, offset))


@pytest.fixture(scope="module")
def hundred_point() -> MOSPredictor:
    """A predictor of two dimensions on a 0-100 scale (dropout off: its scores are repeatable)."""
    torch.manual_seed(1)
    return MOSPredictor(LogMelBackbone(), dimensions=["mos", "melody"], score_range=(0, 100)).eval()


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")  # no trainer: nothing to log to
def test_a_training_step_is_the_loss_against_the_labels_on_the_internal_scale_with_their_mask(hundred_point):
    batch = hundred_point_batch()
    module = MOSModule(hundred_point, loss=margin_l1, optimizer=None)
    loss = module.training_step(batch, 0)
    with torch.no_grad():
        out = hundred_point(batch["wav"], batch["lengths"], batch["domain"])
    # 0-100 onto 1-5: y / 25 + 1; the missing melody label stays NaN and is masked out.
    internal = batch["target"] / 25 + 1
    expected = margin_l1(out, internal, mask=batch["mask"])
    assert torch.isfinite(expected)
    assert abs(float(expected) - float(margin_l1(out, batch["target"], mask=batch["mask"]))) > 1
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-6)
    assert loss.requires_grad


def train_loss_rule() -> SelectionRule:
    return choose_rule({"v": LabelCounts(40, 9, 20, 9, clips_per_system=4)}, metric="train_loss")


def saved(module: MOSModule) -> list:
    """The values `on_save_checkpoint` adds to a checkpoint."""
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    return list(checkpoint.values())


@pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")  # no trainer: nothing to log to
def test_the_training_loss_since_the_last_validation_is_kept_in_checkpoints(hundred_point):
    batches = [hundred_point_batch(0), hundred_point_batch(3), hundred_point_batch(6)]
    module = MOSModule(
        hundred_point, loss=margin_l1, optimizer=None, valid_names=["v"], selection=train_loss_rule()
    )
    losses = [float(module.training_step(b, i).detach()) for i, b in enumerate(batches[:2])]
    assert abs(losses[0] - losses[1]) > 1e-3
    (value,) = saved(module)
    assert value == pytest.approx([losses[0] + losses[1], 2])
    checkpoint: dict = {}
    module.on_save_checkpoint(checkpoint)
    resumed = MOSModule(
        hundred_point, loss=margin_l1, optimizer=None, valid_names=["v"], selection=train_loss_rule()
    )
    resumed.on_load_checkpoint(checkpoint)
    assert saved(resumed) == [value]
    # A checkpoint written before the loss was kept restarts the sum and the count.
    resumed.on_load_checkpoint({})
    third = float(resumed.training_step(batches[2], 0).detach())
    assert saved(resumed) == [pytest.approx([third, 1])]
    # Selecting on anything else, the loss is not read back (a device sync) nor counted.
    srcc = MOSModule(hundred_point, loss=margin_l1, optimizer=None, valid_names=["v"])
    srcc.training_step(batches[0], 0)
    assert saved(srcc) == [[0.0, 0]]


class Recorder(L.Callback):
    """Every training step's loss and every validation's selection score."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.selection: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_validation_end(self, trainer, pl_module) -> None:
        self.selection.append(float(trainer.callback_metrics["val/selection"]))


def test_selecting_on_the_training_loss_scores_the_mean_step_loss_since_the_previous_validation(tmp_path):
    torch.manual_seed(2)
    module = MOSModule(
        MOSPredictor(LogMelBackbone()),
        loss=margin_l1,
        optimizer=functools.partial(torch.optim.SGD, lr=0.05),
        valid_names=["v"],
        selection=train_loss_rule(),
    )
    recorder = Recorder()
    fit = trainer(tmp_path, max_steps=4, val_check_interval=2, num_sanity_val_steps=0, callbacks=[recorder])
    clips = items(8)
    train = loader(clips[:2], clips[2:5], clips[5:6], clips[6:])
    fit.fit(module, train_dataloaders=train, val_dataloaders=loader(items(4)))
    losses = recorder.losses
    assert len(losses) == 4 and len(set(losses)) == 4
    # Each validation averages the steps since the previous one, unweighted by batch size.
    assert recorder.selection == pytest.approx([(losses[0] + losses[1]) / 2, (losses[2] + losses[3]) / 2])
    assert fit.progress_bar_metrics["train/loss"] == pytest.approx(losses[-1])
    assert fit.progress_bar_metrics["val/selection"] == pytest.approx(recorder.selection[-1])


class Placed(MOSModule):
    """A module at a chosen global step and DDP rank (a Lightning trainer counts them in a run)."""

    step, rank = 0, 0

    @property
    def global_step(self) -> int:
        return self.step

    @property
    def global_rank(self) -> int:
        return self.rank


def test_dropout_is_drawn_from_the_seed_the_step_and_the_rank(predictor):
    def mask(step: int, rank: int, **seed: int) -> torch.Tensor:
        module = Placed(predictor, loss=None, optimizer=None, **seed)
        module.step, module.rank = step, rank
        module.on_train_batch_start({}, 0)
        return torch.nn.functional.dropout(torch.ones(64), 0.5, training=True)

    first = mask(5, 1, seed=3)
    torch.rand(10)  # whatever was drawn since: a resumed run replays the step alike
    assert torch.equal(mask(5, 1, seed=3), first)
    for other in (mask(5, 1, seed=4), mask(6, 1, seed=3), mask(5, 0, seed=3)):
        assert not torch.equal(other, first)
    # Nor does the next seed replay the previous seed's masks one step later.
    assert not torch.equal(mask(4, 1, seed=4), first)
    assert torch.equal(mask(5, 1), mask(5, 1, seed=0))


def test_the_forward_pass_gives_the_predictor_f0_and_judge_ids_where_the_batch_has_them():
    torch.manual_seed(3)
    judged = MOSPredictor(
        LogMelBackbone(), num_domains=2, domain_dim=4, pitch="midi", pitch_dim=8, num_judges=3, judge_dim=4
    ).eval()
    clips = items(3)
    for k, clip in enumerate(clips):
        clip["domain"] = k % 2
        clip["f0"] = torch.full((20 + 5 * k,), 150.0 + 60 * k)
        clip["judge"] = k
    batch = collate(clips)
    module = MOSModule(judged, loss=None, optimizer=None)
    with torch.no_grad():
        scored = module(batch).scores
        args = batch["wav"], batch["lengths"], batch["domain"], batch["f0"]
        mean_judge = judged(*args).scores
        assert torch.equal(scored, judged(*args, batch["judge"]).scores)
        assert not torch.allclose(scored, mean_judge)
        # An evaluation batch has no judges: its clips are scored as the mean judge.
        for clip in clips:
            clip["judge"] = None
        assert torch.equal(module(collate(clips)).scores, mean_judge)


def test_the_default_selection_rule_is_system_srcc_over_the_validation_sets(predictor, tmp_path):
    module = MOSModule(predictor, loss=None, optimizer=None, valid_names=["a", "b"])
    counts = LabelCounts(40, 9, 20, 9, clips_per_system=4)
    assert module.selection.record() == {**choose_rule({"a": counts, "b": counts}).record(), "valid_sets": {}}
    a, b = items(8), items(4, offset=8)
    for clip in a:
        clip["system_id"] = f"s{clip['index'] % 4}"
    logged = trainer(tmp_path).validate(module, dataloaders=[loader(a[:5], a[5:]), loader(b)], verbose=False)[
        0
    ]
    srcc = {
        name: metrics.evaluate(scores(module, c), labels(c), [x["system_id"] for x in c])["sys"]["srcc"]
        for name, c in (("a", a), ("b", b))
    }
    assert all(metrics.defined(v) for v in srcc.values()) and srcc["a"] != srcc["b"], srcc
    # Weighted by the sets' system counts: four in a, three in b.
    assert logged["val/selection"] == pytest.approx((4 * srcc["a"] + 3 * srcc["b"]) / 7, rel=1e-6)


def scaled_scores(module: MOSModule, clips: list[dict]) -> list[list[float]]:
    """Each clip's scores of every dimension, scored alone, mapped by hand from 1-5 onto 0-100."""
    with torch.no_grad():
        return [[(float(v) - 1) * 25 for v in module(collate([c])).scores[0]] for c in clips]


def test_validation_scores_each_dimension_on_the_corpus_scale_over_the_clips_labelled_with_it(
    hundred_point, tmp_path
):
    clips = rated(7)
    batches = [clips[:4], clips[4:]]
    module = MOSModule(hundred_point, loss=margin_l1, optimizer=None, valid_names=["v"])
    # A single loader: Lightning passes no dataloader index.
    (logged,) = trainer(tmp_path).validate(module, dataloaders=loader(*batches), verbose=False)
    predicted = scaled_scores(module, clips)
    systems = [c["system_id"] for c in clips]
    overall = metrics.evaluate([p[0] for p in predicted], [c["target"][0] for c in clips], systems)
    kept = [k for k, c in enumerate(clips) if c["mask"][1]]
    assert len(kept) == 5
    melody = metrics.evaluate(
        [predicted[k][1] for k in kept], [clips[k]["target"][1] for k in kept], [systems[k] for k in kept]
    )
    assert logged["val/v/utt_rmse"] == pytest.approx(overall["utt"]["rmse"], rel=1e-5)
    assert logged["val/v/sys_srcc"] == pytest.approx(overall["sys"]["srcc"], rel=1e-5)
    assert abs(melody["utt"]["rmse"] - overall["utt"]["rmse"]) > 1
    assert logged["val/melody/v/utt_rmse"] == pytest.approx(melody["utt"]["rmse"], rel=1e-5)
    # The loss is on the internal scale, over the labelled entries, each batch weighted by its size.
    with torch.no_grad():
        losses = [
            float(margin_l1(module(b), b["target"] / 25 + 1, mask=b["mask"])) * len(b["mos"])
            for b in map(collate, batches)
        ]
    assert logged["val/loss"] == pytest.approx(sum(losses) / 7, rel=1e-5)
    # A loader beyond the named sets is logged under its index.
    logged = trainer(tmp_path).validate(module, dataloaders=[loader(clips), loader(clips)], verbose=False)[0]
    assert (
        logged["val/1/utt_rmse"]
        == logged["val/v/utt_rmse"]
        == pytest.approx(overall["utt"]["rmse"], rel=1e-5)
    )
    # Clips without an overall label: the other dimension is scored, the selection score is NaN.
    for clip in clips:
        clip["target"][0], clip["mask"][0] = math.nan, False
    (logged,) = trainer(tmp_path).validate(module, dataloaders=loader(clips), verbose=False)
    assert logged["val/melody/v/utt_rmse"] == pytest.approx(melody["utt"]["rmse"], rel=1e-5)
    assert "val/v/utt_rmse" not in logged and math.isnan(logged["val/selection"])


def test_testing_scores_every_dimension_with_intervals_keeps_references_apart_and_logs_defined_metrics(
    hundred_point, tmp_path
):
    # Enough clips per set that the bootstrap's intervals depend on its seed.
    clips = rated(24)
    parts = {"p": clips[:10], ROLE_REFERENCE: clips[10:16], "2": clips[16:]}
    fresh = MOSModule(hundred_point, loss=None, optimizer=None, test_names=["p", ROLE_REFERENCE], seed=4)
    assert (fresh.test_results, fresh.dimension_results, fresh.test_predictions) == ({}, {}, [])
    # The third loader has no name: its rows and metrics go under its index.
    loaders = [loader(parts["p"][:3], parts["p"][3:]), loader(parts[ROLE_REFERENCE]), loader(parts["2"])]
    logged = trainer(tmp_path).test(fresh, dataloaders=loaders, verbose=False)[0]
    rows = fresh.test_predictions
    assert [r["sample_id"] for r in rows] == [c["sample_id"] for c in clips]
    assert [r["test_set"] for r in rows] == ["p"] * 10 + [ROLE_REFERENCE] * 6 + ["2"] * 8
    assert [[r["pred"], r["pred_melody"]] for r in rows] == [
        pytest.approx(s, rel=1e-5) for s in scaled_scores(fresh, clips)
    ]
    assert [r["mos"] for r in rows] == [c["target"][0] for c in clips]
    melody = [r["mos_melody"] for r in rows]
    assert [m for m in melody if not math.isnan(m)] == [c["target"][1] for c in clips if c["mask"][1]]

    def expected(true: str, pred: str) -> dict:
        """evaluate_sets over the rows labelled in `true`, with the module's bootstrap and seed."""
        kept = [r for r in rows if not math.isnan(r[true])]
        columns = ([r[k] for r in kept] for k in (pred, true, "system_id", "test_set"))
        return metrics.evaluate_sets(*columns, bootstrap=1000, seed=4, apart=ROLES)

    def same(a: dict, b: dict) -> bool:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)

    assert same(fresh.test_results, expected("mos", "pred"))
    assert fresh.test_results["p"]["ci"]["utt"]["rmse"] is not None
    assert fresh.dimension_results["melody"]["p"]["ci"]["utt"]["rmse"] is not None
    assert metrics.AVERAGE_KEY in fresh.test_results and ROLE_REFERENCE in fresh.test_results
    assert set(fresh.dimension_results) == {"melody"}
    assert same(fresh.dimension_results["melody"], expected("mos_melody", "pred_melody"))
    assert not same(fresh.dimension_results["melody"], fresh.test_results)
    for dim, prefix in (("mos", "test"), ("melody", "test/melody")):
        results = fresh.test_results if dim == "mos" else fresh.dimension_results[dim]
        for name, block in results.items():
            for level in ("utt", "sys"):
                for key in metrics.METRIC_NAMES:
                    value = block[level][key]
                    logged_key = f"{prefix}/{name}/{level}_{key}"
                    if metrics.defined(value):
                        assert logged[logged_key] == pytest.approx(value, rel=1e-6), logged_key
                    else:
                        assert logged_key not in logged
    # Two systems with a melody label in set 2: its system-level SRCC is undefined, and not logged.
    assert not metrics.defined(fresh.dimension_results["melody"]["2"]["sys"]["srcc"])
    assert "test/2/sys_srcc" in logged
