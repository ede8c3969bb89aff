import json
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from sqa import metrics
from sqa.core import artefacts, resampling
from sqa.core.atomic import json_text
from sqa.reports import tables
from sqa.training.selection import selection_score


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


def test_mse_is_the_mean_squared_error_beside_rmse():
    # Errors 0.5, -1, 0, 2: squared 0.25, 1, 0, 4, mean 5.25 / 4.
    m = metrics.correlations(np.array([1.5, 2.0, 3.0, 6.0]), np.array([1.0, 3.0, 3.0, 4.0]))
    assert m["mse"] == pytest.approx(1.3125)
    assert m["rmse"] == pytest.approx(math.sqrt(1.3125))
    # System means: a (pred 1.75, true 2), b (pred 4.5, true 3.5): squared errors 1/16 and 1.
    block = metrics.evaluate([1.5, 2.0, 3.0, 6.0], [1.0, 3.0, 3.0, 4.0], ["a", "a", "b", "b"])
    assert block["sys"]["mse"] == pytest.approx((1 / 16 + 1) / 2)
    results = metrics.evaluate_sets(
        [1.5, 2.0, 3.0, 6.0], [1.0, 3.0, 3.0, 4.0], ["a", "a", "b", "b"], ["t", "t", "u", "u"], 200
    )
    # Weighted by clips: set t has squared errors 0.25 and 1, set u 0 and 4.
    assert results["avg"]["utt"]["mse"] == pytest.approx((0.625 * 2 + 2.0 * 2) / 4)
    lo, hi = results["u"]["ci"]["utt"]["mse"]
    assert 0.0 <= lo <= 2.0 <= hi <= 4.0


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


def test_a_constant_predictor_has_equal_system_means_and_no_system_ranking():
    # 3.3 summed 3, 6 or 7 times and divided is off by a bit; the means of a constant must stay
    # one value, so that system SRCC is undefined rather than ranked noise.
    c = 3.3
    systems = [f"s{i}" for i, n in enumerate(range(1, 12)) for _ in range(n)]
    true = np.linspace(1.0, 5.0, len(systems)).tolist()
    p, t, _ = metrics.system_means([c] * len(systems), true, systems)
    assert set(p.tolist()) == {c}
    assert [n for n in range(1, 8) if sum([c] * n) / n != c] == [
        3,
        6,
        7,
    ]  # the plain sum-then-divide mean this replaces would not be constant
    np.testing.assert_allclose(
        t, [np.mean([x for x, s in zip(true, systems, strict=True) if s == k]) for k in sorted(set(systems))]
    )
    block = metrics.evaluate([c] * len(systems), true, systems)
    assert math.isnan(block["sys"]["srcc"]) and math.isnan(block["sys"]["lcc"])


def test_system_means_are_exact_means_so_equal_averages_tie_in_any_order():
    # Two systems with the same ratings in another order: np.mean gives 3.5333333333333337 for
    # one and 3.533333333333333 for the other, which would rank a tie. The exact mean is the reference.
    a = [3.4, 4.0, 3.2]
    b = a[::-1]
    assert float(np.mean(a)) != float(np.mean(b))
    _, t, names = metrics.system_means([0.0] * 6, a + b, ["a"] * 3 + ["b"] * 3)
    exact = float(sum(map(Fraction, a)) / len(a))
    assert names == ["a", "b"] and t.tolist() == [exact, exact]
    assert math.isnan(
        metrics.evaluate([1.0, 1.0, 1.0, 2.0, 2.0, 2.0], a + b, ["a"] * 3 + ["b"] * 3)["sys"]["srcc"]
    )


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
    assert selection_score(blocks) == pytest.approx((0.5 * 2 + 6.0) / 10)


def test_table_has_paper_layout():
    results = metrics.evaluate_sets(
        [1.0, 2.0, 3.0] * 3,
        [1.0, 2.5, 3.0] * 3,
        ["a", "b", "c"] * 3,
        ["test1"] * 3 + ["test2"] * 3 + ["test3"] * 3,
    )
    table = tables.format_table(results)
    assert "test1/test2|test3|Avg" in table
    srcc_row = next(line for line in table.splitlines() if line.startswith("sys    srcc"))
    assert srcc_row.split()[-1] == "1.000/1.000|1.000|1.000"


