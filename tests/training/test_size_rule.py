"""The size rule: a small corpus's default run is composed again with the small-corpus preset."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
import yaml
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from sqa.training import size_rule
from sqa.training.run import run
from sqa.training.size_rule import PRESET, SMALL_CORPUS_CLIPS, chosen, compose_train, decide

USER = ["data=small_table", "data.corpus.clips=60", "seed=3"]


def test_the_rule_fires_below_its_threshold_and_not_at_it():
    below = decide(True, SMALL_CORPUS_CLIPS - 1, True, USER, pretrained=True)
    assert below.overrides == (*USER, PRESET)
    assert below.line.startswith(f"small corpus: {SMALL_CORPUS_CLIPS - 1} training clips (fewer than 80): ")
    assert "size_rule=false keeps the default model" in below.line
    at = decide(True, SMALL_CORPUS_CLIPS, True, USER, pretrained=True)
    assert (at.overrides, at.line) == (None, None)
    assert SMALL_CORPUS_CLIPS == 80


@pytest.mark.parametrize(
    ("enabled", "from_scratch"),
    [(False, True), (True, False), (False, False)],
    ids=["off", "pretrained", "both"],
)
def test_the_rule_is_silent_when_off_or_for_a_model_not_trained_from_scratch(enabled, from_scratch):
    decision = decide(enabled, 10, from_scratch, USER, pretrained=True)
    assert (decision.overrides, decision.line) == (None, None)
    assert decision.record() == {"applied": False, "preset": None}


@pytest.mark.parametrize(
    "override",
    [
        "model/backbone=logmel",
        "model=ssl_mos",
        "model.head_dim=32",
        "optim=adam",
        "optim.lr=0.01",
        "+optim.weight_decay=0.1",
        "experiment=small_corpus",
        "init_from=null",
        "head_init=random",
        "finetune.freeze_backbone_steps=3",
        "trainer.max_steps=100",
        "trainer.max_epochs=5",
        "size_rule=true",
    ],
)
def test_a_command_line_that_chose_the_model_or_its_training_is_kept(override):
    decision = decide(True, 20, True, [*USER, override], pretrained=True)
    assert decision.overrides is None
    assert f"but {override} chooses the model or its training" in decision.line


@pytest.mark.parametrize(
    "override",
    [
        "trainer.val_check_interval=4",
        "data.batch_size=4",
        "models_dir=x",
        "optimizer=x",
        "early_stopping_patience=3",
    ],
)
def test_settings_that_choose_neither_leave_the_rule_on(override):
    """Whole dotted segments: `models_dir` or `optimizer` is not `model` or `optim`."""
    assert chosen([override]) == []
    assert decide(True, 20, True, [*USER, override], pretrained=True).overrides == (*USER, override, PRESET)


def test_an_override_key_ends_at_the_first_equals_sign():
    # A Hydra multirun's folders are named by their overrides, so a path value may hold "=".
    override = "init_from=multirun/2026-12-03/optim.lr=0.01/export"
    assert size_rule.override_key(override) == "init_from"
    assert chosen([override, "data.corpus.path=runs/seed=1/clips.csv"]) == [override]


def test_the_applied_rule_says_what_it_adds_and_how_to_keep_the_default():
    line = decide(True, 20, True, USER, pretrained=True).line
    assert line == (
        "small corpus: 20 training clips (fewer than 80): the size rule adds experiment=small_corpus "
        "(the frozen pretrained Distill-MOS backbone, Adam, the head started at the training mean; "
        "docs/selection.md); size_rule=false keeps the default model"
    )


def test_without_the_pretrained_package_the_run_trains_as_configured_and_says_why():
    decision = decide(True, 20, True, USER, pretrained=False)
    assert decision.overrides is None
    assert decision.line == (
        "small corpus: 20 training clips (fewer than 80): experiment=small_corpus would start from the "
        "pretrained Distill-MOS backbone, but the distillmos package is not installed (pip install "
        "'sqa[distillmos]'); training the default model from scratch, which this small often predicts "
        "no better than the training mean"
    )


def test_train_yaml_composes_alike_inside_a_hydra_app_and_on_its_own_without_a_warning():
    """Both branches of `compose_train`: Hydra already initialised (train.py) or not (tests, sweeps)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        alone = compose_train(["seed=5", "data.batch_size=4"])
    with initialize_config_dir(str(size_rule.CONF_DIR), version_base="1.3"):
        inside = compose_train(["seed=5", "data.batch_size=4"])
    assert (alone.seed, alone.data.batch_size) == (5, 4)
    assert OmegaConf.to_container(inside) == OmegaConf.to_container(alone)


