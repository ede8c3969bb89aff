"""Cross-validation where validation is too small to choose: folds of whole groups, and what they choose.

The folds themselves are `sqa.training.folds`; fitting and judging candidates on them,
`sqa.training.crossval`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import lightning as L
import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats

from sqa.core.run_lock import RunDirError
from sqa.data import audio
from sqa.data.corpus import Clip, Corpus, LabelCounts
from sqa.models.distillmos import DistillMosBackbone
from sqa.training import crossval
from sqa.training import plan as plans
from sqa.training.checkpoint_io import checkpoint_step
from sqa.training.crossval import Judged, fold_config, frozen_steps
from sqa.training.fitting import fit
from sqa.training.folds import deal, fold_comparison, fold_corpus, grouping, own_fold, too_small
from sqa.training.plan import plan
from sqa.training.prepare import prepare_model
from sqa.training.run import run
from sqa.training.selection import choose_rule
from tests.data.test_audio import settled
from tests.training.test_candidates import compose, overrides, write_corpus
from tests.training.test_selection import tiny_run_overrides


def clip(sample_id: str, system: str = "s", song: str | None = None, mos: float = 3.0, split: str = "train"):
    """A clip of `system` singing `song` rated `mos` (its file is never read here)."""
    return Clip(sample_id, Path(f"{sample_id}.wav"), mos, system, "default", split, song=song)


@pytest.mark.parametrize("seed", range(6))
def test_folds_hold_whole_groups_every_clip_once_and_differ_in_size_by_at_most_the_largest_group(seed):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 9, size=int(rng.integers(3, 14)))
    groups = {f"g{g}-{i}": f"g{g}" for g, n in enumerate(sizes) for i in range(n)}
    k = int(rng.integers(2, min(5, len(sizes)) + 1))
    folds = deal(groups, k, seed)
    assert len(folds) == k and all(folds)
    assert sorted(i for f in folds for i in f) == sorted(groups)
    # No group on both sides of any fold: each group's clips are all in one fold.
    for group in set(groups.values()):
        assert sum(any(groups[i] == group for i in f) for f in folds) == 1
    assert max(map(len, folds)) - min(map(len, folds)) <= max(sizes)
    # The same seed deals the same folds.
    assert deal(groups, k, seed) == folds


@pytest.mark.parametrize("seed", range(6))
def test_the_largest_group_is_dealt_first_so_that_small_ones_even_the_folds_out(seed):
    # One group of 4 clips and four of 1: dealt largest first, 4 against 1 + 1 + 1 + 1, in any order
    # of the shuffle; dealt in the shuffled order, the 4 could land on a fold that already has 2.
    groups = {"big-0": "big", "big-1": "big", "big-2": "big", "big-3": "big"}
    groups |= {f"s{i}": f"small{i}" for i in range(4)}
    assert sorted(len(f) for f in deal(groups, 2, seed)) == [4, 4]


def test_another_seed_deals_other_folds_and_equal_groups_are_dealt_evenly():
    groups = {f"g{g}-{i}": f"g{g}" for g in range(12) for i in range(3)}
    dealt = {tuple(sorted(tuple(sorted(f)) for f in deal(groups, 3, seed))) for seed in range(5)}
    assert len(dealt) > 1
    assert [len(f) for f in deal(groups, 3, 0)] == [12, 12, 12]


def test_clips_are_grouped_by_song_where_every_clip_names_one_and_there_are_enough_songs():
    sung = [clip(f"c{i}", system=f"s{i % 2}", song=f"song{i % 3}") for i in range(6)]
    assert grouping(sung, 3) == ("song", {c.sample_id: c.song for c in sung})
    # One song fewer than the folds: by system, where there are enough systems.
    many_systems = [clip(f"c{i}", system=f"s{i}", song=f"song{i % 2}") for i in range(6)]
    assert grouping(many_systems, 3) == ("system", {c.sample_id: c.system_id for c in many_systems})
    # One clip that names no song: by system.
    unnamed = [*many_systems[:-1], clip("c5", system="s5")]
    assert grouping(unnamed, 2)[0] == "system"
    # Ten singers of one song (a user's solo study): by singer.
    one_song = [clip(f"c{i}", system=f"singer{i}", song="the song") for i in range(10)]
    assert grouping(one_song, 3)[0] == "system"
    # Exactly as many systems as folds, and one fewer.
    assert grouping(many_systems[:3], 3)[0] == "system"
    assert grouping(sung[:2], 3) is None


@pytest.mark.parametrize(
    ("groups", "labels", "small", "minimum"),
    [
        (5, 5, False, 5),
        (4, 5, True, 5),
        (5, 4, True, 5),
        (4, 4, True, 5),
        # The config's thresholds, not 5: at 3 and below.
        (3, 3, False, 3),
        (2, 3, True, 3),
        (3, 2, True, 3),
    ],
)
def test_validation_is_too_small_below_either_threshold_and_not_at_both(groups, labels, small, minimum):
    cfg = OmegaConf.create({"selection": {"min_systems": minimum, "min_distinct_labels": minimum}})
    # Labels with fractions (1.1, 1.3, ...): none may be rounded to a whole number.
    valid = [
        clip(f"v{i}", system=f"s{i % groups}", mos=1.1 + 0.2 * (i % labels), split="valid") for i in range(20)
    ]
    groups_of = {c.sample_id: c.system_id for c in valid}
    why = too_small(valid, groups_of, "system", cfg)
    assert (why is not None) == small
    if groups == 4 and labels == 4:
        assert why == (
            "validation holds 4 systems (selection.min_systems=5) and 4 distinct labels "
            "(selection.min_distinct_labels=5): too few to choose among candidates"
        )


def test_a_candidates_fold_mean_and_interval_are_scipys_t_interval():
    values = (12.0, 9.5, 15.25, 11.0)
    standing = Judged("a", values).standing
    lo, hi = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert standing.value == pytest.approx(np.mean(values))
    assert standing.interval == pytest.approx((lo, hi))
    # An undefined fold is left out of both; one defined fold has no interval; none, no value.
    assert Judged("a", (*values, math.nan)).standing == standing
    assert Judged("a", (3.0, math.nan)).standing.interval is None
    assert math.isnan(Judged("a", (math.nan,)).value)


def test_a_fine_tuning_candidate_is_cross_validated_by_its_frozen_phase_on_the_folds_splits(tmp_path):
    cfg = compose("experiment=small_corpus", "trainer.max_steps=500", "data.valid_split_csv=v.csv")
    freeze = int(cfg.finetune.freeze_backbone_steps)
    assert 0 < freeze < 500 and frozen_steps(cfg) == freeze
    own = fold_config(cfg, tmp_path)
    assert own.trainer.max_steps == freeze and own.data.valid_split_csv is None
    assert own.data.test_split_csv is None and cfg.trainer.max_steps == 500
    # Training that ends when (or before) it would unfreeze, or never freezes: kept as it is.
    assert frozen_steps(compose("experiment=small_corpus", f"trainer.max_steps={freeze}")) is None
    assert frozen_steps(compose()) is None
    assert fold_config(compose(), tmp_path).trainer.max_steps == compose().trainer.max_steps


@pytest.mark.parametrize(("resume", "checkpoint"), [(True, True), (True, False), (False, True)])
def test_a_fold_resumes_only_where_the_run_resumes_and_the_fold_has_its_last_checkpoint(
    tmp_path, resume, checkpoint
):
    if checkpoint:
        (tmp_path / "checkpoints").mkdir()
        (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"")
    assert fold_config(compose(f"resume={str(resume).lower()}"), tmp_path).resume is (resume and checkpoint)


def test_labels_within_a_billionth_are_one_label_and_further_apart_two():
    cfg = OmegaConf.create({"selection": {"min_systems": 5, "min_distinct_labels": 5}})
    groups = {f"v{i}": f"s{i}" for i in range(5)}

    def judged(last: float) -> str | None:
        marks = [1.1, 1.3, 1.5, 1.7, last]
        return too_small(
            [clip(f"v{i}", f"s{i}", mos=m, split="valid") for i, m in enumerate(marks)], groups, "system", cfg
        )

    assert judged(1.7 + 3e-10) is not None
    assert judged(1.7 + 3e-9) is None


def test_a_fold_splits_training_and_validation_clips_anew_and_keeps_the_test_clips():
    corpus = Corpus(
        [clip("a"), clip("b", split="valid"), clip("c"), clip("t", split="test")],
        ["default", "other"],
        (0.0, 100.0),
        frozenset({"s"}),
    )
    split = fold_corpus(corpus, frozenset({"a"}))
    assert (split.domains, split.score_range, split.systems) == (["default", "other"], (0.0, 100.0), {"s"})
    assert [(c.sample_id, c.split) for c in split.clips] == [
        ("a", "valid"),
        ("b", "train"),
        ("c", "train"),
        ("t", "test"),
    ]


def test_folds_are_a_number_of_folds_from_the_candidates_config():
    assert plan(compose(), []).folds == 3
    assert plan(compose("candidates.folds=0"), []).folds == 0
    for bad in ("-1", "true", "'3'"):
        with pytest.raises(ValueError, match=r"candidates.folds must be a number of folds \(0: none\)"):
            plan(compose(f"candidates.folds={bad}"), [])


# Ten training systems (labels 1.2 to 4.8), two validation systems and three test systems, as
# test_candidates.SYSTEMS: folds 1 and 2 hold five training systems each.
TEN_TRAINING_SYSTEMS = [
    *((f"tr{i}", "train", 1.2 + 0.4 * i, 4) for i in range(10)),
    ("va0", "valid", 2.0, 4),
    ("va1", "valid", 4.0, 4),
    *((f"te{i}", "test", q, 3) for i, q in enumerate((1.8, 3.0, 4.2))),
]


# The learner given the steps to learn from the fewer clips of a fold.
LONGER = (
    "candidates.models.learns=['optim=adam','optim.lr=3e-3','trainer.max_steps=80',"
    "'trainer.val_check_interval=8','early_stopping_patience=null']"
)


def cross_validated(tmp_path: Path, manifest: Path, *more: str) -> tuple[Path, dict]:
    """The constant and the learner run on `manifest` with 3 folds; the run directory and run_info.json."""
    line = overrides(manifest, *more, folds=3)
    run_dir = tmp_path / "run"
    run(plans.compose_train(line), run_dir, line)
    return run_dir, json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))


def test_where_two_flat_rated_validation_systems_favour_the_constant_the_folds_choose_the_learner(
    tmp_path, caplog, monkeypatch
):
    caplog.set_level("INFO", logger="sqa")
    # Validation rated flat at the training mean: on it alone the constant wins (test_candidates.py,
    # test_the_constant_candidate_wins_where_validation_is_rated_flat_at_the_training_mean).
    manifest = write_corpus(tmp_path / "corpus", flat_valid=True, systems=TEN_TRAINING_SYSTEMS)
    for wav in manifest.parent.glob("*.wav"):
        settled(wav)
    # Every decode of a file, whoever imported load_audio, ends in this module's downmix_resample.
    decodes: Counter[str] = Counter()
    downmix = audio.downmix_resample

    def counted(data, rate, target, name):
        decodes.update([name])
        return downmix(data, rate, target, name)

    monkeypatch.setattr(audio, "downmix_resample", counted)
    run_dir, info = cross_validated(tmp_path, manifest, "candidates.ensemble=false", LONGER)
    # The corpus check, both candidates' splits, their folds and the test passes: one decode a clip.
    assert len(decodes) == len(manifest.read_text().splitlines()) - 1
    assert set(decodes.values()) == {1}
    cv = info["candidates"]["cross_validation"]
    assert cv["winner"] == info["candidates"]["winner"] == "learns"
    assert cv["grouped_by"] == "system" and cv["folds"] == 3
    # Every training and validation system is held out exactly once.
    assert cv["groups"][0] == ["va0", "va1"]
    held = [g for fold in cv["groups"] for g in fold]
    assert sorted(held) == sorted({*(f"tr{i}" for i in range(10)), "va0", "va1"})
    entries = {e["name"]: e for e in cv["entries"]}
    assert entries["learns"]["value"] < entries["constant"]["value"]
    for entry in entries.values():
        assert len(entry["folds"]) == 3
        assert entry["value"] == pytest.approx(np.mean(entry["folds"]))
        # The seconds of folds 1 and 2 (fold 0 is the candidate's own training, in its entry).
        assert entry["seconds"] > 0
    assert info["candidates"]["compared_on"] == (
        "3-fold cross-validation grouped by system: utt rmse (min), the mean over folds"
    )
    # Fold 0 is each candidate's own training on the run's splits; folds 1 and 2 have folders of
    # their own, and every fold's values are recorded.
    assert [e["name"] for e in info["candidates"]["entries"]] == ["constant", "learns"]
    for name in ("constant", "learns"):
        folder = run_dir / "candidates" / name
        assert sorted(p.name for p in (folder / "folds").iterdir()) == ["1", "2"]
        assert (folder / "export" / "config.yaml").is_file()
        assert (folder / "folds" / "1" / "checkpoints" / "last.ckpt").is_file()
    recorded = json.loads((run_dir / "candidates" / "folds.json").read_text(encoding="utf-8"))
    assert [[recorded[str(k)][name] for k in range(3)] for name in ("constant", "learns")] == [
        entries["constant"]["folds"],
        entries["learns"]["folds"],
    ]
    # Fold 0's value is the candidate's own validation score: the same clips, the same weights.
    own = {e["name"]: e["valid"]["value"] for e in info["candidates"]["entries"]}
    assert recorded["0"] == pytest.approx(own)
    said = [r.getMessage() for r in caplog.records]
    assert any(
        m.startswith("candidates: validation holds 2 systems (selection.min_systems=5)") and "3-fold" in m
        for m in said
    )
    assert any(
        m.startswith("candidates: learns won on 3-fold cross-validation grouped by system") for m in said
    )
    # Every fold value is a held-out error of a fold fit: the constant's is its RMSE around the
    # training folds' mean, which the learner beats where labels follow the clips' noise.
    card = (run_dir / "export" / "README.md").read_text(encoding="utf-8")
    assert f"Chosen by {cv['compared_on']}, because {cv['why']}; held out in turn: `va0`, `va1`; " in card
    learns = entries["learns"]
    row = (
        f"| `learns` | {', '.join(f'{v:.4g}' for v in learns['folds'])} | {learns['value']:.4g} |"
        f" [{learns['ci'][0]:.4g}, {learns['ci'][1]:.4g}] | {learns['seconds']:.4g} |"
    )
    assert row in card.splitlines()


@pytest.mark.parametrize(("moved", "folded"), [(("tr1", "tr3", "tr5"), False), (("tr1", "tr3"), True)])
def test_validation_of_five_systems_chooses_and_of_four_the_folds_do(tmp_path, moved, folded):
    # Three (two) training systems moved to validation: 5 (4) systems with as many distinct labels.
    manifest = write_corpus(tmp_path / "corpus", flat_valid=False)
    text = manifest.read_text().splitlines()
    rows = [text[0], *(r.replace(",train", ",valid") if r.split(",")[2] in moved else r for r in text[1:])]
    manifest.write_text("\n".join(rows) + "\n")
    _, info = cross_validated(tmp_path, manifest, "candidates.peer=null")
    cv = info["candidates"]["cross_validation"]
    assert (cv is not None) == folded
    if folded:
        # Each system is rated one label: 4 systems, 4 labels (each threshold alone: above).
        assert cv["why"].startswith("validation holds 4 systems (selection.min_systems=5) and 4 distinct")
        assert info["candidates"]["compared_on"].startswith("3-fold cross-validation grouped by system")
    else:
        assert info["candidates"]["compared_on"] == "validation sys srcc (max)"
        assert [e["name"] for e in info["candidates"]["entries"]][:2] == ["constant", "learns"]


def test_where_validation_favours_the_learner_and_the_other_folds_the_constant_the_constant_is_chosen(
    tmp_path, monkeypatch, caplog
):
    # The mirror of the flat-validation case: fold 0 (the run's own validation) favours the learner,
    # folds 1 and 2 the constant by more. The folds are fitted as in any run; their values are set.
    caplog.set_level("INFO", logger="sqa")
    given = {
        0: {"constant": 1.0, "learns": 0.2},
        1: {"constant": 0.5, "learns": 1.5},
        2: {"constant": 0.6, "learns": 1.4},
    }
    folds = iter(sorted(given))
    monkeypatch.setattr(crossval, "_fold_values", lambda *a: dict(given[next(folds)]))
    manifest = write_corpus(tmp_path / "corpus", flat_valid=False, systems=TEN_TRAINING_SYSTEMS)
    run_dir, info = cross_validated(tmp_path, manifest, "candidates.ensemble=false")
    cv = info["candidates"]["cross_validation"]
    assert cv["winner"] == info["candidates"]["winner"] == "constant"
    assert [e["folds"] for e in cv["entries"]] == [[1.0, 0.5, 0.6], [0.2, 1.5, 1.4]]
    # Validation alone would have taken the learner.
    own = {e["name"]: e["valid"]["value"] for e in info["candidates"]["entries"]}
    assert own["learns"] < own["constant"]
    assert json.loads((run_dir / "metrics.json").read_text()) == json.loads(
        (run_dir / "candidates" / "constant" / "metrics.json").read_text()
    )
    assert any(m.getMessage().startswith("candidates: constant won on 3-fold") for m in caplog.records)


# The learner as a candidate that "fine-tunes" after 8 frozen steps, to 16.
FINE_TUNED = (
    "candidates.models.learns=['optim=adam','optim.lr=3e-3','trainer.max_steps=16',"
    "'trainer.val_check_interval=4','early_stopping_patience=null','finetune.freeze_backbone_steps=8']"
)


def test_a_fine_tuning_winner_goes_on_from_its_frozen_phase_and_ends_as_a_straight_training(
    tmp_path, monkeypatch
):
    # The folds are fitted as in any run; their values are set so that the learner wins.
    monkeypatch.setattr(crossval, "_fold_values", lambda *a: {"constant": 1.0, "learns": 0.5})
    manifest = write_corpus(tmp_path / "corpus", flat_valid=False, systems=TEN_TRAINING_SYSTEMS)
    run_dir, info = cross_validated(tmp_path / "cv", manifest, "candidates.ensemble=false", FINE_TUNED)
    cv = info["candidates"]["cross_validation"]
    assert cv["winner"] == "learns" and cv["frozen_phase_only"] == ["learns"]
    learns = run_dir / "candidates" / "learns"
    own = json.loads((learns / "run_info.json").read_text(encoding="utf-8"))
    assert own["training_end"]["step"] == 16
    # Every fold after 0 trained the frozen phase alone.
    for k in (1, 2):
        assert checkpoint_step(learns / "folds" / str(k) / "checkpoints" / "last.ckpt") == 8
    # The same candidate trained straight through, choosing on validation: the same numbers.
    straight, _ = cross_validated(
        tmp_path / "straight", manifest, "candidates.ensemble=false", "candidates.folds=0", FINE_TUNED
    )
    assert json.loads((learns / "metrics.json").read_text()) == json.loads(
        (straight / "candidates" / "learns" / "metrics.json").read_text()
    )


# A small random-init Distill-MOS network fine-tuned after 8 frozen steps: its CNN stays fixed.
DISTILLMOS_FINE_TUNED = (
    "candidates.models.learns=['model/backbone=distillmos','model.backbone.pretrained=false',"
    "'model.backbone.channels=8','model.backbone.conv_layers=2','model.backbone.dim=16',"
    "'model.backbone.heads=2','model.backbone.layers=1','data.max_train_seconds=null','optim=adam',"
    "'optim.lr=3e-3','trainer.max_steps=16','trainer.val_check_interval=4','early_stopping_patience=null',"
    "'finetune.freeze_backbone_steps=8']"
)


@pytest.mark.parametrize("wins", [True, False])
def test_a_fine_tuning_winner_reads_the_fronts_its_frozen_phase_computed(tmp_path, monkeypatch, wins):
    values = {"constant": 1.0, "learns": 0.5} if wins else {"constant": 0.5, "learns": 1.0}
    monkeypatch.setattr(crossval, "_fold_values", lambda *a: dict(values))
    # The segments through the fixed front (the CNN), in the fine-tuning fit and in all.
    fronts = {"fine-tuning": 0, "all": 0}
    front, fitted = DistillMosBackbone._front, crossval.fit
    tuning, backbones = [False], []

    def counted_front(backbone, part):
        fronts["all"] += part.shape[0]
        fronts["fine-tuning"] += part.shape[0] if tuning[0] else 0
        return front(backbone, part)

    def counted_fit(model, *args):
        tuning[0] = bool(model.cfg.resume) and model.name == "learns"
        backbones.append(model.module.predictor.backbone)
        try:
            return fitted(model, *args)
        finally:
            tuning[0] = False

    monkeypatch.setattr(DistillMosBackbone, "_front", counted_front)
    monkeypatch.setattr(crossval, "fit", counted_fit)
    manifest = write_corpus(tmp_path / "corpus", flat_valid=False, systems=TEN_TRAINING_SYSTEMS)
    run_dir, info = cross_validated(tmp_path, manifest, "candidates.ensemble=false", DISTILLMOS_FINE_TUNED)
    own = json.loads((run_dir / "candidates" / "learns" / "run_info.json").read_text(encoding="utf-8"))
    assert info["candidates"]["winner"] == ("learns" if wins else "constant")
    assert own["training_end"]["step"] == (16 if wins else 8)
    # Its 8 fine-tuning steps and their validations read the fronts of the frozen phase's pass.
    assert fronts["all"] > 0 and fronts["fine-tuning"] == 0
    # Once fitted, won or lost, no backbone holds fronts: testing passes each clip once.
    assert all(getattr(b, "_fronts", None) is None for b in backbones)


def test_a_fine_tuning_candidate_that_loses_keeps_its_frozen_phase_and_says_why(tmp_path, monkeypatch):
    given = iter([{"constant": 0.1, "learns": 1.0}] * 3)
    monkeypatch.setattr(crossval, "_fold_values", lambda *a: dict(next(given)))
    manifest = write_corpus(tmp_path / "corpus", flat_valid=False, systems=TEN_TRAINING_SYSTEMS)
    _, info = cross_validated(tmp_path, manifest, "candidates.ensemble=false", FINE_TUNED)
    entries = {e["name"]: e for e in info["candidates"]["entries"]}
    assert info["candidates"]["winner"] == "constant"
    assert entries["learns"]["stopped_at"] == 8
    assert entries["learns"]["why_stopped"] == (
        "cross-validation chose constant: judged by its frozen phase, not fine-tuned"
    )


def test_a_resumed_run_takes_the_recorded_folds_and_refuses_a_record_that_is_not_one(tmp_path):
    manifest = write_corpus(tmp_path / "corpus", flat_valid=True, systems=TEN_TRAINING_SYSTEMS)
    run_dir, first = cross_validated(tmp_path, manifest, "candidates.ensemble=false", LONGER)
    assert first["candidates"]["winner"] == "learns"
    record = run_dir / "candidates" / "folds.json"
    # A fold's values as recorded decide the resumed run: here, set to favour the constant.
    recorded = json.loads(record.read_text(encoding="utf-8"))
    recorded["2"] = {"constant": 0.0, "learns": 9.0}
    record.write_text(json.dumps(recorded), encoding="utf-8")
    line = ["candidates.ensemble=false", LONGER, "resume=true", "overwrite_export=true"]
    _, resumed = cross_validated(tmp_path, manifest, *line)
    entries = {e["name"]: e for e in resumed["candidates"]["cross_validation"]["entries"]}
    assert entries["learns"]["folds"][2] == 9.0
    assert (
        resumed["candidates"]["winner"] != first["candidates"]["winner"]
        or first["candidates"]["winner"] == "constant"
    )
    # A value that is not a number, or a JSON true (a bool is an int to Python), is refused.
    for bad in ('{"0": {"constant": "x"}}', '{"0": {"constant": true}}'):
        record.write_text(bad, encoding="utf-8")
        with pytest.raises(RunDirError, match=r"folds.json: not a record of folds this run can resume from"):
            cross_validated(tmp_path, manifest, *line)
        assert record.read_text(encoding="utf-8") == bad


def counts(systems: int, labels: int, per_system: float) -> LabelCounts:
    """Label counts of a fold's held-out clips."""
    return LabelCounts(
        clips=labels, systems=systems, labels=labels, system_labels=systems, clips_per_system=per_system
    )