def test_pair_acc_excludes_truth_ties_and_counts_prediction_ties_as_half():
    # Pairs (i<j): (0,1) tied in truth, excluded; (0,2) tied in pred, half; (1,2) discordant;
    # (0,3), (1,3) and (2,3) concordant → (3 + 0.5) / 5.
    true = np.array([1.0, 1.0, 2.0, 3.0])
    pred = np.array([2.0, 3.0, 2.0, 4.0])
    assert metrics.pair_acc(pred, true) == pytest.approx(3.5 / 5)
    assert metrics.correlations(pred, true)["pair_acc"] == pytest.approx(3.5 / 5)
    assert metrics.pair_acc(np.array([3.0, 3.0, 3.0]), np.array([1.0, 2.0, 3.0])) == 0.5
    assert math.isnan(metrics.pair_acc(np.array([1.0, 2.0]), np.array([2.0, 2.0])))


def test_pair_acc_row_blocks_agree_with_one_block(monkeypatch):
    rng = np.random.default_rng(0)
    true = rng.integers(1, 6, 200).astype(float)
    pred = np.round(true + rng.normal(0, 1, 200))
    expected = metrics.pair_acc(pred, true)
    monkeypatch.setattr(resampling, "PAIR_BLOCK", 450)
    assert metrics.pair_acc(pred, true) == pytest.approx(expected)


def test_system_level_pair_acc_on_system_means():
    # System means: a (pred 2, true 2), b (pred 4, true 4), c (pred 1, true 1.5): all three
    # pairs ordered alike.
    pred = [1.0, 3.0, 4.0, 4.0, 1.0]
    true = [2.0, 2.0, 5.0, 3.0, 1.5]
    systems = ["a", "a", "b", "b", "c"]
    assert metrics.evaluate(pred, true, systems)["sys"]["pair_acc"] == pytest.approx(1.0)
    # Swapping c's prediction above a's makes the pair (a, c) discordant: 2 of 3.
    pred[4] = 2.5
    assert metrics.evaluate(pred, true, systems)["sys"]["pair_acc"] == pytest.approx(2 / 3)


def test_resampled_metrics_equal_metrics_of_the_resampled_clips(monkeypatch):
    rng = np.random.default_rng(1)
    true = np.round(rng.uniform(1, 5, 120) * 2) / 2
    pred = np.round((true + rng.normal(0, 0.8, 120)) * 2) / 2
    idx = metrics.bootstrap_indices(rng, 120, 8)
    idx[0] = 7  # a constant resample: correlations are NaN, pair_acc too (truth tied)
    monkeypatch.setattr(resampling, "PAIR_BLOCK", 1000)  # several column blocks
    got = metrics.resampled_metrics(pred, true, idx)
    for r in range(len(idx)):
        expected = metrics.correlations(pred[idx[r]], true[idx[r]])
        for name in metrics.METRIC_NAMES:
            np.testing.assert_allclose(got[name][r], expected[name], rtol=1e-12, err_msg=name)


def simulated_sets(n: int, seed: int = 0) -> tuple[list, list, list, list]:
    rng = np.random.default_rng(seed)
    systems = [f"s{i % 20}" for i in range(n)]
    quality = {s: rng.uniform(1.5, 4.5) for s in sorted(set(systems))}
    true = np.array([quality[s] for s in systems]) + rng.normal(0, 0.5, n)
    pred = true + rng.normal(0, 0.6, n)
    sets = [f"test{i % 3 + 1}" for i in range(n)]
    return list(pred), list(true), systems, sets


