"""Checkpoint selection: the rule, its fallback on validation data that cannot rank, the report."""

from __future__ import annotations

import csv
import itertools
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from hydra import compose, initialize_config_dir

from sqa.data.corpus import Clip, LabelCounts, count_labels
from sqa.training.run import run
from sqa.training.selection import choose_rule, selection_score, uninformative
from tests.conftest import REPO

SR = 16000
# (system, split, per-system label, clips): every clip of a system carries its system's score, and
# validation has two systems, the case where every ranking metric is constant over checks.
SYSTEMS = [
    *((f"tr{i}", "train", q, 4) for i, q in enumerate((1.5, 2.1, 2.7, 3.3, 3.9, 4.5))),
    ("va0", "valid", 2.0, 4),
    ("va1", "valid", 4.0, 4),
    *((f"te{i}", "test", q, 3) for i, q in enumerate((1.8, 3.0, 4.2))),
]


def write_per_system_corpus(root: Path) -> Path:
    """Sung-like tones whose noise level falls with the system's label; a CSV manifest over them."""
    rng = np.random.default_rng(0)
    root.mkdir(parents=True, exist_ok=True)
    rows = ["wav_path,score,system_id,sample_id,split"]
    for system, split, label, clips in SYSTEMS:
        for k in range(clips):
            seconds = 0.4 + 0.1 * k
            t = np.arange(int(SR * seconds)) / SR
            tone = 0.3 * np.sin(2 * np.pi * rng.uniform(180, 400) * t)
            noise = rng.normal(0, 0.3 * (5.0 - label) / 3.5, t.size)
            sf.write(root / f"{system}-{k}.wav", (tone + noise).astype(np.float32), SR)
            rows.append(f"{system}-{k}.wav,{label},{system},{system}-{k},{split}")
    (root / "manifest.csv").write_text("\n".join(rows) + "\n")
    return root / "manifest.csv"


def compose_train(overrides: list[str]):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


def tiny_run_overrides(manifest: Path) -> list[str]:
    """A log-mel model, a few Adam steps, validation every 4 steps, few bootstrap resamples."""
    return [
        "data=csv",
        f"data.corpus.path={manifest}",
        "data.num_workers=0",
        "data.batch_size=8",
        "optim=adam",
        "optim.lr=3e-3",
        "trainer.max_steps=24",
        "trainer.val_check_interval=4",
        "trainer.enable_progress_bar=false",
        "early_stopping_patience=null",
        "bootstrap=20",
    ]


@pytest.fixture(scope="module")
def manifest(tmp_path_factory) -> Path:
    return write_per_system_corpus(tmp_path_factory.mktemp("per_system"))


def counts(
    clips: int, systems: int, labels: int, system_labels: int, clips_per_system: float | None = None
) -> LabelCounts:
    """Label counts; the median clips per system defaults to the mean, clips / systems."""
    per_system = clips / systems if clips_per_system is None else clips_per_system
    return LabelCounts(clips, systems, labels, system_labels, per_system)


