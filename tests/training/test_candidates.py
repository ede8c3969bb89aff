"""Candidates: which runs train several models, how the winner is chosen, what the run records."""

from __future__ import annotations

import csv
import json
import logging
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hydra.utils import instantiate
from omegaconf import OmegaConf

import sqa
from sqa.data.corpus import LabelCounts
from sqa.models.backbone import LogMelBackbone
from sqa.models.branches import IntonationBranch
from sqa.models.distillmos import DistillMosBackbone
from sqa.training import candidates
from sqa.training import plan as plans
from sqa.training.callbacks import checkpoint_step
from sqa.training.candidates import Tried, pick, validation_score
from sqa.training.plan import chosen, plan
from sqa.training.racing import Standing
from sqa.training.run import run
from sqa.training.selection import choose_rule

SR = 16000
# (system, split, label, clips): the noise of a clip falls as its label rises; with `flat_valid`
# every validation clip is rated the training mean (3.0), whatever its noise.
SYSTEMS = [
    *((f"tr{i}", "train", q, 4) for i, q in enumerate((1.5, 2.1, 2.7, 3.3, 3.9, 4.5))),
    ("va0", "valid", 2.0, 4),
    ("va1", "valid", 4.0, 4),
    *((f"te{i}", "test", q, 3) for i, q in enumerate((1.8, 3.0, 4.2))),
]
# The simpler candidate first: it never learns (learning rate 0) and scores the training mean.
CANDIDATES = (
    "+candidates.models.constant=['optim=adam','optim.lr=0.0','head_init=train_mean','trainer.max_steps=4',"
    "'trainer.val_check_interval=4']",
    "+candidates.models.learns=['optim=adam','optim.lr=3e-3','trainer.max_steps=24',"
    "'trainer.val_check_interval=4','early_stopping_patience=null']",
    "candidates.use=[constant,learns]",
)


def write_corpus(root: Path, flat_valid: bool, valid_shift: float = 0.0, systems=SYSTEMS) -> Path:
    """Sung-like tones whose noise falls with the label (validation rated flat if asked); a manifest.

    `valid_shift` is added to the validation labels (their mean is then not the training mean, 3.0);
    `systems` lists (system, split, label, clips).
    """
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    rows = ["wav_path,score,system_id,sample_id,split"]
    for system, split, label, clips in systems:
        rated = 3.0 if flat_valid and split == "valid" else label
        rated += valid_shift if split == "valid" else 0.0
        for k in range(clips):
            t = np.arange(int(SR * (0.4 + 0.1 * k))) / SR
            tone = 0.3 * np.sin(2 * np.pi * rng.uniform(180, 400) * t)
            noise = rng.normal(0, 0.3 * (5.0 - label) / 3.5, t.size)
            sf.write(root / f"{system}-{k}.wav", (tone + noise).astype(np.float32), SR)
            rows.append(f"{system}-{k}.wav,{rated},{system},{system}-{k},{split}")
    (root / "manifest.csv").write_text("\n".join(rows) + "\n")
    return root / "manifest.csv"


def overrides(manifest: Path, *more: str, folds: int = 0) -> list[str]:
    """A train.py command line on `manifest` that chooses no model: the data, the candidates.

    Its two validation systems are too few to choose by (sqa.training.crossval): these runs choose
    on validation all the same (`folds=0`), as the tests of that choice need; the
    cross-validation's own are in test_crossval.py.
    """
    return [
        "data=csv",
        f"data.corpus.path={manifest}",
        "data.num_workers=0",
        "data.batch_size=8",
        "trainer.enable_progress_bar=false",
        "bootstrap=20",
        f"candidates.folds={folds}",
        *CANDIDATES,
        *more,
    ]


def trained(tmp_path: Path, flat_valid: bool, *more: str, valid_shift: float = 0.0) -> tuple[Path, dict]:
    """Run the two candidates on a corpus; the run directory and its run_info.json."""
    manifest = write_corpus(tmp_path / "corpus", flat_valid, valid_shift)
    line = overrides(manifest, *more)
    run_dir = tmp_path / "run"
    run(plans.compose_train(line), run_dir, line)
    return run_dir, json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))