def test_bootstrap_intervals_contain_estimate_are_seeded_and_shrink_with_n():
    small = metrics.evaluate_sets(*simulated_sets(50), bootstrap=300, seed=3)
    large = metrics.evaluate_sets(*simulated_sets(2000), bootstrap=300, seed=3)
    assert small == metrics.evaluate_sets(*simulated_sets(50), bootstrap=300, seed=3)
    assert small != metrics.evaluate_sets(*simulated_sets(50), bootstrap=300, seed=4)
    for name in ("test1", "test2", "test3", "avg"):
        for name_metric in metrics.METRIC_NAMES:
            lo, hi = large[name]["ci"]["utt"][name_metric]
            assert lo <= large[name]["utt"][name_metric] <= hi
            s_lo, s_hi = small[name]["ci"]["utt"][name_metric]
            assert hi - lo < (s_hi - s_lo) / 2
        for name_metric in ("lcc", "srcc", "pair_acc"):
            lo, hi = large[name]["ci"]["sys"][name_metric]
            assert lo <= large[name]["sys"][name_metric] <= hi
    assert set(large["avg"]["ci"]) == {"utt", "sys"}
    # Averaging independent sets narrows the interval below that of any one set.
    width = {s: np.diff(large[s]["ci"]["utt"]["srcc"])[0] for s in large}
    assert width["avg"] < min(width[s] for s in ("test1", "test2", "test3"))


def test_no_bootstrap_leaves_blocks_unchanged_and_nan_resamples_are_ignored():
    plain = metrics.evaluate_sets(*simulated_sets(60))
    assert all("ci" not in block for block in plain.values())
    # Ten clips, one of them with another true score: a resample that misses it (0.9**10, about
    # 35 %) has constant labels and no SRCC; the interval is that of the other resamples.
    pred = [float(i) for i in range(10)]
    true = [1.0] * 9 + [2.0]
    systems = [f"s{i}" for i in range(10)]
    results = metrics.evaluate_sets(pred, true, systems, ["t"] * 10, 400, seed=0)
    draws = metrics.bootstrap_metrics(pred, true, systems, np.random.default_rng(0), 400)["utt"]["srcc"]
    assert 0.2 < np.isnan(draws).mean() < 0.5
    np.testing.assert_allclose(results["t"]["ci"]["utt"]["srcc"], np.nanpercentile(draws, [2.5, 97.5]))


def test_table_prints_intervals_when_present():
    results = metrics.evaluate_sets(*simulated_sets(90), bootstrap=100)
    table = tables.format_table(results)
    row = next(line for line in table.splitlines() if line.startswith("utt    srcc"))
    lo, hi = results["test1"]["ci"]["utt"]["srcc"]
    assert row.split(maxsplit=2)[2].startswith(f"{results['test1']['utt']['srcc']:.3f} [{lo:.2f}, {hi:.2f}]/")
    assert row.count("[") == 4 and row.count("|") == 2
    assert any(line.startswith("sys    pair_acc") for line in table.splitlines())


def test_two_points_have_no_correlations_but_an_error_and_a_pair():
    pred, true = np.array([1.0, 2.0]), np.array([4.0, 3.0])
    m = metrics.correlations(pred, true)
    # With two points every correlation is ±1 whatever the data: undefined, not −1.000.
    assert all(math.isnan(m[name]) for name in ("lcc", "srcc", "ktau"))
    reasons = metrics.undefined_reasons(pred, true, "system")
    assert reasons == {name: "2 systems (needs at least 3)" for name in ("lcc", "srcc", "ktau")}
    assert m["rmse"] == pytest.approx(math.sqrt((9 + 1) / 2))
    assert m["pair_acc"] == 0.0  # the one pair is ordered the wrong way round


def test_one_point_has_only_an_error():
    block = metrics.evaluate([2.0], [3.5], ["a"])
    assert block["utt"]["rmse"] == 1.5 and block["utt"]["n"] == 1
    assert all(math.isnan(block["utt"][name]) for name in ("lcc", "srcc", "ktau", "pair_acc"))
    assert block["undefined"]["utt"] == {
        "lcc": "1 clip (needs at least 3)",
        "srcc": "1 clip (needs at least 3)",
        "ktau": "1 clip (needs at least 3)",
        "pair_acc": "1 clip (needs at least 2)",
    }