def test_the_folds_compare_on_the_requested_ranking_where_every_fold_can_rank_else_as_the_run_does():
    cfg = compose()
    rule = choose_rule({"a": counts(2, 2, 1)})
    assert rule.metric == "rmse"
    ranks_by_system, ranks_by_clip, cannot = counts(5, 15, 3), counts(4, 5, 3), counts(4, 4, 3)
    assert fold_comparison(cfg, rule, [ranks_by_system, ranks_by_system]) == ("srcc", "sys", "max")
    # One fold of 4 systems: every fold can rank clips, not systems.
    assert fold_comparison(cfg, rule, [ranks_by_system, ranks_by_clip]) == ("srcc", "utt", "max")
    # One fold of 2.9 clips a system (below selection.min_clips_per_system=3): clips.
    assert fold_comparison(cfg, rule, [ranks_by_system, counts(5, 15, 2.9)]) == ("srcc", "utt", "max")
    # One fold of 4 systems and 4 distinct labels: neither; the run's own comparison (utterance RMSE).
    assert fold_comparison(cfg, rule, [ranks_by_system, cannot]) == ("rmse", "utt", "min")
    # The config's own level and thresholds: clips asked for; 2 clips a system can rank at 2.
    assert fold_comparison(compose("selection.level=utt"), rule, [ranks_by_system]) == ("srcc", "utt", "max")
    fewer = compose("selection.min_clips_per_system=2", "selection.min_systems=4", "selection.metric=lcc")
    assert fold_comparison(fewer, rule, [counts(4, 15, 2)]) == ("lcc", "sys", "max")
    assert fold_comparison(cfg, rule, [counts(4, 15, 2)]) == ("srcc", "utt", "max")
    clips = compose("selection.level=utt")
    assert fold_comparison(clips, rule, [counts(5, 5, 3)]) == ("srcc", "utt", "max")
    six = compose("selection.level=utt", "selection.min_distinct_labels=6")
    assert fold_comparison(six, rule, [counts(5, 5, 3)]) == (
        "rmse",
        "utt",
        "min",
    )
    # A requested error is used as requested, whatever the folds could rank.
    asked = compose("selection.metric=mse", "selection.level=utt")
    assert fold_comparison(asked, choose_rule({"a": counts(5, 15, 3)}, "mse", "utt"), [ranks_by_system]) == (
        "mse",
        "utt",
        "min",
    )