def test_the_candidate_that_learns_wins_where_validation_sounds_like_training(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sqa")
    run_dir, info = trained(tmp_path, False, "candidates.ensemble=true", "candidates.peer=constant")
    record = info["candidates"]
    entries = {e["name"]: e for e in record["entries"]}
    assert record["winner"] == "learns"
    # Every model but the peer itself is judged against the peer's ranking; the constant's SRCC is
    # undefined (one score for every clip), so that judgement is "not judged", said in the last line.
    assert info["learning_check"]["peer"] == {
        "name": "constant",
        "peer_srcc": None,
        "difference": None,
        "difference_ci": None,
        "p": None,
    }
    peers = {
        name: json.loads((run_dir / "candidates" / name / "run_info.json").read_text())["learning_check"].get(
            "peer"
        )
        for name in ("constant", "learns")
    }
    assert peers["constant"] is None and peers["learns"]["name"] == "constant"
    assert (
        "; against the pretrained peer constant its ranking is not judged (SRCC "
        in caplog.records[-1].getMessage()
    )
    assert record["compared_on"] == "validation utt rmse (min)"
    # The constant scores 3.0 on labels 2 and 4: an RMSE of 1 exactly.
    assert entries["constant"]["valid"]["value"] == pytest.approx(1.0, abs=1e-4)
    assert entries["learns"]["valid"]["value"] < 1.0 - 1e-3
    for entry in entries.values():
        assert entry["valid"]["clips"] == 8
        lo, hi = entry["valid"]["ci"]
        assert lo <= entry["valid"]["value"] <= hi
    # Scored with its selected checkpoint's weights: the RMSE its own validation check gave there.
    for name in ("constant", "learns"):
        own = json.loads((run_dir / "candidates" / name / "run_info.json").read_text(encoding="utf-8"))
        assert own["selection"]["selected_step"] < own["training_end"]["step"] or name == "constant"
        assert entries[name]["valid"]["value"] == pytest.approx(
            own["learning_check"]["valid"]["rmse"], abs=1e-5
        )
    # The mean of the two is a candidate of its own, scored on the same clips.
    joined = entries["ensemble(learns, constant)"]
    assert joined["folder"] is None and math.isfinite(joined["valid"]["value"])
    # The winner's test is the run's: metrics.json and the export's record are its own.
    won = json.loads((run_dir / "candidates" / "learns" / "metrics.json").read_text(encoding="utf-8"))
    assert json.loads((run_dir / "metrics.json").read_text(encoding="utf-8")) == won
    # Its configuration is the run's: the one that rebuilds the exported model.
    own = (run_dir / "candidates" / "learns" / "config.yaml").read_text(encoding="utf-8")
    assert (run_dir / "config.yaml").read_text(encoding="utf-8") == own
    assert entries["learns"]["test"]["utt"]["rmse"] == pytest.approx(won["avg"]["utt"]["rmse"])
    exported = json.loads((run_dir / "export" / "run_info.json").read_text(encoding="utf-8"))
    assert exported["candidates"] == record
    card = (run_dir / "export" / "README.md").read_text(encoding="utf-8")
    assert "## Candidates" in card and "| `constant` | 1 |" in card
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("candidates: learns won")]
    assert len(said) == 1 and "constant 1 [" in said[0] and ", by 0." in said[0]
    # Each candidate's seconds are its own: at least its fit (from its start to its training's end),
    # and no two count the same time, so together they fit in the run; said and kept.
    messages = [(r.getMessage(), r.created) for r in caplog.records]
    for number, name in enumerate(("constant", "learns"), start=1):
        began = next(t for m, t in messages if m.startswith(f"candidate {number} of 2: {name} "))
        trained_until = next(
            t for m, t in messages if t >= began and m.startswith("Training stopped at step")
        )
        ended = next(m for m, _ in messages if m.startswith(f"candidate {name}: "))
        seconds = entries[name]["seconds"]
        assert seconds >= trained_until - began - 0.1
        said = float(ended.removeprefix(f"candidate {name}: ").removesuffix(" s"))
        assert abs(said - seconds) <= 0.55
        row = next(line for line in card.splitlines() if line.startswith(f"| `{name}` |"))
        assert row.endswith(f" | {seconds:.4g} |")
    assert sum(e["seconds"] for e in entries.values()) <= messages[-1][1] - messages[0][1] + 0.3
    assert joined["seconds"] > 0
    # The ensemble's scoring, a phase of its own, says when it starts.
    assert "candidates: the mean of learns and constant is scored on the validation and test clips" in [
        r.getMessage() for r in caplog.records
    ]
    # Every candidate is exported in its folder, with its own record.
    for name in ("learns", "constant"):
        own = json.loads(
            (run_dir / "candidates" / name / "export" / "metrics.json").read_text(encoding="utf-8")
        )
        assert own == json.loads((run_dir / "candidates" / name / "metrics.json").read_text(encoding="utf-8"))