def test_constant_labels_and_constant_predictions_are_named():
    labels = metrics.evaluate([1.0, 2.0, 3.0], [3.0, 3.0, 3.0], ["a", "b", "c"])
    assert set(labels["undefined"]["utt"]) == {"lcc", "srcc", "ktau", "pair_acc"}
    assert labels["undefined"]["utt"]["srcc"] == "every clip has the same true score"
    assert labels["undefined"]["sys"]["srcc"] == "every system has the same true score"
    assert all(math.isnan(labels["utt"][name]) for name in ("lcc", "srcc", "ktau", "pair_acc"))
    preds = metrics.evaluate([3.0, 3.0, 3.0], [1.0, 2.0, 4.0], ["a", "b", "c"])
    expected = {n: "every clip has the same prediction" for n in ("lcc", "srcc", "ktau")}
    assert preds["undefined"]["utt"] == expected
    assert preds["utt"]["pair_acc"] == 0.5  # every pair tied in the prediction: half credit each
    defined = metrics.evaluate([1.0, 2.0, 4.0], [1.0, 3.0, 2.0], ["a", "b", "c"])
    assert "undefined" not in defined and defined["utt"]["srcc"] == pytest.approx(0.5)
    diverged = metrics.undefined_reasons(np.array([1.0, math.nan, 4.0]), np.array([1.0, 3.0, 2.0]))
    assert set(diverged) == set(metrics.METRIC_NAMES)
    assert math.isnan(metrics.correlations(np.array([1.0, math.nan, 4.0]), np.array([1.0, 3.0, 2.0]))["rmse"])


def test_average_leaves_out_sets_where_a_metric_is_undefined():
    # t1: systems a, b, c (means 1, 2, 3 against 1, 3, 2): SRCC 0.5. t2: one system, SRCC
    # undefined. The average is t1's, over t1 only, not NaN; RMSE averages both (weights 3, 1).
    results = metrics.evaluate_sets(
        pred=[1.0, 2.0, 3.0, 2.0, 2.0],
        true=[1.0, 3.0, 2.0, 4.0, 3.0],
        systems=["a", "b", "c", "z", "z"],
        test_sets=["t1", "t1", "t1", "t2", "t2"],
    )
    t1, t2, avg = results["t1"]["sys"], results["t2"]["sys"], results["avg"]["sys"]
    reasons, over = results["t2"]["undefined"]["sys"], results["avg"]["averaged_over"]["sys"]
    assert math.isnan(t2["srcc"]) and reasons["srcc"] == "1 system (needs at least 3)"
    assert avg["srcc"] == pytest.approx(0.5) and over["srcc"] == ["t1"]
    assert over["rmse"] == ["t1", "t2"] and avg["n"] == 4
    assert avg["rmse"] == pytest.approx((t1["rmse"] * 3 + t2["rmse"] * 1) / 4)
    assert t2["rmse"] == pytest.approx(1.5)
    assert "undefined" not in results["avg"]
    # Undefined in every set: NaN in the average too, with the reason.
    one = metrics.evaluate_sets([1.0, 2.0], [2.0, 3.0], ["a", "a"], ["t1", "t2"])
    assert math.isnan(one["avg"]["sys"]["srcc"]) and one["avg"]["averaged_over"]["sys"]["srcc"] == []
    assert one["avg"]["undefined"]["sys"]["srcc"] == "undefined in every set"
    # Level blocks hold numbers only (loggers and comparisons iterate them).
    assert all(isinstance(v, float | int) for v in results["avg"]["sys"].values())


