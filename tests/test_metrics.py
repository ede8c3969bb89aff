import math

import numpy as np
import pytest

from sqa import metrics


def test_correlations_match_hand_computed_values():
    pred = [1.0, 2.0, 3.0, 4.0]
    true = [1.0, 3.0, 2.0, 4.0]
    m = metrics.correlations(np.array(pred), np.array(true))
    # Squared errors 0, 1, 1, 0; deviations give cov 4 over variances 5 and 5; one of six
    # pairs is discordant.
    assert m["rmse"] == pytest.approx(math.sqrt(0.5))
    assert m["lcc"] == pytest.approx(0.8)
    assert m["srcc"] == pytest.approx(0.8)
    assert m["ktau"] == pytest.approx(4 / 6)
    assert m["n"] == 4


def test_constant_prediction_gives_nan_correlations_not_an_error():
    m = metrics.correlations(np.array([3.0, 3.0, 3.0]), np.array([1.0, 2.0, 4.0]))
    assert math.isnan(m["lcc"]) and math.isnan(m["srcc"])
    assert m["rmse"] == pytest.approx(math.sqrt((4 + 1 + 1) / 3))


def test_system_level_uses_per_system_means():
    pred = [1.0, 3.0, 4.0, 4.0, 1.0]
    true = [2.0, 2.0, 5.0, 3.0, 1.5]
    systems = ["a", "a", "b", "b", "c"]
    p, t, names = metrics.system_means(pred, true, systems)
    assert names == ["a", "b", "c"]
    np.testing.assert_allclose(p, [2.0, 4.0, 1.0])
    np.testing.assert_allclose(t, [2.0, 4.0, 1.5])
    block = metrics.evaluate(pred, true, systems)
    assert block["sys"]["n"] == 3 and block["utt"]["n"] == 5
    assert block["sys"]["rmse"] == pytest.approx(math.sqrt(0.25 / 3))


def test_weighted_average_weights_by_clip_and_system_counts():
    results = metrics.evaluate_sets(
        pred=[1.0, 2.0, 3.0, 1.0, 2.0, 3.0, 4.0],
        true=[1.0, 2.0, 4.0, 2.0, 2.0, 3.0, 3.0],
        systems=["a", "b", "c", "a", "b", "c", "c"],
        test_sets=["t1", "t1", "t1", "t2", "t2", "t2", "t2"],
    )
    assert list(results) == ["t1", "t2", "avg"]
    t1, t2, avg = results["t1"], results["t2"], results["avg"]
    assert avg["utt"]["n"] == 7 and avg["sys"]["n"] == 6
    expected = (t1["utt"]["rmse"] * 3 + t2["utt"]["rmse"] * 4) / 7
    assert avg["utt"]["rmse"] == pytest.approx(expected)
    expected_sys = (t1["sys"]["srcc"] * 3 + t2["sys"]["srcc"] * 3) / 6
    assert avg["sys"]["srcc"] == pytest.approx(expected_sys)


def test_selection_score_weights_by_systems_and_counts_nan_as_zero():
    blocks = {
        "a": {"sys": {"srcc": 0.5, "n": 2}},
        "b": {"sys": {"srcc": 1.0, "n": 6}},
        "c": {"sys": {"srcc": math.nan, "n": 2}},
    }
    assert metrics.selection_score(blocks) == pytest.approx((0.5 * 2 + 6.0) / 10)


def test_table_has_paper_layout():
    results = metrics.evaluate_sets(
        [1.0, 2.0, 3.0] * 3,
        [1.0, 2.5, 3.0] * 3,
        ["a", "b", "c"] * 3,
        ["test1"] * 3 + ["test2"] * 3 + ["test3"] * 3,
    )
    table = metrics.format_table(results)
    assert "test1/test2|test3|Avg" in table
    srcc_row = next(line for line in table.splitlines() if line.startswith("sys    srcc"))
    assert srcc_row.split()[-1] == "1.000/1.000|1.000|1.000"
