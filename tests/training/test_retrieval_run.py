"""A run with retrieval.datastore=true exports its training embeddings; kNN and fusion score by them."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch

from sqa.exports.datastore import read_datastore
from sqa.exports.format import load_export
from sqa.scoring.scorer import Scorer
from sqa.training.run import run
from tests.training.test_train import DEFAULT_RUN_STEPS, compose_train

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def retrieval_run(synthetic_root, tmp_path_factory):
    """The default configuration (seed 0) stopped at step 250, with a datastore (about 70 s)."""
    run_dir = tmp_path_factory.mktemp("retrieval-run")
    overrides = [
        f"data.corpus.root={synthetic_root}",
        "trainer.enable_progress_bar=false",
        f"trainer.max_steps={DEFAULT_RUN_STEPS}",
        "retrieval.datastore=true",
    ]
    run(compose_train(overrides), run_dir)
    return run_dir


def test_knn_beats_the_constant_and_fusion_is_never_worse_than_its_worse_part(retrieval_run):
    record = json.loads((retrieval_run / "run_info.json").read_text(encoding="utf-8"))["retrieval"]
    # Measured (seed 0, 451 training clips): k=64, λ=0.8; test kNN RMSE 0.972 / 0.825 / 0.987
    # against the constant's 1.187 / 0.952 / 0.990 (docs/scoring.md#retrieval).
    tests = record["test"].values()
    assert np.mean([t["knn_rmse"] for t in tests]) < np.mean([t["constant_rmse"] for t in tests])
    assert all(t["knn_srcc"] > 0.3 for t in tests)
    valid = record["valid"]
    # λ is chosen on validation RMSE from a grid holding 0 and 1: at most the better part's.
    assert valid["fusion_rmse"] <= min(valid["parametric_rmse"], valid["knn_rmse"])
    assert valid["fusion_srcc"] >= min(valid["parametric_srcc"], valid["knn_srcc"])


def test_the_exported_datastore_returns_the_training_labels_and_scores_as_recorded(retrieval_run):
    export = retrieval_run / "export"
    owned = json.loads((export / ".sqa-owned.json").read_text(encoding="utf-8"))
    assert "datastore.pt" in json.dumps(owned)
    predictor, config, _ = load_export(export)
    store = read_datastore(export, predictor, config)
    assert torch.equal(store.knn(store.embeddings, k=1), store.labels)
    record = json.loads((retrieval_run / "run_info.json").read_text(encoding="utf-8"))["retrieval"]
    assert (store.k, len(store)) == (record["k"], record["entries"])
    assert store.fusion_weight == pytest.approx(record["fusion_weight"])  # float32 in the file
    # The scorer's kNN scores of the first test set reproduce the run's figure.
    with (retrieval_run / "predictions.csv").open(encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["test_set"] == "test1"]
    scores = Scorer(export, mode="knn").score([r["wav_path"] for r in rows])
    labels = np.array([float(r["mos"]) for r in rows])
    knn_rmse = float(np.sqrt(np.mean((np.array(scores) - labels) ** 2)))
    assert knn_rmse == pytest.approx(record["test"]["test1"]["knn_rmse"], abs=1e-3)