def test_without_a_command_line_the_rule_only_names_the_preset():
    decision = decide(True, 20, True, None, pretrained=True)
    assert decision.overrides is None
    assert decision.line.startswith(
        "small corpus: 20 training clips (fewer than 80); experiment=small_corpus"
    )


def test_the_composed_run_is_the_preset_with_every_command_line_value_kept():
    """Both sources of a value: the preset's where the command line is silent, else the command line's."""
    silent = compose_train(decide(True, 42, True, USER, pretrained=True).overrides)
    assert silent.model.backbone._target_ == "sqa.models.distillmos.DistillMosBackbone"
    assert silent.optim._target_ == "torch.optim.Adam"
    assert (silent.head_init, silent.trainer.max_steps, silent.finetune.freeze_backbone_steps) == (
        "train_mean",
        400,
        400,
    )
    assert (silent.data.corpus.clips, silent.seed, silent.data.batch_size) == (60, 3, 8)
    assert silent.data.max_train_seconds is None
    spoken = compose_train(decide(True, 42, True, [*USER, "data.batch_size=4"], pretrained=True).overrides)
    assert spoken.data.batch_size == 4
    assert spoken.model.backbone._target_ == silent.model.backbone._target_


def test_a_run_composes_itself_again_and_records_it(tmp_path, monkeypatch):
    """The wiring, with a cheap preset standing in for the Distill-MOS one (the slow test runs that)."""
    from tests.training.test_selection import write_per_system_corpus

    manifest = write_per_system_corpus(tmp_path / "corpus")
    overrides = [
        "data=csv",
        f"data.corpus.path={manifest}",
        "data.num_workers=0",
        "trainer.val_check_interval=2",
        "trainer.enable_progress_bar=false",
        "early_stopping_patience=1",
        "bootstrap=10",
    ]
    monkeypatch.setattr(size_rule, "PRESET", "trainer.max_steps=4")
    run_dir = tmp_path / "run"
    run(compose_train(overrides), run_dir, overrides)
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    assert config["trainer"]["max_steps"] == 4
    assert config["early_stopping_patience"] == 1
    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    assert info["size_rule"] == {"applied": True, "preset": "trainer.max_steps=4"}
    log = (run_dir / "train.log").read_text(encoding="utf-8")
    assert "[WARNING] - small corpus: " in log and "the size rule adds trainer.max_steps=4" in log
    exported = json.loads((run_dir / "export" / "run_info.json").read_text(encoding="utf-8"))
    assert exported["size_rule"] == info["size_rule"]


@pytest.mark.slow
def test_train_py_on_a_60_clip_table_trains_the_small_corpus_preset(tmp_path):
    """The default command on a user's 60-clip table: Distill-MOS, frozen, and says so (real preset)."""
    import subprocess
    import sys

    from tests.conftest import REPO

    run_dir = tmp_path / "run"
    command = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "data=small_table"]
    command.append(f"data.corpus.root={tmp_path / 'table'}")
    subprocess.run(command, cwd=REPO, check=True, capture_output=True)
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    assert config["model"]["backbone"]["_target_"] == "sqa.models.distillmos.DistillMosBackbone"
    assert json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))["size_rule"]["applied"]
    assert Path(run_dir / "export" / "model.pt").is_file()