def test_the_constant_candidate_wins_where_validation_is_rated_flat_at_the_training_mean(tmp_path):
    run_dir, info = trained(tmp_path, True, "retrieval.datastore=true")
    record = info["candidates"]
    entries = {e["name"]: e for e in record["entries"]}
    assert entries["constant"]["valid"]["value"] == pytest.approx(0.0, abs=1e-4)
    assert entries["learns"]["valid"]["value"] > 1e-2
    assert record["winner"] == "constant"
    won = json.loads((run_dir / "candidates" / "constant" / "metrics.json").read_text(encoding="utf-8"))
    assert json.loads((run_dir / "metrics.json").read_text(encoding="utf-8")) == won
    # The run's export alone gets the datastore; the candidates' own exports get none.
    assert (run_dir / "export" / "datastore.pt").is_file() and "retrieval" in info
    for name in ("constant", "learns"):
        assert (run_dir / "candidates" / name / "export" / "config.yaml").is_file()
        assert not (run_dir / "candidates" / name / "export" / "datastore.pt").exists()


def tried(name: str, value: float) -> Tried:
    return Tried(name, None, None, None, Standing(value, None))


def without_seconds(record: dict) -> dict:
    """A candidates record without each entry's wall seconds, which no two runs share."""
    return {**record, "entries": [{k: v for k, v in e.items() if k != "seconds"} for e in record["entries"]]}


@pytest.mark.parametrize(
    ("values", "mode", "winner"),
    [
        ((1.0, 0.5), "min", "b"),  # lower error, by more than the tolerance
        ((1.0, 1.0 - 5e-7), "min", "a"),  # within the tolerance: the simpler stays
        ((1.0, 1.0 - 2e-6), "min", "b"),  # just beyond it
        ((0.5, 0.9), "max", "b"),
        ((0.5, 0.5 + 5e-7), "max", "a"),
        ((0.9, 0.5), "max", "a"),
        ((0.5, 0.9), "min", "a"),
        ((math.nan, 3.0), "min", "b"),  # a NaN never stays best
        ((3.0, math.nan), "min", "a"),
    ],
)
def test_pick_takes_a_later_candidate_only_when_better_by_more_than_the_tolerance(values, mode, winner):
    assert pick([tried("a", values[0]), tried("b", values[1])], mode, 1e-6).name == winner


@pytest.mark.parametrize(("values", "mode"), [((1.0, 0.5), "min"), ((0.5, 1.0), "max")])
def test_pick_keeps_the_first_candidate_when_a_later_one_is_better_by_exactly_the_tolerance(values, mode):
    # 1.0 - 0.5 is exactly 0.5 in floating point: better by the tolerance, not by more.
    assert abs(values[0] - values[1]) == 0.5
    assert pick([tried("a", values[0]), tried("b", values[1])], mode, 0.5).name == "a"
    # Just beyond it, the later one wins.
    assert pick([tried("a", values[0]), tried("b", values[1])], mode, 0.4999).name == "b"


def test_pick_compares_each_candidate_with_the_best_so_far_not_with_the_first():
    entries = [tried("a", 1.0), tried("b", 0.5), tried("c", 0.7)]
    assert pick(entries, "min", 1e-6).name == "b"


def compose(*line: str):
    return plans.compose_train(list(line))


