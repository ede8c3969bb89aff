"""End-to-end: train on the synthetic corpus, check metrics, predictions and the export."""

from __future__ import annotations

import csv
import json
import os
import re
import stat
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict
from scipy import stats
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from sqa.core import ownership
from sqa.data.synthetic import load_synthetic
from sqa.reports import learning, tables
from sqa.scoring import cli as score
from sqa.training.callbacks import checkpoint_step, instantiate_callbacks, progress_bar
from sqa.training.run import run
from tests.conftest import REPO, small_corpus_overrides
from tests.training.test_learning_check import last_log_line, learning_warnings


def compose_train(overrides: list[str]):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


# The whole default run goes on until early stopping (past step 900 for seed 0); by step 250 it
# has learned what the tests below check (system SRCC 0.75, RMSE 21 % below the constant
# predictor's), in a fraction of the time.
DEFAULT_RUN_STEPS = 250


@pytest.fixture(scope="module")
def default_run(synthetic_root, tmp_path_factory):
    """The default configuration (seed 0), stopped at step 250, on the session's synthetic corpus."""
    run_dir = tmp_path_factory.mktemp("run")
    cfg = compose_train(
        [
            f"data.corpus.root={synthetic_root}",
            "trainer.enable_progress_bar=false",
            f"trainer.max_steps={DEFAULT_RUN_STEPS}",
        ]
    )
    return run_dir, run(cfg, run_dir).test


def exact_mean(values: list[str]) -> float:
    """The exact mean of decimal-printed floats, correctly rounded."""
    return float(sum(Fraction(float(v)) for v in values) / len(values))


def read_predictions(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as fh:
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


def test_a_model_that_beats_the_constant_says_so_without_a_warning(default_run, tmp_path, capsys):
    run_dir, _ = default_run
    check = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))["learning_check"]
    assert check["verdict"] == "better"
    assert check["test"]["rmse"] < check["test"]["constant_rmse"]
    assert check["valid"]["rmse"] < check["valid"]["constant_rmse"]
    assert check["test"]["srcc_ci"][0] > 0
    sentence = learning.sentence(check)
    assert last_log_line(run_dir).endswith(f"[INFO] - {sentence}")
    card = (run_dir / "export" / "README.md").read_text(encoding="utf-8")
    assert card.startswith("# MOS predictor")
    assert "**Warning:**" not in card
    assert f"## Against the constant predictor\n\n{sentence}" in card
    assert learning_warnings(run_dir / "export") == []
    wav = tmp_path / "clip.wav"
    sf.write(wav, np.zeros(16000, dtype=np.float32) + 0.01, 16000)
    capsys.readouterr()
    assert (
        score.main(["--checkpoint", str(run_dir / "export"), "--output", str(tmp_path / "s.csv"), str(wav)])
        == 0
    )
    assert "warning" not in capsys.readouterr().err


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
        # Exact means: a plain float mean can split two systems whose ratings average alike.
        sys_pred = [exact_mean([r["pred"] for r in part if r["system_id"] == s]) for s in systems]
        sys_mos = [exact_mean([r["mos"] for r in part if r["system_id"] == s]) for s in systems]
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


def test_run_directory_files_and_folders_get_the_modes_of_the_umask(default_run):
    run_dir, _ = default_run
    umask = os.umask(0o022)
    os.umask(umask)
    paths = list(run_dir.rglob("*"))
    assert any(p.suffix == ".ckpt" for p in paths) and (run_dir / "export" / "model.pt") in paths
    for path in paths:
        expected = (0o777 if path.is_dir() else 0o666) & ~umask
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


