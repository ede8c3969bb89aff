"""The learning check: the selected model against the constant training-mean predictor."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sqa import metrics
from sqa.reports import learning


def blocks(pred, true, systems, sets, bootstrap=0, apart=()):
    return metrics.evaluate_sets(pred, true, systems, sets, bootstrap=bootstrap, seed=0, apart=apart)


def record(test_rmse, constant_rmse, ci, valid=None, mean=3.0):
    return {
        "train_mean": mean,
        "test": {"clips": 10, "rmse": test_rmse, "constant_rmse": constant_rmse, "srcc": 0.5, "srcc_ci": ci},
        "valid": valid,
    }


def test_constant_rmse_is_the_root_mean_square_deviation_from_the_constant():
    assert learning.constant_rmse([1.0, 2.0, 4.0], 2.0) == pytest.approx(math.sqrt((1 + 0 + 4) / 3))
    assert math.isnan(learning.constant_rmse([], 3.0))


def test_the_constants_test_rmse_is_averaged_over_sets_as_the_models_is():
    # Two test sets of 2 and 4 clips: the average RMSE is clip-weighted over the sets' own RMSEs,
    # not the RMSE pooled over all clips.
    true = [1.0, 3.0, 2.0, 2.0, 5.0, 5.0]
    sets = ["a", "a", "b", "b", "b", "b"]
    pred = [1.5, 2.5, 2.0, 2.5, 4.0, 4.5]
    results = blocks(pred, true, [f"s{i}" for i in range(6)], sets)
    out = learning.check(3.0, None, results, true, sets)
    rmse_a = math.sqrt((4 + 0) / 2)
    rmse_b = math.sqrt((1 + 1 + 4 + 4) / 4)
    assert out["test"]["constant_rmse"] == pytest.approx((2 * rmse_a + 4 * rmse_b) / 6)
    pooled = learning.constant_rmse(true, 3.0)
    assert out["test"]["constant_rmse"] != pytest.approx(pooled)
    assert out["test"]["rmse"] == pytest.approx(results["avg"]["utt"]["rmse"])
    assert out["test"]["clips"] == 6


def test_sets_apart_are_left_out_of_the_constants_average_too():
    true = [2.0, 4.0, 5.0]
    sets = ["t", "t", "reference"]
    results = blocks([2.5, 3.5, 5.0], true, ["a", "b", "c"], sets, apart=("reference",))
    out = learning.check(3.0, None, results, true, sets, apart=("reference",))
    assert out["test"]["constant_rmse"] == pytest.approx(1.0)
    assert out["test"]["clips"] == 2


def test_the_models_srcc_interval_is_recorded_from_the_test_average():
    rng = np.random.default_rng(0)
    true = rng.uniform(1, 5, 40).tolist()
    pred = (np.array(true) + rng.normal(0, 0.3, 40)).tolist()
    sets = ["t"] * 40
    results = blocks(pred, true, [f"s{i % 8}" for i in range(40)], sets, bootstrap=50)
    out = learning.check(3.0, (0.2, [2.0, 4.0]), results, true, sets)
    assert out["test"]["srcc_ci"] == pytest.approx(results["avg"]["ci"]["utt"]["srcc"])
    assert out["test"]["srcc"] == pytest.approx(results["avg"]["utt"]["srcc"])
    assert out["valid"] == {"clips": 2, "rmse": 0.2, "constant_rmse": pytest.approx(1.0)}
    assert out["verdict"] == "better"


@pytest.mark.parametrize(
    ("test_rmse", "ci", "valid", "expected"),
    [
        # Test RMSE on both sides of the constant's (equal is not better): the level fails, the
        # ranking (an interval above 0) holds.
        (0.79, [0.1, 0.6], None, "better"),
        (0.80, [0.1, 0.6], None, "ranks_only"),
        (0.81, [0.1, 0.6], None, "ranks_only"),
        (0.81, [0.0, 0.6], None, "no_better"),
        # The SRCC interval on both sides of 0 (touching 0 does not exclude it), and missing.
        (0.79, [0.0, 0.6], None, "uncertain"),
        (0.79, [1e-9, 0.6], None, "better"),
        (0.79, None, None, "uncertain"),
        (0.79, [None, None], None, "uncertain"),
        # Both sources of a level no better than the constant's: validation alone decides too.
        (0.79, [0.1, 0.6], {"rmse": 0.5, "constant_rmse": 0.5}, "ranks_only"),
        (0.79, [-0.1, 0.6], {"rmse": 0.5, "constant_rmse": 0.5}, "no_better"),
        (0.79, [0.1, 0.6], {"rmse": 0.49, "constant_rmse": 0.5}, "better"),
        (0.81, [0.1, 0.6], {"rmse": 0.49, "constant_rmse": 0.5}, "ranks_only"),
        # A null RMSE (predictions not finite) against a known constant's never beats it.
        (None, [0.1, 0.6], {"rmse": 0.49, "constant_rmse": 0.5}, "ranks_only"),
        (0.79, [None, None], {"rmse": None, "constant_rmse": 0.5}, "no_better"),
    ],
)
def test_verdict_on_both_sides_of_each_threshold(test_rmse, ci, valid, expected):
    assert learning.verdict(record(test_rmse, 0.80, ci, valid)) == expected


def test_a_part_without_the_constants_rmse_does_not_decide():
    unknown = {"rmse": None, "constant_rmse": None}
    assert learning.verdict(record(0.79, 0.80, [0.1, 0.6], unknown)) == "better"
    assert learning.verdict(record(None, None, [0.1, 0.6])) == "uncertain"


def test_a_null_rmse_is_never_said_to_beat_the_constant():
    # A model trained from inf weights predicts NaN: its RMSE is null, its metrics too.
    line = learning.sentence(record(None, 0.88, None, mean=3.0))
    assert "beats" not in line
    assert line.startswith(
        "This model predicts no better than the constant training mean 3 on test (RMSE not below the "
        "constant's): test utterance RMSE n/a against 0.88"
    )


@pytest.mark.parametrize(
    ("test_rmse", "ci", "kind", "level", "rank", "said"),
    [
        (
            0.5,
            [0.25, 0.5],
            "better",
            "better",
            "better",
            "This model beats the constant training mean 3: test utterance RMSE 0.5 against 0.88 for the "
            "constant, test utterance SRCC interval [0.25, 0.5].",
        ),
        (
            0.95,
            [0.41, 0.73],
            "ranks_only",
            "no_better",
            "better",
            "This model ranks clips better than chance (test utterance SRCC 0.59 [0.41, 0.73]); its levels "
            "are no better than the training mean 3's on test (test utterance RMSE 0.95 against 0.88 for the "
            "constant): use it to rank, not to predict absolute scores.",
        ),
        (
            0.5,
            [-0.2, 0.5],
            "uncertain",
            "better",
            "chance",
            "This model beats the constant training mean 3 in RMSE (test utterance RMSE 0.5 against 0.88 for "
            "the constant), but its test utterance SRCC interval [-0.2, 0.5] does not exclude 0: its ranking "
            "may be chance.",
        ),
        (
            0.95,
            [0.0, 0.73],
            "no_better",
            "no_better",
            "chance",
            "This model predicts no better than the constant training mean 3 on test (RMSE not below the "
            "constant's): test utterance RMSE 0.95 against 0.88 for the constant, and its ranking is not "
            "shown better than chance (test utterance SRCC 0.59 [0, 0.73]); do not rely on its scores.",
        ),
    ],
)
def test_level_and_rank_are_judged_apart_and_said_in_one_sentence(test_rmse, ci, kind, level, rank, said):
    checked = record(test_rmse, 0.88, ci)
    checked["test"]["srcc"] = 0.59
    assert (learning.verdict(checked), learning.level(checked), learning.rank(checked)) == (kind, level, rank)
    assert learning.sentence(checked) == said


def test_the_sentence_names_each_side_whose_level_failed():
    no = learning.sentence(record(0.95, 0.88, [0.1, 0.5], {"rmse": 0.7, "constant_rmse": 0.6}, mean=3.12))
    assert "no better than the training mean 3.12's on test and validation (test utterance RMSE 0.95 " in no
    assert "validation 0.7 against 0.6 for the constant" in no
    # Each side that failed is named, and only it: better on test, failed validation.
    valid_only = learning.sentence(record(0.7019, 0.841, [0.1, 0.5], {"rmse": 0.8677, "constant_rmse": 0.86}))
    assert "no better than the training mean 3's on validation (" in valid_only
    test_only = learning.sentence(record(0.9, 0.841, [-0.1, 0.5], {"rmse": 0.5, "constant_rmse": 0.86}))
    assert " on test (RMSE not below" in test_only
    assert "\n" not in no + valid_only + test_only


def test_check_records_the_level_and_the_rank_beside_the_verdict():
    rng = np.random.default_rng(1)
    true = rng.uniform(1, 5, 40).tolist()
    # The order kept, the level shifted by 2 points: ranks well, levels far off.
    pred = (np.array(true) + 2.0 + rng.normal(0, 0.2, 40)).tolist()
    sets = ["t"] * 40
    results = blocks(pred, true, [f"s{i % 8}" for i in range(40)], sets, bootstrap=50)
    out = learning.check(3.0, None, results, true, sets)
    assert (out["level"], out["rank"], out["verdict"]) == ("no_better", "better", "ranks_only")


def test_the_sentence_never_repeats_stored_text():
    hostile = record("\x1b[2Jrm -rf", 0.8, ["x", "y"], mean="\x1b]0;owned\x07")
    text = learning.sentence(hostile)
    assert "\x1b" not in text
    assert "n/a" in text
    # An RMSE that is not a number never beats the constant's.
    assert learning.verdict(hostile) == "no_better"


def peer_case(kind: str):
    """(model, peer, labels): 60 clips; the model ranks them well, the peer at random (or the reverse)."""
    rng = np.random.default_rng(4)
    true = rng.uniform(1, 5, 60)
    good = true + rng.normal(0, 0.3, 60)
    noise = rng.uniform(1, 5, 60)
    model, peer = {"better": (good, noise), "worse": (noise, good), "not_shown": (good, good + 0.01 * noise)}[
        kind
    ]
    return model.tolist(), peer.tolist(), true.tolist()


@pytest.mark.parametrize(
    ("kind", "said"),
    [
        ("better", "; it ranks clips better than the pretrained peer calibrated (SRCC "),
        ("worse", "; it ranks clips worse than the pretrained peer calibrated (SRCC "),
        ("not_shown", "; it is not shown to rank better or worse than the pretrained peer calibrated (SRCC "),
    ],
)
def test_the_ranking_is_judged_against_the_pretrained_peer_on_each_side_of_its_interval(kind, said):
    model, peer, true = peer_case(kind)
    systems, sets = [f"s{i % 6}" for i in range(60)], ["t"] * 60
    compared = learning.peer_record("calibrated", model, peer, true, systems, sets)
    # The SRCCs are scipy's on the same clips; the difference is the model's minus the peer's.
    ours = stats.spearmanr(model, true).statistic
    assert compared["peer_srcc"] == pytest.approx(stats.spearmanr(peer, true).statistic)
    assert compared["difference"] == pytest.approx(ours - compared["peer_srcc"])
    low, high = compared["difference_ci"]
    assert {"better": low > 0, "worse": high < 0, "not_shown": low <= 0 <= high}[kind]
    checked = {**record(0.5, 0.88, [0.1, 0.7]), "peer": compared}
    assert learning.against_peer(checked) == kind
    text = learning.sentence(checked)
    # One sentence: the constant's part, then the peer's clause with its numbers, one full stop.
    assert said in text and text.endswith(".") and text.count(". ") == 0 and "\n" not in text
    # The model's SRCC is the check's own (the test average's).
    assert f"(SRCC 0.5 against {compared['peer_srcc']:.4g}, difference" in text
    assert f"difference {compared['difference']:.4g} [{low:.4g}, {high:.4g}]" in text


def test_a_peer_whose_ranking_is_undefined_is_not_judged_and_the_reference_set_is_left_out():
    # The peer scores every clip alike (a constant): its SRCC is undefined, so is the difference.
    true = [1.0, 2.0, 3.0, 4.0, 5.0, 2.5, 3.5, 4.5, 1.5, 5.0]
    sets = ["t"] * 9 + ["reference"]
    compared = learning.peer_record("flat", true, [3.0] * 10, true, [f"s{i}" for i in range(10)], sets)
    assert compared["peer_srcc"] is None
    assert compared["difference"] is None and compared["difference_ci"] is None
    checked = {**record(0.5, 0.88, [0.1, 0.7]), "peer": compared}
    assert learning.against_peer(checked) == "unknown"
    assert (
        "; against the pretrained peer flat its ranking is not judged (SRCC 0.5 against n/a"
        in learning.sentence(checked)
    )
    # Without a peer the sentence is the constant's alone.
    assert "peer" not in learning.sentence(record(0.5, 0.88, [0.1, 0.7]))


@pytest.mark.parametrize(
    ("interval", "kind"),
    [
        ([0.01, 0.3], "better"),
        ([0.0, 0.3], "not_shown"),
        ([-0.3, 0.0], "not_shown"),
        ([-0.3, -0.01], "worse"),
    ],
)
def test_a_difference_interval_touching_0_shows_neither_side(interval, kind):
    checked = {**record(0.5, 0.88, [0.1, 0.7]), "peer": {"name": "calibrated", "difference_ci": interval}}
    assert learning.against_peer(checked) == kind