def test_rule_uses_ranking_metric_only_where_the_sets_can_rank():
    big, small = counts(60, 12, 30, 12), counts(8, 2, 2, 2)
    rule = choose_rule({"p1": big, "p2": big})
    assert (rule.metric, rule.level, rule.mode, rule.sets, rule.warning) == (
        "srcc",
        "sys",
        "max",
        ("p1", "p2"),
        None,
    )
    # One set too small: left out, with a warning naming it and its counts.
    rule = choose_rule({"p1": big, "p2": small})
    assert rule.sets == ("p1",) and rule.metric == "srcc"
    assert "'valid/p2': 8 clips, 2 systems, 2 distinct labels" in rule.warning
    # None can rank: the fallback error measure at utterance level over every set, minimised.
    rule = choose_rule({"p2": small}, fallback="mse")
    assert (rule.metric, rule.level, rule.mode, rule.fallback_used) == ("mse", "utt", "min", True)
    assert "selecting on utterance-level mse" in rule.warning
    forced = choose_rule({"p2": small}, fallback=None)
    assert (forced.metric, forced.level) == ("srcc", "sys") and "uninformative" in forced.warning
    # Every set that cannot rank is named, with what a set needs at that level.
    two = choose_rule({"p1": big, "p2": small, "p3": small})
    assert "validation set(s) 'valid/p2': 8 clips" in two.warning
    assert "clips per system; 'valid/p3': 8 clips" in two.warning
    assert (
        "(needs at least 5 systems with distinct mean labels and a median of at least 3 clips" in two.warning
    )
    utt = choose_rule({"p2": small}, level="utt", fallback="loss")
    assert "(needs at least 5 distinct labels)" in utt.warning
    assert utt.warning.endswith("; selecting on validation loss over all validation clips instead")
    assert (utt.metric, utt.level, utt.label) == ("loss", None, "validation loss")
    assert choose_rule({"p1": big, "p2": small}, fallback=None).sets == ("p1", "p2")
    # Utterance level counts distinct clip labels, not systems.
    assert choose_rule({"p2": counts(8, 2, 6, 2)}, level="utt").metric == "srcc"
    assert choose_rule({"p2": counts(8, 2, 6, 2)}, level="utt", min_distinct_labels=7).metric == "rmse"
    assert choose_rule({"p2": small}, metric="loss").mode == "min"
    assert choose_rule({"p2": small}, metric="train_loss").describe().startswith("training loss")
    with pytest.raises(ValueError, match="selection.metric must be one of"):
        choose_rule({"p1": big}, metric="accuracy")


def test_rule_scores_weight_sets_by_their_counts():
    blocks = {
        "a": {"sys": {"srcc": 0.5, "rmse": 0.4, "n": 2}, "utt": {"rmse": 0.2, "mse": 0.04, "n": 10}},
        "b": {"sys": {"srcc": 1.0, "rmse": 0.1, "n": 6}, "utt": {"rmse": 0.6, "mse": 0.36, "n": 30}},
    }
    big = counts(60, 12, 30, 12)
    assert choose_rule({"a": big, "b": big}).score(blocks) == pytest.approx((0.5 * 2 + 6.0) / 8)
    assert choose_rule({"a": big, "b": counts(8, 2, 2, 2)}).score(blocks) == pytest.approx(0.5)
    fallback = choose_rule({"a": counts(8, 2, 2, 2)} | {"b": counts(8, 2, 2, 2)})
    assert fallback.score(blocks) == pytest.approx((0.2 * 10 + 0.6 * 30) / 40)
    assert choose_rule({"a": big}, metric="loss").score(blocks, val_loss=0.7, train_loss=0.1) == 0.7
    assert choose_rule({"a": big}, metric="train_loss").score(blocks, val_loss=0.7, train_loss=0.1) == 0.1
    # An undefined correlation counts as chance (0), an undefined error makes the score NaN.
    blocks["b"]["sys"]["srcc"] = None
    assert selection_score(blocks) == pytest.approx(0.5 * 2 / 8)
    blocks["b"]["utt"]["mse"] = math.nan
    assert math.isnan(selection_score(blocks, "mse", "utt"))
    # No points: no score; a single point is a score.
    assert math.isnan(selection_score({})) and math.isnan(
        selection_score({"a": {"sys": {"srcc": 0.3, "n": 0}}})
    )
    assert selection_score({"a": {"sys": {"srcc": 0.3, "n": 1}}}) == 0.3


def test_uninformative_means_two_or_more_checks_that_never_changed():
    assert uninformative([1.0, 1.0, 1.0])
    assert uninformative([math.nan, math.nan])
    assert not uninformative([1.0])
    assert not uninformative([1.0, 1.0, 0.5])
    assert not uninformative([0.3, math.nan])