def test_train_log_holds_what_the_console_shows(default_run):
    run_dir, results = default_run
    text = (run_dir / "train.log").read_text()
    assert "Test results (best checkpoint best-step=" in text
    assert tables.format_table(results) in text
    assert "Restoring states from the checkpoint path" in text  # Lightning's own messages
    assert re.search(r"step 25 \(epoch 0\): train/loss \d\.\d{4}, val/selection -?\d\.\d{4}", text)
    assert f"Exported the best model to {run_dir / 'export'}" in text
    assert "\r" not in text and "\x1b" not in text


def test_no_progress_bar_unless_the_output_is_a_terminal(monkeypatch):
    cfg = compose_train(["trainer.enable_progress_bar=true"])
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False)
    assert progress_bar(cfg) == []
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    (bar,) = progress_bar(cfg)
    assert bar.refresh_rate == cfg.trainer.log_every_n_steps
    assert progress_bar(compose_train(["trainer.enable_progress_bar=false"])) == []


def test_predictions_write_labels_as_the_corpus_has_them(default_run, synthetic_root):
    run_dir, _ = default_run
    clips = {c.sample_id: c for c in load_synthetic(synthetic_root, seed=0).clips}
    rows = read_predictions(run_dir / "predictions.csv")
    assert all(r["mos"] == repr(clips[r["sample_id"]].mos) for r in rows)
    # The float32 round trip the labels take through a batch would have changed these.
    assert any(repr(float(np.float32(clips[r["sample_id"]].mos))) != r["mos"] for r in rows)


def test_checkpoint_step_reads_the_step_a_checkpoint_was_saved_at(default_run):
    run_dir, _ = default_run
    (best,) = (run_dir / "checkpoints").glob("best-step=*.ckpt")
    assert checkpoint_step(best) == int(best.stem.split("=")[1])


def test_export_carries_a_model_card_and_the_run_info(default_run):
    run_dir, results = default_run
    export = run_dir / "export"
    info = json.loads((run_dir / "run_info.json").read_text())
    assert json.loads((export / "run_info.json").read_text()) == info
    card = (export / "README.md").read_text()
    assert f"fingerprint `{info['corpus_fingerprint']}`" in card
    assert f"- train: {info['corpus']['clips']['train']} clips" in card
    assert f"torch {info['packages']['torch']}" in card and f"sqa {info['sqa']}" in card
    assert "synthetic corpus" in card and "## Intended use" in card and "## Citation" in card
    for name in ("test1", "test2", "test3", "avg"):
        block = results[name]
        lo, hi = block["ci"]["sys"]["srcc"]
        label = "average" if name == "avg" else name
        assert f"| {label} | system | {block['sys']['n']} |" in card
        assert f"{block['sys']['srcc']:.3f} [{lo:.3f}, {hi:.3f}]" in card
    assert "LogMelBackbone" in card and "margin_l1" in card and str(REPO) not in card


