"""Multi-dimension and judge-aware training end to end on the synthetic corpus."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from sqa import metrics
from sqa.data.synthetic import load_synthetic
from sqa.scoring import cli as score
from sqa.training.datamodule import MOSDataModule
from sqa.training.run import run
from tests.conftest import small_corpus_overrides
from tests.training.test_train import compose_train, read_predictions

DIMS = ["mos", "lyrics", "melody"]


@pytest.fixture(scope="module")
def heads_run(small_synthetic_root, tmp_path_factory):
    """A short three-head, judge-aware run (seed 0) on the session's small synthetic corpus."""
    run_dir = tmp_path_factory.mktemp("heads")
    overrides = [
        *small_corpus_overrides(small_synthetic_root),
        f"model.dimensions=[{','.join(DIMS)}]",
        "model.judge_dim=8",
        "trainer.max_steps=6",
        "trainer.val_check_interval=3",
        "trainer.enable_progress_bar=false",
    ]
    return run_dir, run(compose_train(overrides), run_dir).test


def test_judge_dataset_has_one_item_per_rating_plus_the_mean_judge(synthetic_root):
    corpus = load_synthetic(synthetic_root, seed=0)
    data = MOSDataModule(corpus, dimensions=DIMS, judges=True, preload=False)
    train = data.train_dataloader().dataset
    clips = corpus.split("train")
    assert data.num_judges == len({j for c in clips for j in c.ratings})
    assert len(train) == len(clips) + sum(len(c.ratings) for c in clips)
    items = [train[i] for i in range(12)]
    mean_items = [it for it in items if it["judge"] == data.num_judges]
    judge_items = [it for it in items if it["judge"] != data.num_judges]
    assert mean_items and judge_items
    for it in judge_items:
        clip = next(c for c in clips if c.sample_id == it["sample_id"])
        assert it["mask"] == [True, False, False] and it["target"][0] in clip.ratings.values()
    for it in mean_items:
        assert it["target"][0] == it["mos"]
    # Evaluation sets are never expanded and carry no judge: the predictor uses its mean judge.
    valid = data.val_dataloader()[0].dataset
    assert len(valid) == len(valid.clips) and valid[0]["judge"] is None


def test_training_with_judges_needs_ratings(synthetic_root):
    from dataclasses import replace

    corpus = load_synthetic(synthetic_root, seed=0)
    corpus.clips = [
        replace(c, ratings={}) if c.split == "train" and c.sample_id.endswith("utt0014") else c
        for c in corpus.clips
    ]
    data = MOSDataModule(corpus, judges=True, preload=False)
    with pytest.raises(ValueError, match="no per-judge ratings"):
        data.train_dataloader()


def test_per_dimension_metrics_equal_evaluate_sets_over_labelled_clips(heads_run):
    run_dir, results = heads_run
    rows = read_predictions(run_dir / "predictions.csv")
    assert set(json.loads((run_dir / "metrics.json").read_text())) == {"test1", "test2", "test3", "avg"}
    assert json.loads((run_dir / "metrics.json").read_text()) == results
    for dim in DIMS[1:]:
        saved = json.loads((run_dir / f"metrics_{dim}.json").read_text())
        part = [r for r in rows if r[f"mos_{dim}"] != ""]
        assert 0 < len(part) < len(rows)
        expected = metrics.evaluate_sets(
            [float(r[f"pred_{dim}"]) for r in part],
            [float(r[f"mos_{dim}"]) for r in part],
            [r["system_id"] for r in part],
            [r["test_set"] for r in part],
        )
        assert saved.keys() == expected.keys()
        for name, block in expected.items():
            for level in ("utt", "sys"):
                assert saved[name][level] == pytest.approx(block[level], nan_ok=True)
        assert set(saved) == {"test1", "test2", "avg"}  # test3 (batch p3) has no such labels
        assert (run_dir / "export" / f"metrics_{dim}.json").read_text() == (
            run_dir / f"metrics_{dim}.json"
        ).read_text()


def test_export_then_score_writes_one_column_per_dimension(heads_run, small_synthetic_root, tmp_path):
    run_dir, _ = heads_run
    rows = read_predictions(run_dir / "predictions.csv")[:20]
    paths = [str(small_synthetic_root / "wav" / f"{r['sample_id']}.wav") for r in rows]
    out = tmp_path / "scores.csv"
    assert (
        score.main(
            ["--checkpoint", str(run_dir / "export"), "--output", str(out), "--batch-size", "3", *paths]
        )
        == 0
    )
    with out.open() as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == ["path", "score", "score_lyrics", "score_melody"]
        scored = {r["path"]: r for r in reader}
    for path, row in zip(paths, rows, strict=True):
        assert float(scored[path]["score"]) == pytest.approx(float(row["pred"]), abs=1e-4)
        for dim in DIMS[1:]:
            assert float(scored[path][f"score_{dim}"]) == pytest.approx(float(row[f"pred_{dim}"]), abs=1e-4)
    config = (run_dir / "export" / "config.yaml").read_text()
    assert "- lyrics" in config and "judge_dim: 8" in config


def test_single_dimension_default_keeps_the_prediction_columns(heads_run):
    # The default run's layout is covered by test_train; here the extra columns' NaN handling.
    run_dir, _ = heads_run
    rows = read_predictions(run_dir / "predictions.csv")
    assert all(not math.isnan(float(r["pred_melody"])) for r in rows)
    assert any(r["mos_melody"] == "" for r in rows)
    assert torch.tensor([float(r["pred"]) for r in rows]).std() > 0