def sets_of_systems(counts: dict[str, int], seed: int = 0) -> tuple[list, list, list, list]:
    """Two clips per system; test set `name` has `counts[name]` systems."""
    rng = np.random.default_rng(seed)
    pred, true, systems, sets = [], [], [], []
    for name, k in counts.items():
        for i in range(2 * k):
            q = 1 + (i // 2) * 0.3
            true.append(q + rng.normal(0, 0.2))
            pred.append(q + rng.normal(0, 0.5))
            systems.append(f"{name}-s{i // 2}")
            sets.append(name)
    return pred, true, systems, sets


def test_intervals_exist_only_with_enough_points():
    results = metrics.evaluate_sets(*sets_of_systems({"t2": 2, "t5": 5, "t8": 8}), bootstrap=200)
    ci = {name: results[name]["ci"]["sys"] for name in ("t2", "t5", "t8")}
    # Two systems: no SRCC, so no interval (the old zero-width [-1, -1]); RMSE has one.
    assert math.isnan(results["t2"]["sys"]["srcc"]) and ci["t2"]["srcc"] is None
    assert ci["t2"]["rmse"] is not None and ci["t2"]["rmse"][0] < ci["t2"]["rmse"][1]
    # Five systems: SRCC defined, but too few points for an interval; eight: both.
    assert metrics.defined(results["t5"]["sys"]["srcc"]) and ci["t5"]["srcc"] is None
    assert ci["t8"]["srcc"] is not None
    # The average is over t5 and t8 (13 systems): its interval exists.
    assert results["avg"]["averaged_over"]["sys"]["srcc"] == ["t5", "t8"]
    assert results["avg"]["ci"]["sys"]["srcc"] is not None
    # One clip: no interval even for RMSE.
    single = metrics.evaluate_sets([1.0], [2.0], ["a"], ["t"], bootstrap=50)
    assert single["t"]["ci"]["utt"]["rmse"] is None and single["t"]["utt"]["rmse"] == 1.0


def test_an_average_interval_counts_the_points_of_the_sets_its_metric_is_averaged_over():
    # 8 systems in all, but the SRCC average rests on t6's 6 (t2's SRCC is undefined): no interval;
    # the RMSE average rests on all 8: an interval.
    results = metrics.evaluate_sets(*sets_of_systems({"t2": 2, "t6": 6}), bootstrap=100)
    assert results["avg"]["sys"]["n"] == 8 and results["avg"]["averaged_over"]["sys"]["srcc"] == ["t6"]
    assert results["avg"]["ci"]["sys"]["srcc"] is None
    assert results["avg"]["ci"]["sys"]["rmse"] is not None


def test_a_metric_undefined_on_the_set_has_no_interval_though_resamples_without_its_cause_define_it():
    pred, true, systems, sets = sets_of_systems({"t": 12})
    pred[0] = math.nan  # resamples that leave clip 0 out are finite
    block = metrics.evaluate_sets(pred, true, systems, sets, bootstrap=100)["t"]
    assert block["undefined"]["utt"]["rmse"] == "some predictions or labels are not finite"
    assert block["ci"]["utt"]["rmse"] is None and block["ci"]["utt"]["srcc"] is None


def test_the_default_bootstrap_seed_is_0():
    data = sets_of_systems({"t": 9})
    assert metrics.evaluate_sets(*data, bootstrap=50) == metrics.evaluate_sets(*data, bootstrap=50, seed=0)
    assert metrics.evaluate_sets(*data, bootstrap=50) != metrics.evaluate_sets(*data, bootstrap=50, seed=1)


def test_integer_scores_give_the_metrics_of_their_float_values():
    # Small unsigned integers (a 0-100 scale read as uint8) must not wrap around when subtracted.
    # Errors of 16 or more: their squares differ from the wrapped ones.
    pred = np.array([10, 40, 35, 90, 60, 20], dtype=np.uint8)
    true = np.array([90, 30, 50, 60, 95, 10], dtype=np.uint8)
    expected = metrics.correlations(pred.astype(float), true.astype(float))
    assert metrics.correlations(pred, true) == pytest.approx(expected)
    assert metrics.pair_acc(pred, true) == pytest.approx(expected["pair_acc"])
    systems = ["a", "a", "b", "b", "c", "c"]
    got = metrics.evaluate(pred, true, systems)
    assert got["utt"] == pytest.approx(
        metrics.evaluate(pred.astype(float), true.astype(float), systems)["utt"]
    )
    idx = np.array([[0, 1, 2, 3, 4, 5], [5, 4, 3, 3, 0, 1]])
    resampled = metrics.resampled_metrics(pred, true, idx)
    for r, row in enumerate(idx):
        by_hand = metrics.correlations(pred[row].astype(float), true[row].astype(float))
        assert {k: v[r] for k, v in resampled.items()} == pytest.approx({k: by_hand[k] for k in resampled})


def test_only_the_named_metrics_are_resampled_each_alone():
    pred, true = np.array([1.0, 2.0, 4.0, 3.0]), np.array([1.5, 2.5, 3.0, 3.5])
    idx = np.array([[0, 1, 2, 3], [3, 3, 1, 0]])
    full = metrics.resampled_metrics(pred, true, idx)
    for name in metrics.METRIC_NAMES:
        alone = metrics.resampled_metrics(pred, true, idx, names=(name,))
        assert list(alone) == [name] and alone[name] == pytest.approx(full[name])
    draws = metrics.bootstrap_metrics(
        pred, true, ["a", "b", "c", "d"], np.random.default_rng(0), 5, ("rmse",)
    )
    assert set(draws["utt"]) == set(draws["sys"]) == {"rmse", "n"}


def test_mismatched_lengths_and_shapes_are_errors_naming_them():
    with pytest.raises(ValueError, match=r"1-D of equal length, got \(3,\) and \(4,\)"):
        metrics.correlations(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match=r"got \(2, 2\) and \(2, 2\)"):
        metrics.correlations(np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(ValueError):
        metrics.system_means([1.0, 2.0], [1.0, 2.0, 3.0], ["a", "b", "c"])


def test_undefined_reasons_name_the_unit_and_the_cause():
    one = metrics.undefined_reasons(np.array([1.0]), np.array([2.0]))
    assert one["srcc"] == "1 point (needs at least 3)" and "rmse" not in one
    inf = metrics.undefined_reasons(np.array([1.0, np.inf, 2.0]), np.array([1.0, 2.0, 3.0]), "clip")
    assert inf == dict.fromkeys(metrics.METRIC_NAMES, "some predictions or labels are not finite")
    # No pair untied in the labels: no accuracy (not a division by zero).
    assert math.isnan(metrics.pair_acc(np.array([1.0, 2.0, 3.0]), np.array([3.0, 3.0, 3.0])))


def test_average_interval_resamples_the_sets_its_value_averages():
    # t1 has one system: the system-level SRCC average is t1-free, so its resamples are t9's alone.
    results = metrics.evaluate_sets(*sets_of_systems({"t1": 1, "t9": 9}), bootstrap=300, seed=2)
    assert results["avg"]["sys"]["srcc"] == pytest.approx(results["t9"]["sys"]["srcc"])
    assert results["avg"]["ci"]["sys"]["srcc"] == pytest.approx(results["t9"]["ci"]["sys"]["srcc"])


def test_metrics_json_is_strict_and_tables_alike_after_reading_back(tmp_path):
    results = metrics.evaluate_sets(*sets_of_systems({"t1": 1, "t2": 2, "t9": 9}), bootstrap=100)
    artefacts.write_metrics(tmp_path, results)
    path = tmp_path / "metrics.json"
    text = path.read_text()
    assert "NaN" not in text and "Infinity" not in text

    def refuse(constant):
        raise AssertionError(f"bare {constant} in metrics.json")

    loaded = json.loads(text, parse_constant=refuse)
    assert loaded["t1"]["sys"]["srcc"] is None and loaded["t2"]["ci"]["sys"]["srcc"] is None
    assert loaded["t2"]["undefined"]["sys"]["srcc"] == "2 systems (needs at least 3)"
    assert tables.format_table(loaded) == tables.format_table(results)
    with pytest.raises(ValueError):
        json.dumps({"x": math.nan}, allow_nan=False)
    assert json_text({"x": np.float32("nan"), "y": [np.inf, np.int64(3)]}, indent=None) == (
        '{"x": null, "y": [null, 3]}'
    )


def test_table_prints_n_a_with_reasons_and_partial_averages():
    results = metrics.evaluate_sets(*sets_of_systems({"t1": 1, "t2": 2, "t9": 9}), bootstrap=100)
    table = tables.format_table(results)
    lines = table.splitlines()
    srcc_row = next(line for line in lines if line.startswith("sys    srcc"))
    cells = srcc_row.split(maxsplit=2)[2]
    assert cells.startswith("n/a/n/a|")
    # t9's value has its interval; the average (over t9 only) too.
    assert cells.count("[") == 2
    assert "n/a: t1 sys lcc, srcc, ktau: 1 system (needs at least 3)" in lines
    assert "n/a: t1 sys pair_acc: 1 system (needs at least 2)" in lines
    assert "n/a: t2 sys lcc, srcc, ktau: 2 systems (needs at least 3)" in lines
    assert "Avg sys lcc, srcc, ktau: over t9 only" in lines
    assert "Avg sys pair_acc: over t2, t9 only" in lines
    rmse_row = next(line for line in lines if line.startswith("sys    rmse"))
    assert "n/a" not in rmse_row and rmse_row.count("[") == 3  # t1 (1 system) has no interval


@pytest.mark.slow
def test_a_run_with_a_one_system_test_set_writes_strict_json_and_averages_the_rest(tmp_path):
    """End to end: test set `solo` has one system; metrics.json is strict, the avg is not NaN."""
    import soundfile as sf
    from hydra import compose, initialize_config_dir

    from sqa.training.run import run

    from .conftest import REPO

    rng = np.random.default_rng(0)
    rows = ["wav_path,score,system_id,sample_id,split,test_set"]
    layout = [("train", "", 4, 3), ("valid", "", 3, 2), ("test", "multi", 4, 2), ("test", "solo", 1, 3)]
    for split, test_set, n_systems, per_system in layout:
        for s in range(n_systems):
            for k in range(per_system):
                name = f"{split}{test_set}-s{s}-{k}"
                sf.write(tmp_path / f"{name}.wav", 0.1 * rng.standard_normal(4000), 16000)
                score = 1 + s + 0.5 * k if test_set != "solo" else 2 + k
                rows.append(f"{name}.wav,{score},{test_set or split}-s{s},{name},{split},{test_set}")
    (tmp_path / "corpus.csv").write_text("\n".join(rows) + "\n")
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "data=csv",
                f"data.corpus.path={tmp_path / 'corpus.csv'}",
                "data.num_workers=0",
                "trainer.max_steps=2",
                "trainer.val_check_interval=1",
                "trainer.log_every_n_steps=1",
                "trainer.enable_progress_bar=false",
                "bootstrap=50",
            ],
        )
    results = run(cfg, tmp_path / "run").test
    text = (tmp_path / "run" / "metrics.json").read_text()
    saved = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in metrics.json"))
    assert saved["solo"]["sys"]["srcc"] is None and saved["solo"]["ci"]["sys"]["srcc"] is None
    assert saved["solo"]["undefined"]["sys"]["srcc"] == "1 system (needs at least 3)"
    assert saved["avg"]["averaged_over"]["sys"]["srcc"] == ["multi"]
    assert saved["avg"]["sys"]["srcc"] == pytest.approx(results["multi"]["sys"]["srcc"])
    # The printed table goes through logging into the run's train.log.
    log_text = (tmp_path / "run" / "train.log").read_text()
    assert "n/a: solo sys lcc, srcc, ktau: 1 system (needs at least 3)" in log_text
    assert json.loads((tmp_path / "run" / "export" / "metrics.json").read_text()) == saved
    # Undefined values are not logged (no NaN series); defined ones are.
    (logged,) = (tmp_path / "run").glob("logs/version_*/metrics.csv")
    columns = logged.read_text().splitlines()[0].split(",")
    assert "test/solo/sys_rmse" in columns and "test/multi/sys_srcc" in columns
    assert "test/solo/sys_srcc" not in columns


