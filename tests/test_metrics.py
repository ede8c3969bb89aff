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
    monkeypatch.setattr(metrics, "PAIR_BLOCK", 450)
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
    monkeypatch.setattr(metrics, "PAIR_BLOCK", 1000)  # several column blocks
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
    # Two systems: many system-level resamples draw one system twice (SRCC undefined).
    results = metrics.evaluate_sets(
        [1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 4.0, 3.0], ["a", "a", "b", "b"], ["t"] * 4, 200
    )
    lo, hi = results["t"]["ci"]["sys"]["srcc"]
    assert lo == hi == 1.0
    one = metrics.evaluate_sets([1.0, 2.0], [3.0, 3.0], ["a", "b"], ["t"] * 2, 50)
    assert all(math.isnan(v) for v in one["t"]["ci"]["utt"]["srcc"])


def test_table_prints_intervals_when_present():
    results = metrics.evaluate_sets(*simulated_sets(90), bootstrap=100)
    table = metrics.format_table(results)
    row = next(line for line in table.splitlines() if line.startswith("utt    srcc"))
    lo, hi = results["test1"]["ci"]["utt"]["srcc"]
    assert row.split(maxsplit=2)[2].startswith(f"{results['test1']['utt']['srcc']:.3f} [{lo:.2f}, {hi:.2f}]/")
    assert row.count("[") == 4 and row.count("|") == 2
    assert any(line.startswith("sys    pair_acc") for line in table.splitlines())


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
