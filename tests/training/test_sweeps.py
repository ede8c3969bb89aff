"""Sweeps validate only, name their objective and print how to test the best settings; loggers get hparams."""

from __future__ import annotations

import json
import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from sqa.core import artefacts
from sqa.core.atomic import atomic_write_json
from sqa.data.corpus import LabelCounts
from sqa.training.datamodule import MOSDataModule
from sqa.training.run import run
from sqa.training.run_dir import SweepSummary
from sqa.training.run_outputs import describe_objective, objective_record
from sqa.training.selection import choose_rule
from tests.conftest import REPO
from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    return write_per_system_corpus(tmp_path_factory.mktemp("per_system"))


def read_json(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def test_a_sweep_trial_validates_only_and_records_its_objective(manifest, tmp_path, monkeypatch, caplog):
    def untouchable(self):
        raise AssertionError("a sweep's trial read the test set")

    monkeypatch.setattr(MOSDataModule, "test_dataloader", untouchable)
    cfg = compose_train(["hparams_search=optuna", *tiny_run_overrides(manifest), "trainer.max_steps=12"])
    assert cfg.test_after_fit is False
    with caplog.at_level(logging.INFO, logger="sqa"):
        result = run(cfg, tmp_path)
    # No test metrics, predictions, scatters or export: the selection, curves and checkpoints only.
    assert result.test == {}
    assert not any((tmp_path / name).exists() for name in ("metrics.json", "predictions.csv", "export"))
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["curves.png"]
    info = read_json(tmp_path / "run_info.json")
    assert "learning_check" not in info and "scale_shift" not in info
    best = info["selection"]["best_checkpoint"]
    assert (tmp_path / "checkpoints" / best).is_file()
    # Two validation systems: selected on utterance RMSE, an error, so the objective is its negation.
    rmse = dict(map(tuple, info["selection"]["scores"]))[info["selection"]["selected_step"]]
    assert info["objective"] == {
        "value": result.objective,
        "quantity": "validation utterance-level RMSE",
        "negated": True,
    }
    assert result.objective == -rmse == -result.val_selection
    assert f"Validation only (test_after_fit=false): {best} was neither tested nor exported" in (
        caplog.messages
    )
    line = f"Objective (what a sweep maximises): {result.objective:.4g} = minus the validation "
    assert f"{line}utterance-level RMSE {rmse:.4g}" in caplog.messages


def test_the_objective_is_named_with_its_sign():
    srcc = {"value": 0.8123, "quantity": "validation system-level SRCC", "negated": False}
    assert describe_objective(srcc) == "0.8123 = the validation system-level SRCC"
    assert describe_objective({"value": -0.655, "quantity": "validation loss", "negated": True}) == (
        "-0.655 = minus the validation loss 0.655"
    )


# A trial's selection rule: validation utterance-level RMSE (an error measure: its objective is negated).
RMSE_RULE = choose_rule({"v": LabelCounts(40, 9, 20, 9, clips_per_system=4)}, metric="rmse", level="utt")


def fake_trial(sweep_dir: Path, job: int, value: float, overrides: list[str]) -> Path:
    """A trial directory as a validation-only run and Hydra leave it, its objective recorded as `value`."""
    trial = sweep_dir / str(job)
    (trial / ".hydra").mkdir(parents=True)
    # Kept by hand: .hydra/overrides.yaml is Hydra's file, not sqa's.
    OmegaConf.save(OmegaConf.create(overrides), trial / ".hydra" / "overrides.yaml")
    atomic_write_json(trial / "run_info.json", {"seed": 0, "objective": objective_record(RMSE_RULE, value)})
    return trial


def test_the_sweep_summary_names_the_best_value_and_the_command_that_tests_it(tmp_path, caplog):
    sweep = tmp_path / "multirun" / "12-00-00"
    common = ["hparams_search=optuna", "data.corpus.path=my table.csv", "trainer.max_steps=200"]
    fake_trial(sweep, 0, -0.9, [*common, "optim.lr=0.001"])
    # The sweeper's best trial is the first of equal values (jobs in number order, 10 after 2).
    fake_trial(sweep, 10, -0.655, [*common, "optim.lr=0.01"])
    best = fake_trial(sweep, 2, -0.655, [*common, "optim.lr=0.002", "test_after_fit=false"])
    OmegaConf.save(
        OmegaConf.create({"name": "optuna", "best_params": {"optim.lr": 0.002}, "best_value": -0.655}),
        sweep / "optimization_results.yaml",
    )
    with caplog.at_level(logging.INFO, logger="sqa"):
        SweepSummary().on_multirun_end(config=OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    summary, command = caplog.messages
    assert summary == f"Best value -0.655 = minus the validation utterance-level RMSE 0.655 (trial 2: {best})"
    # The trial's own overrides, without the search (so testing is on again), into <sweep>/best.
    assert shlex.split(command.splitlines()[1]) == [
        "python",
        sys.argv[0],
        "data.corpus.path=my table.csv",
        "trainer.max_steps=200",
        "optim.lr=0.002",
        f"hydra.run.dir={sweep / 'best'}",
    ]
    # Another sweeper (a grid over seeds) writes no optimization_results.yaml: nothing to say.
    caplog.clear()
    SweepSummary().on_multirun_end(config=OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert caplog.messages == []


@pytest.mark.slow
def test_an_optuna_sweep_keeps_off_the_test_set_and_its_printed_command_tests_the_best_trial(
    manifest, tmp_path
):
    sweep = tmp_path / "sweep"
    overrides = [o for o in tiny_run_overrides(manifest) if not o.startswith("trainer.max_steps")]
    command = [sys.executable, "train.py", "-m", "hparams_search=optuna", *overrides, "trainer.max_steps=8"]
    done = subprocess.run(
        [*command, f"hydra.sweep.dir={sweep}", "hydra.sweeper.n_trials=2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for trial in ("0", "1"):
        assert (sweep / trial / "run_info.json").is_file()
        assert not (sweep / trial / "metrics.json").exists() and not (sweep / trial / "export").exists()
    best_value = OmegaConf.load(sweep / "optimization_results.yaml").best_value
    output = done.stdout + done.stderr
    assert re.search(rf"Best value {best_value:.4g} = minus the validation utterance-level RMSE", output)
    (printed,) = re.findall(r"^  python train\.py .*$", output, flags=re.MULTILINE)
    again = subprocess.run(
        [sys.executable, *shlex.split(printed)[1:]], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    # The best settings, run once with testing: the same training (same seed), now tested and exported.
    assert read_json(sweep / "best" / "run_info.json")["objective"]["value"] == best_value
    assert (sweep / "best" / "metrics.json").is_file() and (sweep / "best" / "export" / "model.pt").is_file()


def scalars(log_dir: Path) -> tuple[dict[str, float], HParamsPluginData]:
    """The last value of every scalar of a TensorBoard run, and its hparams plugin's session start."""
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    values = {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}
    content = events.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    return values, HParamsPluginData.FromString(content)


@pytest.mark.parametrize("tested", [True, False], ids=["run", "sweep_trial"])
def test_tensorboard_gets_the_hyperparameters_with_the_runs_real_metrics(tested, manifest, tmp_path):
    overrides = [*tiny_run_overrides(manifest), "trainer.max_steps=8", "logger=tensorboard"]
    run(compose_train([*overrides, f"test_after_fit={str(tested).lower()}"]), tmp_path)
    (log_dir,) = {p.parent for p in (tmp_path / "tensorboard").rglob("events.out.tfevents.*")}
    values, start = scalars(log_dir)
    assert "hp_metric" not in values
    assert start.session_start_info.hparams["optim/lr"].number_value == pytest.approx(3e-3)
    info = read_json(tmp_path / "run_info.json")
    step = info["selection"]["selected_step"]
    assert values["hp/val/selection"] == pytest.approx(dict(map(tuple, info["selection"]["scores"]))[step])
    assert "hp/val/default/utt_rmse" in values and "hp/val/selection_tiebreak" not in values
    hp_test = {tag for tag in values if tag.startswith("hp/test/")}
    if not tested:
        assert hp_test == set()
        return
    # Every defined test metric, equal to metrics.json's (TensorBoard keeps 32-bit floats).
    metrics = artefacts.read_metrics(tmp_path)
    expected = {
        f"hp/test/{name}/{level}_{metric}": value
        for name, block in metrics.items()
        for level in ("utt", "sys")
        for metric, value in block[level].items()
        if metric != "n" and value is not None
    }
    assert hp_test == set(expected) and "hp/test/avg/sys_srcc" in expected
    assert {tag: values[tag] for tag in expected} == pytest.approx(expected, rel=1e-6)


def test_wandb_keeps_the_metrics_in_the_runs_summary_beside_its_config(tmp_path):
    from lightning.pytorch.loggers import WandbLogger

    from sqa.training.run_outputs import log_hparams

    logger = WandbLogger(project="sqa", offline=True, save_dir=str(tmp_path))
    try:
        logger.log_hyperparams({"seed": 3})
        log_hparams(logger, {"seed": 3}, {"hp/val/selection": 0.5, "hp/test/avg/utt_srcc": 0.75}, step=8)
        assert logger.experiment.config["seed"] == 3
        summary = logger.experiment.summary
        assert (summary["hp/val/selection"], summary["hp/test/avg/utt_srcc"]) == (0.5, 0.75)
    finally:
        logger.experiment.finish()