def test_ties_are_told_apart_by_the_utterance_rmse_over_the_rules_sets_weighted_by_clips():
    blocks = {
        "a": {"sys": {"srcc": 0.5, "n": 2}, "utt": {"rmse": 0.2, "n": 10}},
        "b": {"sys": {"srcc": 1.0, "n": 6}, "utt": {"rmse": 0.6, "n": 30}},
        "c": {"sys": {"srcc": 0.0, "n": 2}, "utt": {"rmse": 5.0, "n": 8}},
    }
    big, small = counts(60, 12, 30, 12), counts(8, 2, 2, 2)
    ranking = choose_rule({"a": big, "b": big, "c": small})
    assert ranking.sets == ("a", "b")
    # Weighted by clips (10 and 30), not by systems (2 and 6, the same ratio) nor equally.
    assert ranking.tiebreak(blocks) == pytest.approx((0.2 * 10 + 0.6 * 30) / 40)
    blocks["a"]["sys"]["n"] = 30
    assert ranking.tiebreak(blocks) == pytest.approx((0.2 * 10 + 0.6 * 30) / 40)
    # A fallback rule covers every set: c's large error counts.
    assert choose_rule({"a": small, "c": small}).tiebreak(blocks) == pytest.approx((0.2 * 10 + 5.0 * 8) / 18)


def test_run_info_records_the_rule_its_request_and_every_sets_counts():
    big, small = counts(60, 12, 30, 12), counts(8, 2, 2, 2)
    rule = choose_rule({"a": big, "b": small}, tie_tolerance=0.001)
    record = rule.record()
    assert record == {
        # Sets are named as everywhere a run lists them: valid/<domain>.
        "rule": "system-level srcc over valid/a (max)",
        "metric": "srcc",
        "level": "sys",
        "mode": "max",
        "sets": ["valid/a"],
        "requested": "sys srcc",
        "fallback_used": False,
        "warning": rule.warning,
        "tie_rule": (
            "scores within 0.001 tie; the lower utterance-level rmse wins, the earlier check on a full tie"
        ),
        "valid_sets": {
            "valid/a": {
                "clips": 60,
                "systems": 12,
                "labels": 30,
                "system_labels": 12,
                "clips_per_system": 5.0,
                "listeners": 0,
            },
            "valid/b": {
                "clips": 8,
                "systems": 2,
                "labels": 2,
                "system_labels": 2,
                "clips_per_system": 4.0,
                "listeners": 0,
            },
        },
    }
    assert rule.warning.startswith("system-level srcc cannot rank checkpoints on validation set(s) 'valid/b'")
    assert json.loads(json.dumps(record)) == record
    fallback = choose_rule({"b": small}, metric="ktau", level="utt", min_distinct_labels=3).record()
    assert {k: fallback[k] for k in ("metric", "level", "mode", "sets", "requested", "fallback_used")} == {
        "metric": "rmse",
        "level": "utt",
        "mode": "min",
        "sets": ["valid/b"],
        "requested": "utt ktau",
        "fallback_used": True,
    }
    assert fallback["tie_rule"].startswith("scores within 1e-06 tie;")
    assert choose_rule({"b": small}, metric="train_loss").record()["requested"] == "train_loss"


def read_run_info(run_dir: Path) -> dict:
    return json.loads((run_dir / "run_info.json").read_text())


def selection_history(run_dir: Path) -> list[tuple[int, float]]:
    """(step, val/selection) of every validation check, checked against the CSV logger's values."""
    scores = [(int(step), value) for step, value in read_run_info(run_dir)["selection"]["scores"]]
    (path,) = (run_dir / "logs").rglob("metrics.csv")
    with path.open() as fh:
        logged = [float(r["val/selection"]) for r in csv.DictReader(fh) if r.get("val/selection")]
    assert [value for _, value in scores] == pytest.approx(logged)
    return scores