def test_intervals_are_the_2_5_and_97_5_percentiles_of_the_resampled_statistics(monkeypatch):
    # The resamples are recorded as drawn; the statistics of each are recomputed with scipy and
    # the interval with numpy's percentiles at the stated 95 % level.
    from scipy import stats

    drawn: dict[int, np.ndarray] = {}
    real = metrics.bootstrap_indices

    def recording(rng, n, resamples):
        drawn[n] = real(rng, n, resamples)
        return drawn[n]

    monkeypatch.setattr(metrics, "bootstrap_indices", recording)
    rng = np.random.default_rng(4)
    sizes = {"t1": (40, 8), "t2": (66, 11)}  # (clips, systems): four distinct resample sizes
    pred, true, systems, sets = [], [], [], []
    for name, (n, k) in sizes.items():
        t = rng.uniform(1, 5, n)
        pred += list(t + rng.normal(0, 0.8, n))
        true += list(t)
        systems += [f"{name}-s{i % k:02d}" for i in range(n)]
        sets += [name] * n
    results = metrics.evaluate_sets(pred, true, systems, sets, bootstrap=300, seed=5)
    assert sorted(drawn) == sorted(v for pair in sizes.values() for v in pair)

    def reference(p, t, idx):
        return {
            "rmse": np.sqrt(np.mean((p[idx] - t[idx]) ** 2, axis=1)),
            "lcc": np.array([stats.pearsonr(p[i], t[i])[0] for i in idx]),
            "srcc": np.array([stats.spearmanr(p[i], t[i])[0] for i in idx]),
        }

    per_set = {}
    for name, (n, k) in sizes.items():
        rows = [i for i, s in enumerate(sets) if s == name]
        p, t = np.array(pred)[rows], np.array(true)[rows]
        ids = [systems[i] for i in rows]
        names = sorted(set(ids))
        sys_p = np.array([np.mean([p[j] for j in range(n) if ids[j] == s]) for s in names])
        sys_t = np.array([np.mean([t[j] for j in range(n) if ids[j] == s]) for s in names])
        per_set[name] = {"utt": reference(p, t, drawn[n]), "sys": reference(sys_p, sys_t, drawn[k])}
        for level in ("utt", "sys"):
            for key, values in per_set[name][level].items():
                expected = np.percentile(values[~np.isnan(values)], [2.5, 97.5])
                np.testing.assert_allclose(results[name]["ci"][level][key], expected, rtol=1e-9)
    # The average's interval: percentiles of the per-resample weighted averages.
    for level, weight in (("utt", 0), ("sys", 1)):
        total = sum(v[weight] for v in sizes.values())
        for key in ("rmse", "lcc", "srcc"):
            averaged = sum(per_set[s][level][key] * sizes[s][weight] for s in sizes) / total
            expected = np.percentile(averaged[~np.isnan(averaged)], [2.5, 97.5])
            np.testing.assert_allclose(results["avg"]["ci"][level][key], expected, rtol=1e-9)