@pytest.mark.parametrize("logger", ["tensorboard", "wandb"])
def test_other_loggers_write_into_the_run_directory(logger, small_synthetic_root, tmp_path):
    cfg = compose_train(
        [
            f"logger={logger}",
            *small_corpus_overrides(small_synthetic_root),
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
        # The resolved configuration is the run's hyperparameters (hparams.yaml and the HPARAMS tab).
        hparams = OmegaConf.load(log_dir / "hparams.yaml")
        assert hparams.seed == 0 and hparams.trainer.max_steps == 2 and hparams.loss.margin == 0.1
        content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        shown = HParamsPluginData.FromString(content).session_start_info.hparams
        assert shown["seed"].number_value == 0 and shown["optim/lr"].number_value == cfg.optim.lr
    else:
        (offline_run,) = (tmp_path / "wandb").glob("offline-run-*")
        images = offline_run / "files" / "media" / "images" / "plots"
        assert {p.stem.rsplit("_", 2)[0] for p in images.glob("*.png")} == figures
        import wandb

        # The run's config, which `wandb sync` uploads with the offline run.
        assert wandb.run.config["seed"] == 0 and wandb.run.config["trainer"]["max_steps"] == 2
        assert wandb.run.config["loss"]["margin"] == 0.1


def test_existing_export_stops_a_resumed_run_before_training(synthetic_root, tmp_path):
    (tmp_path / "export").mkdir()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    # Kept by hand: the refusal reads only that export/ exists, before any checkpoint is opened.
    # Recorded as the run that wrote them would have: resume=true continues only sqa's own run.
    ownership.record_created(tmp_path, before=[])
    cfg = compose_train([f"data.corpus.root={synthetic_root}", "resume=true"])
    with pytest.raises(FileExistsError, match="overwrite_export=true"):
        run(cfg, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".lock",
        ".sqa-owned.json",
        "checkpoints",
        "export",
        "train.log",
    ]


@pytest.mark.slow
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


def test_callbacks_come_from_the_config_with_the_runs_mode_folder_and_patience(tmp_path):
    cfg = compose_train(["+callbacks.checkpoint.save_top_k=3", "trainer.enable_progress_bar=false"])
    callbacks = instantiate_callbacks(cfg, tmp_path, "min", 5, patience=7)
    assert list(callbacks) == [
        "checkpoint",
        "resume_point",
        "history",
        "validation_log",
        "early_stopping",
        "model_summary",
    ]
    checkpoint, stopping = callbacks["checkpoint"], callbacks["early_stopping"]
    assert (checkpoint.mode, checkpoint.save_top_k, checkpoint.monitor) == ("min", 3, "val/selection")
    assert Path(checkpoint.dirpath) == Path(callbacks["resume_point"].dirpath) == tmp_path / "checkpoints"
    assert (stopping.mode, stopping.patience, stopping.monitor) == ("min", 7, "val/selection")
    assert "early_stopping" not in instantiate_callbacks(cfg, tmp_path, "max", 5, patience=None)
    with open_dict(cfg):
        del cfg.callbacks["history"]
    with pytest.raises(ValueError, match="needs history"):
        instantiate_callbacks(cfg, tmp_path, "max", 5, patience=None)


def mushra_overrides(root: Path) -> list[str]:
    """A short run (the default model, loss and optimiser) on a MUSHRA-style corpus at `root`."""
    return [
        "trainer.max_steps=150",
        "trainer.val_check_interval=25",
        "trainer.enable_progress_bar=false",
        "bootstrap=200",
        "early_stopping_patience=null",
    ]


@pytest.fixture(scope="module")
def mushra_runs(synthetic_root, tmp_path_factory, monkeypatch_module):
    """The MUSHRA-style corpus (0-100) and the same ratings rescaled to 1-5, each trained alike.

    Returns (run dir, results, training-mean label, score ranges the scatters were drawn on) per scale.
    """
    from sqa.data.synthetic import MUSHRA_MANIFEST, load_synthetic_mushra
    from sqa.reports import plots

    root = tmp_path_factory.mktemp("mushra")
    (root / "audio").symlink_to(synthetic_root)
    corpus = load_synthetic_mushra(root)
    with (root / MUSHRA_MANIFEST).open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    with (root / "rescaled.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, "score": repr(1.0 + 4.0 * float(r["score"]) / 100.0)} for r in rows)
    drawn: list[tuple[float, float]] = []
    scatter = plots.scatter
    monkeypatch_module.setattr(
        plots, "scatter", lambda *a, **k: drawn.append(tuple(a[3])) or scatter(*a, **k)
    )
    train_mean = float(np.mean([c.mos for c in corpus.split("train")]))
    same_data = ["data.batch_size=8", "data.eval_batch_size=16", "data.num_workers=0", "data.preload=true"]
    out = {}
    for name, data, mean in (
        ("0-100", ["data=synthetic_mushra", f"data.corpus.root={root}"], train_mean),
        ("1-5", ["data=csv", f"data.corpus.path={root / 'rescaled.csv'}", *same_data], 1 + train_mean / 25),
    ):
        drawn.clear()
        run_dir = tmp_path_factory.mktemp(f"run-{name}")
        results = run(compose_train([*data, *mushra_overrides(root)]), run_dir).test
        out[name] = (run_dir, results, mean, set(drawn))
    return out


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


def headline_labels(run_dir: Path) -> np.ndarray:
    rows = read_predictions(run_dir / "predictions.csv")
    return np.array([float(r["mos"]) for r in rows if r["test_set"] not in ("reference", "anchor")])


@pytest.mark.slow
def test_a_0_to_100_run_beats_the_constant_predictor_and_ranks_as_well_as_on_1_to_5(mushra_runs):
    run_dir, results, train_mean, _ = mushra_runs["0-100"]
    labels = headline_labels(run_dir)
    constant_rmse = float(np.sqrt(np.mean((labels - train_mean) ** 2)))
    assert results["avg"]["utt"]["rmse"] < constant_rmse
    _, rescaled, _, _ = mushra_runs["1-5"]
    for level in ("utt", "sys"):
        low, _ = rescaled["avg"]["ci"][level]["srcc"]
        assert results["avg"][level]["srcc"] >= low
    # The two runs learn the same thing: errors scale by 25, correlations agree.
    assert results["avg"]["utt"]["rmse"] == pytest.approx(25 * rescaled["avg"]["utt"]["rmse"], rel=0.02)
    assert results["avg"]["sys"]["srcc"] == pytest.approx(rescaled["avg"]["sys"]["srcc"], abs=0.02)


@pytest.mark.slow
def test_a_0_to_100_run_reports_on_0_to_100_and_sets_references_and_anchors_apart(mushra_runs):
    run_dir, results, _, drawn = mushra_runs["0-100"]
    predictions = np.array([float(r["pred"]) for r in read_predictions(run_dir / "predictions.csv")])
    # Predictions on the corpus's scale: far beyond 1-5, inside 0-100 (the head's range clip mapped).
    assert predictions.max() > 20 and predictions.min() >= 0 and predictions.max() <= 100
    saved = json.loads((run_dir / "metrics.json").read_text())
    assert (
        saved["avg"]["utt"]["rmse"] == pytest.approx(results["avg"]["utt"]["rmse"])
        and saved["avg"]["utt"]["rmse"] > 5
    )
    # Every scatter drawn on the 0-100 axes.
    assert drawn == {(0.0, 100.0)} and mushra_runs["1-5"][3] == {(1.0, 5.0)}
    card = (run_dir / "export" / "README.md").read_text()
    assert "on the 0–100 scale" in card and "score_range:\n- 0.0\n- 100.0" in card
    # References and anchors have rows of their own, outside the average.
    assert {"reference", "anchor", "test1", "test2", "test3", "avg"} == set(results)
    assert set(saved["avg"]["averaged_over"]["utt"]["rmse"]) == {"test1", "test2", "test3"}
    assert results["avg"]["utt"]["n"] == sum(results[s]["utt"]["n"] for s in ("test1", "test2", "test3"))
    assert json.loads((run_dir / "run_info.json").read_text())["corpus"]["score_range"] == [0.0, 100.0]


@pytest.mark.slow
def test_sqa_score_scores_a_0_to_100_export_on_0_to_100(mushra_runs, synthetic_root, tmp_path):
    run_dir = mushra_runs["0-100"][0]
    rows = read_predictions(run_dir / "predictions.csv")[:6]
    paths = [str(synthetic_root / "wav" / f"{r['sample_id']}.wav") for r in rows]
    out = tmp_path / "scores.csv"
    assert score.main(["--checkpoint", str(run_dir / "export"), "--output", str(out), *paths]) == 0
    scored = {r["path"]: float(r["score"]) for r in read_predictions(out)}
    for path, row in zip(paths, rows, strict=True):
        assert scored[path] == pytest.approx(float(row["pred"]), abs=1e-3)
