"""The LightningModule's validation and test aggregation, driven through a Lightning trainer."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from sqa import metrics
from sqa.data.batching import collate
from sqa.data.corpus import LabelCounts
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.training.lit_module import MOSModule
from sqa.training.losses import margin_l1
from sqa.training.selection import TIEBREAK_KEY, choose_rule

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
                "system_id": f"s{i % 3}",
                "test_set": "",
            }
        )
    return out


def trainer(tmp_path) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
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
