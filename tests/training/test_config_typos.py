"""train.py's settings that name no setting: one line with a 'did you mean', exit 2, before the run."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from sqa.training.plan import CONF_DIR, compose_train
from sqa.training.typos import command_overrides, refusal
from tests.conftest import REPO


def refused(*overrides: str) -> str | None:
    """Why the train.py command line `overrides` is refused, or None."""
    return refusal(list(overrides), compose_train, CONF_DIR)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (
            ["data=csv", "data.corpus.score_rnage=[0,100]"],
            "data.corpus.score_rnage: no such setting; did you mean data.corpus.score_range?",
        ),
        (["model.dropuot=0.1"], "model.dropuot: no such setting; did you mean model.dropout?"),
        (["sed=0,1,2"], "sed: no such setting; did you mean seed?"),
        # A missing level is named at that level.
        (["trainr.max_steps=3"], "trainr: no such setting; did you mean trainer?"),
        # Deleting a key that is not there.
        (
            ["~callbacks.model_summry"],
            "callbacks.model_summry: no such setting; did you mean callbacks.model_summary?",
        ),
        # A key the level's reader takes but the configuration does not set: named with its +.
        (
            ["data.corpus.systems_per_btach=[3,3]"],
            "data.corpus.systems_per_btach: no such setting; did you mean +data.corpus.systems_per_batch?",
        ),
    ],
)
def test_a_key_that_does_not_exist_gets_the_closest_key_at_its_level(line, said):
    assert refused(*line) == said


def test_a_key_far_from_every_key_names_the_keys_of_its_level():
    # The synthetic corpus has no rating scale: nothing is close, so its settings are listed.
    assert refused("data.corpus.score_rnage=[0,100]") == (
        "data.corpus.score_rnage: no such setting (data.corpus has root, seed, clips_per_system, "
        "sample_rate_filter; with +: allow_generate, rater_spread, songs, systems_per_batch)"
    )
    # A key the reader takes is not a typo: it is added with +, as Hydra says too.
    assert refused("data.corpus.systems_per_batch=[3,3]") == (
        "data.corpus.systems_per_batch: not set in the configuration, though "
        "sqa.data.synthetic.load_synthetic takes it: add it with +data.corpus.systems_per_batch=[3,3]"
    )
    # A candidate is added with +.
    assert refused("candidates.models.mine=[]") == (
        "candidates.models.mine: no such setting; a new one is added with +candidates.models.mine=[]"
    )


@pytest.mark.parametrize(
    ("added", "close"),
    [
        ("+trainer.max_step=10", "trainer.max_steps"),
        ("+trainer.max_epoch=3", "trainer.max_epochs"),
        ("++model.dropuot=0.2", "model.dropout"),
        ("+trainr.max_steps=3", "trainer"),
        ("+data.corpus.systems_per_btach=[3,3]", "+data.corpus.systems_per_batch"),
    ],
)
def test_a_key_added_with_plus_this_close_to_an_existing_key_is_refused(added, close):
    key = added.split("=", 1)[0]
    assert refused(added) == (
        f"{key}: no such setting; did you mean {close}? (+ adds a setting, and this one is too close "
        "to an existing name to be a new one)"
    )


@pytest.mark.parametrize(
    "line",
    [
        # docs/guide.md, tests and train.yaml's comment: keywords of the level's target.
        ["+callbacks.checkpoint.save_top_k=3"],
        ["+data.corpus.systems_per_batch=[3,3,3,2,2]"],
        ["+trainer.limit_val_batches=2"],
        # New candidates, even a name one letter from another (logmel2, logmel).
        ["+candidates.models.mine=['model.pitch=midi']", "candidates.use=[mine,logmel_pitch]"],
        ["+candidates.models.logmel2=[]", "candidates.use=[logmel2]"],
        # docs/results.md: the list names candidates that the overrides after it add.
        [
            "data=csv",
            "data.corpus.path=ratings.csv",
            "data.corpus.score_range=[0,100]",
            "candidates.use=[anchor01,anchor1,rank]",
            "+candidates.models.anchor01=['experiment=calibrated','model.train_head=true','finetune.anchor=0.1']",
            "+candidates.models.anchor1=['experiment=calibrated','model.train_head=true','finetune.anchor=1']",
            "+candidates.models.rank=['experiment=calibrated','model.train_head=true','loss=contrastive']",
            "hydra.run.dir=runs/real-anchor/x/seed0",
        ],
        # A new key far from every existing one; a key under a value that is not a mapping.
        ["+fooo=1"],
        ["+init_from.x=1"],
        # Config groups and their keys (docs/guide.md).
        ["model/backbone=fusion", "model.backbone.mode=gated", "model.backbone.dim=128"],
        ["model/backbone=fusion", "model/backbone@model.backbone.second=crepe"],
        ["model=uncertainty", "model.distribution=laplace", "loss=laplace_nll"],
        ["experiment=calibrated"],
        ["hparams_search=optuna", "hydra.sweeper.n_trials=30", "trainer.max_steps=300"],
        ["seed=0,1,2", "model.pitch=midi", "hydra.sweep.dir=runs/midi"],
        # A key that an earlier override made.
        ["data=csv", "data.corpus.columns={score:mos}", "data.corpus.columns.score=file"],
        # Mandatory values not given yet (???) are settings too.
        ["data=csv", "data.corpus.path=ratings.csv"],
    ],
)
def test_documented_command_lines_and_plus_keys_far_from_every_key_are_taken(line):
    assert refused(*line) is None


def test_what_this_check_cannot_read_is_left_to_hydra():
    # A syntax error, a sweep over config groups, another configuration or a help request.
    assert refused("+candidates.models.bad=[model.head_dim=-1]") is None
    assert refused("model=aligned,uncertainty", "model.dropuot=0.1") is None
    assert command_overrides(["-cn", "eval", "seed=1"]) is None
    assert command_overrides(["--help"]) is None and command_overrides(["--cfg", "nonsense"]) is None
    assert command_overrides(["-m", "seed=1,2", "--cfg", "job"]) == ["seed=1,2"]


def load_train_py():
    """train.py as a module (its `main` not called)."""
    spec = importlib.util.spec_from_file_location("train_entry", REPO / "train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_py_refuses_a_typo_in_one_line_with_status_2(capsys):
    train = load_train_py()
    with pytest.raises(SystemExit) as stop:
        train.refuse_typos(["hydra.run.dir=/nonexistent/x", "+trainer.max_step=10"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "train.py: +trainer.max_step: no such setting; did you mean trainer.max_steps? (+ adds a setting, "
        "and this one is too close to an existing name to be a new one)"
    ]
    # A command line without a typo goes on to Hydra.
    train.refuse_typos(["+trainer.limit_val_batches=2", "trainer.max_steps=3"])
    assert capsys.readouterr().err == ""


@pytest.mark.slow  # a second Python process
def test_train_py_stops_at_a_typo_before_hydra_or_the_run_make_anything(tmp_path):
    run_dir = tmp_path / "run"
    for typo, line in (
        ("data.corpus.score_rnage=[0,100]", "train.py: data.corpus.score_rnage: no such setting ("),
        (
            "+trainer.max_step=10",
            "train.py: +trainer.max_step: no such setting; did you mean trainer.max_steps?",
        ),
    ):
        done = subprocess.run(
            [sys.executable, str(REPO / "train.py"), f"hydra.run.dir={run_dir}", typo],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        (said,) = done.stderr.strip().splitlines()
        assert said.startswith(line)
        assert list(tmp_path.iterdir()) == []