def test_row_pearson_matches_scipy_including_constant_rows():
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=(50, 30)), rng.normal(size=(50, 30))
    a[4], b[7] = 2.5, -1.0
    with pytest.warns(stats.ConstantInputWarning):
        expected = stats.pearsonr(a, b, axis=1).statistic
    got = resampling.row_pearson(a, b)
    assert np.isnan(got[[4, 7]]).all()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15, equal_nan=True)
    # A constant row whose mean rounds (ten times 0.3 averages to 0.3 + 5.6e-17): its centred
    # values are not exactly 0, yet its correlation is undefined, not ±1.
    c = rng.normal(size=(2, 10))
    c[0] = 0.3
    assert (c[0] - c[0].mean()).any()
    other = rng.normal(size=(2, 10))
    for got in (resampling.row_pearson(c, other), resampling.row_pearson(other, c)):
        assert math.isnan(got[0]) and not math.isnan(got[1])
    # Constant rows are expected in bootstrap resamples: no warning for them.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(resampling.row_pearson(np.ones((1, 5)), rng.normal(size=(1, 5)))).all()


def test_paper_layout_joins_sets_and_average():
    assert tables.paper_layout(["a", "b", "c", "avg"]) == "a/b|c|avg"
    assert tables.paper_layout(["a", "avg"]) == "a|avg"


def test_one_value_has_a_point_interval_and_one_untied_pair_an_accuracy():
    assert resampling.interval(np.array([0.3, math.nan])) == [0.3, 0.3]
    # Two clips with distinct labels form one untied pair: ordered alike 1, reversed 0.
    pred, true = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    tau, acc = resampling.pair_stats(pred, true, np.array([[0, 1], [1, 0], [0, 0]]))
    np.testing.assert_array_equal(acc[:2], [1.0, 1.0])
    np.testing.assert_array_equal(tau[:2], [1.0, 1.0])
    assert math.isnan(acc[2]) and math.isnan(tau[2])
    _, reversed_acc = resampling.pair_stats(-pred, true, np.array([[0, 1]]))
    assert reversed_acc[0] == 0.0