def test_two_validation_systems_fall_back_to_an_error_measure(tiny_run):
    # The session's tiny run is this module's run of tiny_run_overrides; train.log holds its
    # warnings, Lightning's and Python's too.
    _, run_dir = tiny_run
    log = (run_dir / "train.log").read_text().splitlines()
    starts = [i for i, line in enumerate(log) if "cannot rank" in line]
    assert len(starts) == 1 and "[WARNING]" in log[starts[0]]
    # The warning's lines: its first, then its indented continuations, none over 100 characters.
    block = [log[starts[0]].split(" - selection: ", 1)[1]]
    block += list(itertools.takewhile(lambda line: line.startswith("  "), log[starts[0] + 1 :]))
    assert len(block) > 1 and max(len(line) for line in block) <= 100
    warning = " ".join(line.strip() for line in block)
    assert "'valid/default': 8 clips, 2 systems, 2 distinct labels" in warning
    assert "selecting on utterance-level rmse" in warning
    selection = read_run_info(run_dir)["selection"]
    assert (selection["metric"], selection["level"], selection["mode"]) == ("rmse", "utt", "min")
    assert selection["fallback_used"] and not selection["uninformative"]
    history = selection_history(run_dir)
    assert len(history) == selection["checks"] == 6
    # The chosen checkpoint is the lowest utterance RMSE, and not the first check.
    best_step, _ = min(history, key=lambda h: h[1])
    assert selection["best_checkpoint"] == f"best-step={best_step}.ckpt"
    assert best_step != history[0][0]
    # Small-corpus ergonomics: the logging interval fitted the 3-batch epochs, no warning about it.
    assert not any("logging interval" in line for line in log)
    assert read_run_info(run_dir)["splits"]["valid/default"]["systems"] == 2


def test_forcing_the_ranking_metric_reports_an_uninformative_selection(manifest, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        run(compose_train([*tiny_run_overrides(manifest), "selection.fallback=null"]), tmp_path)
    selection = read_run_info(tmp_path)["selection"]
    assert (selection["metric"], selection["level"], selection["fallback_used"]) == ("srcc", "sys", False)
    history = selection_history(tmp_path)
    assert len({v for _, v in history}) == 1
    # Every score ties, so the tie rule chose the check with the lowest utterance RMSE (as logged).
    (path,) = (tmp_path / "logs").rglob("metrics.csv")
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("val/selection")]
    rmse = [float(r["val/default/utt_rmse"]) for r in rows]
    assert [float(r["val/selection_tiebreak"]) for r in rows] == pytest.approx(rmse)
    best_step = history[rmse.index(min(rmse))][0]
    assert best_step != history[0][0]
    assert selection["uninformative"] and selection["best_checkpoint"] == f"best-step={best_step}.ckpt"
    assert selection["tie_rule"].startswith("scores within 1e-06 tie; the lower utterance-level rmse wins")
    assert any(
        "selection was uninformative" in r.getMessage() and "the tie rule chose" in r.getMessage()
        for r in caplog.records
    )


@pytest.mark.parametrize("metric", ["loss", "train_loss"])
def test_selecting_on_a_loss_minimises_it(manifest, tmp_path, metric):
    overrides = ["trainer.max_steps=12", "trainer.log_every_n_steps=1", f"selection.metric={metric}"]
    run(compose_train([*tiny_run_overrides(manifest), *overrides]), tmp_path)
    selection = read_run_info(tmp_path)["selection"]
    assert (selection["metric"], selection["level"], selection["mode"]) == (metric, None, "min")
    scores = selection_history(tmp_path)
    assert len(scores) == 3
    best_step, _ = min(scores, key=lambda h: h[1])
    assert selection["best_checkpoint"] == f"best-step={best_step}.ckpt"
    # Each score is the validation loss, or the mean training loss of the steps since the last check.
    (path,) = (tmp_path / "logs").rglob("metrics.csv")
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    expected, since = [], []
    for row in rows:
        if row.get("train/loss"):
            since.append(float(row["train/loss"]))
        if row.get("val/selection"):
            expected.append(float(row["val/loss"]) if metric == "loss" else sum(since) / len(since))
            since = []
    assert [v for _, v in scores] == pytest.approx(expected, rel=1e-6)