def test_a_command_line_that_chooses_nothing_trains_the_listed_candidates_in_order():
    line = ["data=csv", "data.corpus.path=x.csv", "seed=2"]
    chosen_plan = plan(compose(*line), line)
    assert [c.name for c in chosen_plan.candidates] == ["logmel_pitch", "distillmos_ft", "calibrated"]
    assert [c.overrides for c in chosen_plan.candidates] == [
        ("model.pitch=intonation",),
        (
            "experiment=small_corpus",
            "trainer.max_steps=500",
            "finetune.backbone_lr_scale=0.1",
            "finetune.patience_steps=50",
            "early_stopping_patience=null",
        ),
        ("experiment=calibrated",),
    ]
    assert chosen_plan.ensemble
    assert chosen_plan.overrides == tuple(line)
    assert "logmel_pitch, distillmos_ft, calibrated" in chosen_plan.line


@pytest.mark.parametrize("name", sorted(compose().candidates.models))
def test_every_defined_candidate_composes_and_builds_its_model(name):
    cfg = compose(*compose().candidates.models[name])
    model = instantiate(cfg.model)
    pretrained = name.startswith("distillmos") or name == "calibrated"
    assert isinstance(model.backbone, DistillMosBackbone if pretrained else LogMelBackbone)
    assert isinstance(model.pitch, IntonationBranch) == name.endswith("_pitch")
    if name == "distillmos_ft":
        # distillmos's 400 steps with the network fixed, then 100 with its transformer learning
        # at a tenth of the rate and its spectrogram CNN still fixed.
        assert (cfg.trainer.max_steps, cfg.finetune.freeze_backbone_steps) == (500, 400)
        assert cfg.finetune.backbone_lr_scale == 0.1 and cfg.early_stopping_patience is None
        backbone = model.backbone
        assert not any(p.requires_grad for p in backbone.cnn.parameters())
        assert all(p.requires_grad for p in backbone.layers.parameters())


@pytest.mark.parametrize(
    "override",
    [
        "model.pitch=midi",
        "model/backbone=distillmos",
        "optim=adam",
        "experiment=small_corpus",
        "+init_from.x=1",
        "trainer.max_steps=5",
        "finetune.backbone_lr_scale=0.1",
        "head_init=train_mean",
    ],
)
def test_a_command_line_that_chooses_the_model_or_its_training_trains_it_alone(override):
    cfg = compose("data=csv", "data.corpus.path=x.csv") if override.startswith("+") else compose(override)
    chosen_plan = plan(cfg, [override])
    assert chosen_plan.candidates == ()
    assert override in chosen_plan.line


@pytest.mark.parametrize(
    "override", ["trainer.val_check_interval=10", "data.batch_size=4", "candidates.ensemble=true", "seed=1"]
)
def test_settings_that_choose_no_model_keep_the_candidates(override):
    assert plan(compose(override), [override]).candidates


def test_a_key_that_merely_starts_like_a_chosen_one_chooses_nothing():
    assert chosen(["models_dir=x", "optimizer_note=1", "+model.pitch=midi"]) == ["+model.pitch=midi"]


def test_no_command_line_a_sweep_trial_several_devices_or_candidates_null_train_alone():
    cfg = compose()
    assert plan(cfg, None).candidates == () and plan(cfg, None).line is None
    assert plan(compose("candidates=null"), ["candidates=null"]).candidates == ()
    trial = plan(compose("test_after_fit=false"), ["test_after_fit=false"])
    assert trial.candidates == () and "sweep" in trial.line
    ddp = plan(compose("trainer.devices=2"), ["trainer.devices=2"])
    assert ddp.candidates == () and "several devices" in ddp.line
    assert plan(compose("trainer.devices=1"), ["trainer.devices=1"]).candidates