def test_the_runs_validation_is_fold_0_only_where_none_of_its_groups_also_trains():
    corpus = Corpus(
        [clip("a", split="valid"), clip("b"), clip("c", split="valid"), clip("t", split="test")], ["default"]
    )
    assert own_fold(corpus, {"a": "g1", "b": "g2", "c": "g1"}) == frozenset({"a", "c"})
    # Validation carved by clip: a validation group also has training clips.
    assert own_fold(corpus, {"a": "g1", "b": "g1", "c": "g3"}) is None


def test_the_mean_of_the_two_best_is_judged_on_the_same_folds(tmp_path, monkeypatch):
    # Three candidates: the two best (learns, then constant) are not the two worst (constant, other).
    pairs = {"constant + learns": 0.4, "constant + other": 0.1, "learns + other": 0.3}
    given = iter(
        [
            {"constant": 1.0, "learns": 0.5, "other": 2.0, **pairs},
            {"constant": 1.0, "learns": 0.6, "other": 2.0, **pairs, "constant + learns": 0.3},
            {"constant": 1.0, "learns": 0.7, "other": 2.0, **pairs, "constant + learns": 0.2},
        ]
    )
    monkeypatch.setattr(crossval, "_fold_values", lambda *a: dict(next(given)))
    manifest = write_corpus(tmp_path / "corpus", flat_valid=False, systems=TEN_TRAINING_SYSTEMS)
    other = "+candidates.models.other=['optim=adam','optim.lr=0.0','trainer.max_steps=4']"
    line = ("candidates.ensemble=true", other, "candidates.use=[constant,learns,other]")
    run_dir, info = cross_validated(tmp_path, manifest, *line)
    cv = info["candidates"]["cross_validation"]
    # Named best first, as the run's own ensemble; its folds are the pair's.
    names = ["constant", "learns", "other", "ensemble(learns, constant)"]
    assert [e["name"] for e in cv["entries"]] == names
    assert cv["entries"][3]["folds"] == [0.4, 0.3, 0.2] and "seconds" not in cv["entries"][3]
    assert cv["winner"] == info["candidates"]["winner"] == "ensemble(learns, constant)"
    assert info["ensemble"]["method"] == "mean"
    assert [m["name"] for m in info["ensemble"]["members"]] == ["learns", "constant"]


class Modes(L.Callback):
    """Records whether every module of the LightningModule is in train mode as training starts.

    Passed where a stop rule goes (it never stops training).
    """

    stopped = None

    def __init__(self) -> None:
        self.training: list[bool] = []

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.training = [m.training for m in pl_module.modules()]


def test_a_module_fitted_again_starts_in_train_mode_as_a_module_just_built(tmp_path):
    # A frozen phase's fit leaves its module in eval mode (its checks); Lightning keeps the modes it
    # finds, so the fine-tuning fit of that module would train without dropout.
    manifest = write_corpus(tmp_path / "corpus", flat_valid=False)
    cfg = plans.compose_train([*tiny_run_overrides(manifest), "trainer.max_steps=2"])
    prepared = prepare_model(cfg, tmp_path / "run")
    prepared.module.eval()
    modes = Modes()
    fit(prepared, modes)
    assert modes.training and all(modes.training)