def test_a_set_ranks_from_exactly_the_minimum_of_distinct_system_means_or_labels():
    # System level counts distinct system means, not systems: 9 systems with 4 distinct means
    # cannot rank at a minimum of 5; 5 distinct means can, 4 cannot.
    assert choose_rule({"v": counts(40, 9, 20, 4)}).fallback_used
    assert not choose_rule({"v": counts(40, 5, 20, 5)}).fallback_used
    assert choose_rule({"v": counts(40, 5, 20, 5)}, min_systems=6).fallback_used
    assert not choose_rule({"v": counts(40, 9, 3, 4)}, min_systems=4).fallback_used
    # Utterance level: distinct labels at the minimum rank, one fewer falls back; systems play no part.
    assert not choose_rule({"v": counts(40, 1, 5, 1)}, level="utt").fallback_used
    assert choose_rule({"v": counts(40, 9, 4, 9)}, level="utt").fallback_used
    assert choose_rule({"v": counts(40, 9, 6, 9)}, level="utt", min_distinct_labels=7).fallback_used
    assert not choose_rule({"v": counts(40, 9, 7, 9)}, level="utt", min_distinct_labels=7).fallback_used


@pytest.mark.parametrize(
    ("metric", "mode"),
    [("srcc", "max"), ("lcc", "max"), ("ktau", "max"), ("pair_acc", "max")]
    + [("mse", "min"), ("rmse", "min"), ("loss", "min"), ("train_loss", "min")],
)
def test_ranking_metrics_are_maximised_and_errors_and_losses_minimised(metric, mode):
    big = counts(60, 12, 30, 12)
    rule = choose_rule({"v": big}, metric=metric)
    assert rule.mode == mode and rule.metric == metric and not rule.fallback_used
    assert rule.describe().endswith(f"({mode})") and rule.record()["mode"] == mode
    # A fallback is an error measure or the loss: minimised, whatever was asked.
    small = counts(8, 2, 2, 2)
    for fallback in ("rmse", "mse", "loss"):
        assert choose_rule({"v": small}, fallback=fallback).mode == "min"


def test_an_error_measure_is_used_as_asked_at_its_level_on_every_set():
    small, big = counts(8, 2, 2, 2), counts(60, 12, 30, 12)
    rule = choose_rule({"a": small, "b": big}, metric="rmse", level="sys")
    assert (rule.metric, rule.level, rule.sets, rule.warning, rule.fallback_used) == (
        "rmse",
        "sys",
        ("a", "b"),
        None,
        False,
    )
    assert rule.record()["requested"] == "sys rmse" and rule.describe() == (
        "system-level rmse over valid/a, valid/b (min)"
    )
    loss = choose_rule({"a": small}, fallback="loss")
    assert (loss.metric, loss.level, loss.describe()) == (
        "loss",
        None,
        "validation loss over valid/a (min)",
    )


def test_uninformative_tells_a_tiny_change_from_none():
    assert uninformative([0.5, 0.5 + 1e-12])
    # Around 0 the absolute tolerance (1e-12) decides.
    assert uninformative([0.0, 1e-13]) and not uninformative([0.0, 1e-11])
    # Every score is compared with the first: a drift of steps each within the tolerance changed.
    assert not uninformative([1.0, 1.0 + 0.9e-9, 1.0 + 1.8e-9])
    assert not uninformative([0.5, 0.5 + 1e-6])
    assert not uninformative([0.0, 1e-9])
    assert not uninformative([math.nan, 0.3])
    assert not uninformative([math.nan, math.nan, 0.3])
    assert not uninformative([])