def test_a_candidate_that_is_not_a_list_of_overrides_not_defined_or_not_a_name_is_refused():
    cfg = compose()
    cfg.candidates.use = ["logmel"]
    cfg.candidates.models.logmel = "model.pitch=midi"
    with pytest.raises(ValueError, match=r"candidates.models.logmel must be a list of overrides"):
        plan(cfg, [])
    cfg.candidates.use = ["mine"]
    with pytest.raises(ValueError, match=r"names 'mine', which candidates.models does not define"):
        plan(cfg, [])
    cfg.candidates.use = "logmel"
    with pytest.raises(ValueError, match=r"candidates.use must be a list"):
        plan(cfg, [])
    cfg.candidates.use = ["distillmos", "distillmos"]
    with pytest.raises(ValueError, match=r"names a candidate twice"):
        plan(cfg, [])
    cfg.candidates.models = OmegaConf.create({"../x": []})
    cfg.candidates.use = ["../x"]
    with pytest.raises(ValueError, match=r"'\.\./x' is not a name"):
        plan(cfg, [])


def test_the_peer_is_a_listed_candidate_and_a_peer_the_list_leaves_out_judges_nothing():
    assert plan(compose(), []).peer == "calibrated"
    assert plan(compose("candidates.use=[logmel_pitch,distillmos]"), []).peer is None
    assert plan(compose("candidates.peer=null"), []).peer is None
    with pytest.raises(ValueError, match=r"candidates.peer must be the name of a candidate or null, got 5"):
        plan(compose("candidates.peer=5"), [])


def test_the_listed_order_is_kept_and_a_model_can_be_added_from_the_command_line():
    line = ["+candidates.models.mine=['model.pitch=midi']", "candidates.use=[mine,logmel_pitch]"]
    listed = plan(compose(*line), line).candidates
    assert [(c.name, c.overrides) for c in listed] == [
        ("mine", ("model.pitch=midi",)),
        ("logmel_pitch", ("model.pitch=intonation",)),
    ]


def block(n: int, value: float, ci: list[float] | None) -> dict:
    return {"utt": {"n": n, "rmse": value}, "ci": {"utt": {"rmse": ci}}}


def test_validation_score_weighs_the_sets_by_their_clips_and_takes_the_interval_of_their_average():
    results = {
        "p1": block(1, 2.0, [1.0, 3.0]),
        "p2": block(3, 1.0, [0.5, 1.5]),
        "avg": block(4, 9.0, [0.7, 1.9]),
    }
    value, ci = validation_score(results, "rmse", "utt")
    assert value == pytest.approx((2.0 * 1 + 1.0 * 3) / 4)
    assert ci == [0.7, 1.9]
    one = {"p1": block(2, 2.0, [1.0, 3.0]), "avg": block(2, 2.0, None)}
    assert validation_score(one, "rmse", "utt") == (2.0, [1.0, 3.0])


def test_candidates_compare_on_the_runs_rule_or_on_utterance_rmse_where_it_selects_on_a_loss():
    counts = {"v": LabelCounts(40, 9, 20, 9, clips_per_system=4)}
    for metric in ("loss", "train_loss"):
        assert candidates.comparison(choose_rule(counts, metric=metric)) == ("rmse", "utt", "min")
    assert candidates.comparison(choose_rule(counts, metric="srcc", level="sys")) == ("srcc", "sys", "max")
    assert candidates.comparison(choose_rule(counts, metric="lcc", level="utt")) == ("lcc", "utt", "max")


def test_a_candidate_needing_a_missing_package_is_named_with_its_extra(monkeypatch):
    real = plans.importlib.util.find_spec
    missing: set[str] = set()
    monkeypatch.setattr(
        plans.importlib.util, "find_spec", lambda name: None if name in missing else real(name)
    )
    distillmos, pitched, plain = (
        compose("experiment=small_corpus"),
        compose("model.pitch=intonation"),
        compose(),
    )
    assert [plans.needs_missing_package(c) for c in (distillmos, pitched, plain)] == [None, None, None]
    missing.add("distillmos")
    assert "pip install 'sqa[distillmos]'" in plans.needs_missing_package(distillmos)
    assert plans.needs_missing_package(pitched) is None
    missing.add("pyworld")
    assert "needs pyworld (f0.method=dio)" in plans.needs_missing_package(pitched)
    assert plans.needs_missing_package(plain) is None
    # The f0 method's own package: CREPE's network is torchcrepe.
    crepe = compose("model.pitch=midi", "f0.method=crepe")
    assert plans.needs_missing_package(crepe) is None
    missing.add("torchcrepe")
    assert "needs torchcrepe (f0.method=crepe)" in plans.needs_missing_package(crepe)


