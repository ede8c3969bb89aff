"""End-to-end: train on the synthetic corpus, check metrics, predictions and the export."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from scipy import stats
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from sqa import score
from sqa.data.synthetic import load_synthetic
from sqa.training import run

from .conftest import REPO


def compose_train(overrides: list[str]):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


@pytest.fixture(scope="module")
def default_run(synthetic_root, tmp_path_factory):
    """The default configuration (seed 0) trained once on the session's synthetic corpus."""
    run_dir = tmp_path_factory.mktemp("run")
    cfg = compose_train([f"data.corpus.root={synthetic_root}", "trainer.enable_progress_bar=false"])
    return run_dir, run(cfg, run_dir).test


def read_predictions(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_default_run_beats_constant_predictor(default_run, synthetic_root):
    run_dir, results = default_run
    corpus = load_synthetic(synthetic_root, seed=0)
    train_mean = np.mean([c.mos for c in corpus.split("train")])
    rows = read_predictions(run_dir / "predictions.csv")
    mos = np.array([float(r["mos"]) for r in rows])
    constant_rmse = float(np.sqrt(np.mean((mos - train_mean) ** 2)))
    assert results["avg"]["sys"]["srcc"] >= 0.6
    assert results["avg"]["utt"]["rmse"] <= 0.9 * constant_rmse


def test_metrics_json_agrees_with_independent_computation(default_run):
    run_dir, _ = default_run
    saved = json.loads((run_dir / "metrics.json").read_text())
    rows = read_predictions(run_dir / "predictions.csv")
    assert set(saved) == {"test1", "test2", "test3", "avg"}
    for test_set in ("test1", "test2", "test3"):
        part = [r for r in rows if r["test_set"] == test_set]
        pred = np.array([float(r["pred"]) for r in part])
        mos = np.array([float(r["mos"]) for r in part])
        assert saved[test_set]["utt"]["n"] == len(part)
        assert saved[test_set]["utt"]["rmse"] == pytest.approx(np.sqrt(np.mean((pred - mos) ** 2)))
        assert saved[test_set]["utt"]["lcc"] == pytest.approx(stats.pearsonr(pred, mos)[0])
        assert saved[test_set]["utt"]["ktau"] == pytest.approx(stats.kendalltau(pred, mos)[0])
        systems = sorted({r["system_id"] for r in part})
        sys_pred = [np.mean([float(r["pred"]) for r in part if r["system_id"] == s]) for s in systems]
        sys_mos = [np.mean([float(r["mos"]) for r in part if r["system_id"] == s]) for s in systems]
        assert saved[test_set]["sys"]["n"] == len(systems)
        assert saved[test_set]["sys"]["srcc"] == pytest.approx(stats.spearmanr(sys_pred, sys_mos)[0])
        assert saved[test_set]["sys"]["lcc"] == pytest.approx(stats.pearsonr(sys_pred, sys_mos)[0])
    n_utt = sum(saved[t]["utt"]["n"] for t in ("test1", "test2", "test3"))
    avg = sum(saved[t]["utt"]["srcc"] * saved[t]["utt"]["n"] for t in ("test1", "test2", "test3")) / n_utt
    assert saved["avg"]["utt"]["srcc"] == pytest.approx(avg)


def test_export_then_score_reproduces_predictions(default_run, synthetic_root, tmp_path):
    run_dir, _ = default_run
    rows = read_predictions(run_dir / "predictions.csv")
    paths = [str(synthetic_root / "wav" / f"{r['sample_id']}.wav") for r in rows]
    out = tmp_path / "scores.csv"
    code = score.main(
        ["--checkpoint", str(run_dir / "export"), "--output", str(out), "--batch-size", "5", *paths]
    )
    assert code == 0
    scored = {r["path"]: float(r["score"]) for r in read_predictions(out)}
    for path, row in zip(paths, rows, strict=True):
        assert scored[path] == pytest.approx(float(row["pred"]), abs=1e-4)


def test_run_directory_holds_config_logs_and_checkpoints(default_run):
    run_dir, _ = default_run
    assert OmegaConf.load(run_dir / "config.yaml").model.backbone._target_.endswith("LogMelBackbone")
    assert list((run_dir / "checkpoints").glob("best-step=*.ckpt"))
    assert list((run_dir / "logs").rglob("metrics.csv"))
    assert json.loads((run_dir / "export" / "metrics.json").read_text())["avg"]["sys"]["n"] > 0
    plots = {p.name for p in (run_dir / "plots").iterdir()}
    assert plots == {f"test{i}_{level}.png" for i in (1, 2, 3) for level in ("utt", "sys")} | {"curves.png"}
    assert all((run_dir / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in plots)


@pytest.mark.parametrize("logger", ["tensorboard", "wandb"])
def test_other_loggers_write_into_the_run_directory(logger, synthetic_root, tmp_path):
    cfg = compose_train(
        [
            f"logger={logger}",
            f"data.corpus.root={synthetic_root}",
            "trainer.max_steps=2",
            "trainer.val_check_interval=2",
            "trainer.enable_progress_bar=false",
        ]
    )
    run(cfg, tmp_path)
    figures = {"test1_utt", "test1_sys", "test2_utt", "test2_sys", "test3_utt", "test3_sys", "curves"}
    if logger == "tensorboard":
        (log_dir,) = {p.parent for p in (tmp_path / "tensorboard").rglob("events.out.tfevents.*")}
        events = EventAccumulator(str(log_dir), size_guidance={"images": 0})
        events.Reload()
        assert set(events.Tags()["images"]) == {f"plots/{name}" for name in figures}
    else:
        (offline_run,) = (tmp_path / "wandb").glob("offline-run-*")
        images = offline_run / "files" / "media" / "images" / "plots"
        assert {p.stem.rsplit("_", 2)[0] for p in images.glob("*.png")} == figures


def test_existing_export_stops_a_resumed_run_before_training(synthetic_root, tmp_path):
    (tmp_path / "export").mkdir()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    cfg = compose_train([f"data.corpus.root={synthetic_root}", "resume=true"])
    with pytest.raises(FileExistsError, match="overwrite_export=true"):
        run(cfg, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "checkpoints", "export"]


def test_same_seed_and_config_give_the_same_metrics(synthetic_root, tmp_path):
    overrides = [
        f"data.corpus.root={synthetic_root}",
        "trainer.max_steps=30",
        "trainer.val_check_interval=10",
        "trainer.enable_progress_bar=false",
    ]
    for name in ("a", "b"):
        run(compose_train(overrides), tmp_path / name)
    first, second = ((tmp_path / n / "metrics.json").read_text() for n in ("a", "b"))
    assert first == second
    info = json.loads((tmp_path / "a" / "run_info.json").read_text())
    assert info["seed"] == 0 and info["packages"]["torch"].startswith("2.9")
    assert (
        info["corpus_fingerprint"]
        == json.loads((tmp_path / "b" / "run_info.json").read_text())["corpus_fingerprint"]
    )
    other = run(compose_train([*overrides, "seed=1"]), tmp_path / "c").test
    assert other != json.loads(first)