def test_the_rule_names_its_score_in_a_few_words_for_the_curves():
    big, small = counts(60, 12, 30, 12), counts(8, 2, 2, 2)
    assert choose_rule({"v": big}).label == "system-level SRCC"
    assert choose_rule({"v": big}, metric="ktau", level="utt").label == "utterance-level KTAU"
    # The fallback's name, not the request's.
    assert choose_rule({"v": small}).label == "utterance-level RMSE"
    assert choose_rule({"v": small}, fallback="loss").label == "validation loss"
    assert choose_rule({"v": big}, metric="train_loss").label == "training loss"


def clip(sample_id: str, system: str, mos: float) -> Clip:
    return Clip(sample_id, Path(f"{sample_id}.wav"), mos, system, "d", "valid")


def test_label_counts_give_the_median_clips_per_system():
    # Systems of 1, 2 and 5 clips: median 2; with a fourth of 6 clips: (2 + 5) / 2.
    sizes = {"a": 1, "b": 2, "c": 5}
    clips = [clip(f"{s}{k}", s, 1.0 + k) for s, n in sizes.items() for k in range(n)]
    assert count_labels(clips).clips_per_system == 2.0
    clips += [clip(f"d{k}", "d", 2.0) for k in range(6)]
    assert count_labels(clips).clips_per_system == 3.5
    assert count_labels([]).clips_per_system == 0.0
    assert "median 3.5 clips per system" in count_labels(clips).describe()


def test_system_means_of_too_few_clips_cannot_rank():
    # The reported case: 8 systems of 2 clips each, every clip its own label, 8 distinct system
    # means. Enough systems, but each mean is of 2 clips: the system level falls back.
    clips = [clip(f"s{i}-{k}", f"s{i}", 1.0 + 0.5 * i + 0.1 * k) for i in range(8) for k in range(2)]
    two = count_labels(clips)
    assert (two.systems, two.system_labels, two.labels, two.clips_per_system) == (8, 8, 16, 2.0)
    rule = choose_rule({"v": two})
    assert rule.fallback_used and rule.metric == "rmse"
    assert (
        "'valid/v': 16 clips, 8 systems, 16 distinct labels (8 distinct system means), median 2 clips"
        in rule.warning
    )
    assert "a median of at least 3 clips per system" in rule.warning
    # A third clip per system: the means are of 3 clips, at the default minimum, and rank.
    three = count_labels([*clips, *(clip(f"s{i}-2", f"s{i}", 1.0 + 0.5 * i) for i in range(8))])
    assert three.clips_per_system == 3.0
    assert not choose_rule({"v": three}).fallback_used
    # Both sides of a configured minimum; the distinct system means still count as before.
    assert not choose_rule({"v": counts(40, 8, 20, 8, 4)}, min_clips_per_system=4).fallback_used
    assert choose_rule({"v": counts(40, 8, 20, 8, 3)}, min_clips_per_system=4).fallback_used
    assert choose_rule({"v": counts(40, 8, 20, 8, 2.5)}).fallback_used
    assert choose_rule({"v": counts(40, 8, 20, 4, 5)}).fallback_used
    # Only the set whose means are too thin is left out.
    rule = choose_rule({"p1": counts(40, 8, 20, 8, 5), "p2": counts(16, 8, 16, 8, 2)})
    assert rule.sets == ("p1",) and not rule.fallback_used
    # The utterance level ranks on distinct clip labels; clips per system play no part.
    assert not choose_rule({"v": two}, level="utt").fallback_used
    assert not choose_rule({"v": counts(40, 40, 5, 5, 1)}, level="utt", min_clips_per_system=10).fallback_used