def predictions(path: Path) -> dict[str, float]:
    with path.open(encoding="utf-8", newline="") as fh:
        return {row["sample_id"]: float(row["pred"]) for row in csv.DictReader(fh)}


def test_an_ensemble_that_wins_is_tested_and_exported_as_the_mean_of_its_members(tmp_path, monkeypatch):
    # Validation decides which wins; here the ensemble is made to, so that its own path runs whole.
    monkeypatch.setattr(candidates, "pick", lambda tried, mode, tolerance: tried[-1])
    # Validation labels 0.5 above training's: the learning check's constant is the training mean.
    run_dir, info = trained(tmp_path, False, "candidates.ensemble=true", valid_shift=0.5)
    assert info["candidates"]["winner"] == "ensemble(learns, constant)"
    assert info["learning_check"]["train_mean"] == pytest.approx(3.0, abs=1e-9)
    assert [m["name"] for m in info["ensemble"]["members"]] == ["learns", "constant"]
    assert info["learning_check"]["verdict"] in ("better", "no_better", "uncertain")
    joined = predictions(run_dir / "predictions.csv")
    parts = [predictions(run_dir / "candidates" / n / "predictions.csv") for n in ("learns", "constant")]
    assert joined.keys() == parts[0].keys()
    for key, value in joined.items():
        assert value == pytest.approx((parts[0][key] + parts[1][key]) / 2, abs=1e-4)
    config = (run_dir / "export" / "config.yaml").read_text(encoding="utf-8")
    assert "sqa.models.ensemble.EnsemblePredictor" in config
    card = (run_dir / "export" / "README.md").read_text(encoding="utf-8")
    assert "## Members" in card and "## Candidates" in card
    scores = sqa.load(run_dir / "export").score([str(run_dir.parent / "corpus" / "te0-0.wav")])
    assert scores[0] == pytest.approx(joined["te0-0"], abs=1e-3)


def test_resume_with_no_candidate_checkpoint_is_a_clear_error_and_trains_nothing(tmp_path):
    manifest = write_corpus(tmp_path / "corpus", False)
    line = overrides(manifest, "resume=true")
    run_dir = tmp_path / "run"
    with pytest.raises(FileNotFoundError, match=r"candidates/<name>/checkpoints/last.ckpt does not exist"):
        run(plans.compose_train(line), run_dir, line)
    assert not (run_dir / "candidates").exists()


def test_a_config_error_in_a_candidate_leaves_no_folder_of_it(tmp_path):
    manifest = write_corpus(tmp_path / "corpus", False)
    line = overrides(manifest, "data.batch_size=abc")
    run_dir = tmp_path / "run"
    with pytest.raises(Exception, match="batch_size must be a positive integer"):
        run(plans.compose_train(line), run_dir, line)
    assert not run_dir.exists()


@pytest.mark.parametrize("lost", ["learns", "constant"])
def test_resume_takes_a_finished_candidate_from_its_end_and_trains_the_one_that_was_lost(tmp_path, lost):
    run_dir, first = trained(tmp_path, False)
    kept = "constant" if lost == "learns" else "learns"
    last = run_dir / "candidates" / kept / "checkpoints" / "last.ckpt"
    step, written = checkpoint_step(last), last.stat().st_mtime_ns
    # Interrupted while `lost` trained: its folder never held a checkpoint.
    shutil.rmtree(run_dir / "candidates" / lost)
    line = overrides(tmp_path / "corpus" / "manifest.csv", "resume=true", "overwrite_export=true")
    run(plans.compose_train(line), run_dir, line)
    again = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    # The finished one trained no further step; the other trained as it first did: the same numbers
    # (but the wall seconds).
    assert without_seconds(again["candidates"]) == without_seconds(first["candidates"])
    # Not trained again from the start either: its checkpoint is the one it finished with.
    assert (checkpoint_step(last), last.stat().st_mtime_ns) == (step, written)


def test_overwrite_keeps_the_new_candidates_run_and_removes_the_old_one(tmp_path):
    run_dir, first = trained(tmp_path, False)
    old_model = (run_dir / "export" / "model.pt").read_bytes()
    line = overrides(tmp_path / "corpus" / "manifest.csv", "overwrite=true", "seed=1")
    run(plans.compose_train(line), run_dir, line)
    again = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    # The run started over is what the folder holds, not the previous run put back over it.
    assert (first["seed"], again["seed"]) == (0, 1)
    config = OmegaConf.load(run_dir / "candidates" / "learns" / "config.yaml")
    assert config.seed == 1
    assert (run_dir / "export" / "model.pt").read_bytes() != old_model
    # The previous run's outputs went once the first candidate started training.
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith((".sqa-previous", ".sqa-discarded"))]


# The constant training mean, for 12 steps, after a learner trained for longer than `learns`.
HOPELESS = (
    "+candidates.models.hopeless=['optim=adam','optim.lr=0.0','head_init=train_mean','trainer.max_steps=12',"
    "'trainer.val_check_interval=4']",
    "+candidates.models.strong=['optim=adam','optim.lr=1e-2','trainer.max_steps=60',"
    "'trainer.val_check_interval=4','early_stopping_patience=null']",
)


def test_a_hopeless_candidate_is_raced_out_at_its_first_round_and_the_record_says_so(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="sqa")
    run_dir, info = trained(tmp_path, False, *HOPELESS, "candidates.use=[strong,hopeless]")
    entries = {e["name"]: e for e in info["candidates"]["entries"]}
    # The learner ran to its end; the constant stopped at its first check, 4 of its 12 steps.
    assert entries["strong"]["stopped_at"] is None and entries["strong"]["why_stopped"] is None
    assert entries["hopeless"]["stopped_at"] == 4
    assert entries["hopeless"]["why_stopped"].startswith("behind strong beyond both intervals")
    own = json.loads((run_dir / "candidates" / "hopeless" / "run_info.json").read_text(encoding="utf-8"))
    assert own["training_end"]["stopped_by"] == "race" and own["training_end"]["step"] == 4
    # One console line says it.
    assert sum("behind strong beyond both intervals" in m for m in caplog.messages) == 1
    assert any(m.startswith("Training stopped at step 4: behind strong") for m in caplog.messages)
    # Stopped, it is still tested and exported in its folder, and compared as before.
    assert (run_dir / "candidates" / "hopeless" / "export" / "model.pt").is_file()
    assert info["candidates"]["winner"] == "strong"


def test_a_late_starter_within_the_intervals_is_not_raced_out_and_wins(tmp_path):
    # The learner starts at the constant's level (the training mean) and overtakes it.
    starter = (
        "+candidates.models.starter=['optim=adam','optim.lr=3e-3','head_init=train_mean',"
        "'trainer.max_steps=24','trainer.val_check_interval=4','early_stopping_patience=null']"
    )
    run_dir, info = trained(tmp_path, False, starter, "candidates.use=[constant,starter]")
    entries = {e["name"]: e for e in info["candidates"]["entries"]}
    assert entries["starter"]["stopped_at"] is None
    assert info["candidates"]["winner"] == "starter"
    history = json.loads((run_dir / "candidates" / "starter" / "run_info.json").read_text(encoding="utf-8"))
    assert history["training_end"]["step"] == 24


@pytest.mark.parametrize("lost", ["strong", "hopeless"])
def test_a_resumed_race_stops_where_the_uninterrupted_one_did(tmp_path, lost):
    run_dir, first = trained(tmp_path, False, *HOPELESS, "candidates.use=[strong,hopeless]")
    # Killed while `lost` trained: its folder never held a checkpoint. The leader the race is run
    # against is scored again from its checkpoint, so the stop falls where it fell.
    shutil.rmtree(run_dir / "candidates" / lost)
    line = overrides(
        tmp_path / "corpus" / "manifest.csv",
        *HOPELESS,
        "candidates.use=[strong,hopeless]",
        "resume=true",
        "overwrite_export=true",
    )
    run(plans.compose_train(line), run_dir, line)
    again = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    assert without_seconds(again["candidates"]) == without_seconds(first["candidates"])
    assert {e["name"]: e["stopped_at"] for e in again["candidates"]["entries"]}["hopeless"] == 4