def test_bad_selection_settings_are_named():
    big = counts(60, 12, 30, 12)
    with pytest.raises(ValueError, match=r"selection.level must be 'utt' or 'sys', got 'clip'"):
        choose_rule({"v": big}, level="clip")
    with pytest.raises(
        ValueError, match=r"selection.fallback must be one of \['rmse', 'mse', 'loss'\] or null, got 'srcc'"
    ):
        choose_rule({"v": big}, fallback="srcc")
    # Each limit exactly at its bound is accepted.
    assert choose_rule({"v": big}, min_clips_per_system=1, tie_tolerance=0).tie_tolerance == 0
    with pytest.raises(ValueError, match=r"selection.min_clips_per_system must be at least 1, got 0"):
        choose_rule({"v": big}, min_clips_per_system=0)
    with pytest.raises(ValueError, match=r"selection.tie_tolerance must be 0 or more, got -0.1"):
        choose_rule({"v": big}, tie_tolerance=-0.1)
    with pytest.raises(ValueError, match=r"selection.tie_tolerance must be 0 or more, got nan"):
        choose_rule({"v": big}, tie_tolerance=math.nan)


def test_a_run_shorter_than_its_first_validation_validates_at_its_end(manifest, tmp_path, caplog):
    from sqa.training.fitting import first_validation

    # Both sides of the rule: fewer steps than the interval lower it; as many, or no step limit, keep it.
    assert first_validation(compose_train(["trainer.max_steps=2", "trainer.val_check_interval=25"])) == {
        "val_check_interval": 2
    }
    for overrides in (["trainer.max_steps=25"], ["trainer.max_steps=-1"], ["trainer.val_check_interval=0.5"]):
        assert first_validation(compose_train(["trainer.val_check_interval=25", *overrides])) == {}
    caplog.set_level(logging.INFO, logger="sqa")
    run(compose_train([*tiny_run_overrides(manifest), "trainer.max_steps=2"]), tmp_path / "short")
    info = json.loads((tmp_path / "short" / "run_info.json").read_text())
    assert info["training_end"]["step"] == 2 and (tmp_path / "short" / "export" / "model.pt").is_file()
    assert "validating at step 2 instead" in caplog.text


def test_training_that_ends_before_any_validation_is_one_line_not_lightnings_traceback(manifest, tmp_path):
    from sqa.training.run import NoCheckpointError

    # One epoch of a few batches, validation every 10 000 steps: no checkpoint is ever selected.
    overrides = ["trainer.max_steps=-1", "trainer.max_epochs=1", "trainer.val_check_interval=10000"]
    with pytest.raises(NoCheckpointError) as err:
        run(compose_train([*tiny_run_overrides(manifest), *overrides]), tmp_path / "none")
    assert "before any validation (trainer.val_check_interval=10000) selected a checkpoint" in str(err.value)
    assert "\n" not in str(err.value)
    assert not (tmp_path / "none" / "export").exists()


def test_candidates_of_one_run_read_the_corpus_once_and_log_its_table_once(
    manifest, tmp_path, caplog, monkeypatch
):
    import sqa.data.readers
    from sqa.training.plan import Candidate, Plan
    from sqa.training.prepare import prepare

    reads = []
    reader = sqa.data.readers.read_csv_manifest
    monkeypatch.setattr(
        sqa.data.readers, "read_csv_manifest", lambda *a, **k: reads.append(1) or reader(*a, **k)
    )
    line = tiny_run_overrides(manifest)
    two = Plan((Candidate("first", ()), Candidate("second", ("optim.lr=1e-3",))), tuple(line), False, None)
    caplog.set_level(logging.INFO, logger="sqa")
    prepared, skipped = prepare(compose_train(line), tmp_path / "run", two)
    assert [p.name for p in prepared] == ["first", "second"] and skipped == {}
    assert len(reads) == 1
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Corpus:")]
    assert len(said) == 1 and said[0].startswith("Corpus:\n")
    # The same clips in the same splits for both, each with its own configuration and folder.
    first, second = (p.datamodule.corpus for p in prepared)
    assert [c.path for c in first.clips] == [c.path for c in second.clips]
    assert [c.split for c in first.clips] == [c.split for c in second.clips]
    assert [p.cfg.optim.lr for p in prepared] == [3e-3, 1e-3]
    assert [p.folder for p in prepared] == [tmp_path / "run" / "candidates" / n for n in ("first", "second")]
