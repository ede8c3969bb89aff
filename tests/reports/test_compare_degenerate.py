"""sqa-compare where a number would mean nothing: no seed spread, an average of one set, a single pair."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from sqa.reports import compare
from sqa.reports.significance import welch
from tests.reports.test_compare import write_predictions
from tests.reports.test_compare_seeds import offset_runs

RNG_DIFFS = np.random.default_rng(4).normal(0.1, 0.05, 500)


def test_a_side_without_spread_shows_no_df_and_keeps_welchs_interval_from_the_other_side():
    flat, spread = [0.7, 0.7, 0.7], [0.80, 0.82, 0.81, 0.85]
    r = welch(0.12, flat, spread, RNG_DIFFS)
    var = np.var(spread, ddof=1) / 4 + np.var(RNG_DIFFS, ddof=1)
    # Welch–Satterthwaite with A's variance of 0 exact: (var)² / (s_B⁴ / 3), hundreds of degrees.
    df = var**2 / ((np.var(spread, ddof=1) / 4) ** 2 / 3)
    assert df > 100
    assert r["df"] is None and r["se"] == pytest.approx(math.sqrt(var))
    assert r["df_undefined"] == (
        "A's 3 runs all score 0.700: no seed-to-seed spread there, taken as exact, so Welch's degrees of "
        "freedom follow the other side's runs alone (the interval and p use them; a normal interval "
        "where they are many)"
    )
    half = stats.t.ppf(0.975, df) * math.sqrt(var)
    assert r["ci"] == pytest.approx([0.12 - half, 0.12 + half])
    assert r["p"] == pytest.approx(2 * stats.t.sf(0.12 / math.sqrt(var), df))
    # No spread on either side: a normal interval.
    both = welch(0.12, flat, [0.8, 0.8, 0.8], RNG_DIFFS)
    assert both["df_undefined"].endswith(
        "follow no side (the interval and p use them; a normal interval where they are many)"
    )
    sd = math.sqrt(np.var(RNG_DIFFS, ddof=1))
    assert both["ci"] == pytest.approx([0.12 - stats.norm.ppf(0.975) * sd, 0.12 + stats.norm.ppf(0.975) * sd])
    # Values equal but for float rounding have no spread either; both sides are named.
    r = welch(0.12, [0.7, 0.7 + 1e-16, 0.7], [0.8, 0.8], RNG_DIFFS)
    assert r["df"] is None and r["df_undefined"].startswith("A's 3 runs all score 0.700 and B's 2 runs")


def test_a_side_with_spread_keeps_welch_satterthwaite():
    a, b = [0.69, 0.70, 0.71], [0.80, 0.82, 0.81, 0.85]
    r = welch(0.12, a, b, RNG_DIFFS)
    parts = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 4
    var = sum(parts) + np.var(RNG_DIFFS, ddof=1)
    assert r["df"] == pytest.approx(var**2 / (parts[0] ** 2 / 2 + parts[1] ** 2 / 3))
    assert "df_undefined" not in r


def test_the_table_says_df_n_a_and_why_where_a_side_has_no_spread(tmp_path, capsys):
    # RMSE of each run is its offset on every resample: A's runs all score 1.0.
    a, b = offset_runs(tmp_path, "a", [1.0, 1.0]), offset_runs(tmp_path, "b", [0.25, 0.5, 0.25])
    out = tmp_path / "c.json"
    args = [*map(str, a), "--", *map(str, b), "--metric", "rmse", "--resamples", "20", "--json", str(out)]
    assert compare.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    row = next(line for line in lines if line.startswith("t        utt"))
    assert row.split()[8:11] == ["n/a", f"{math.sqrt((1 / 48) / 3):.3f}", "0.000"]
    assert lines[-1] == compare.DF_NOTE
    r = json.loads(out.read_text())["results"]["t"]["utt"]
    assert r["df"] is None and r["df_undefined"].startswith("A's 2 runs all score 1.000")
    # With spread on both sides: a number of degrees of freedom, and no note.
    a = offset_runs(tmp_path, "a", [1.0, 1.5])
    assert compare.main([*map(str, a), "--", *map(str, b), "--metric", "rmse", "--resamples", "20"]) == 0
    out = capsys.readouterr().out
    assert compare.DF_NOTE not in out and " n/a " not in out


def sets_beside_a_reference(test_sets: int) -> tuple[list[float], list[float], list[str], list[str]]:
    """True scores, systems and sets: `test_sets` sets of 8 systems, and a listening test's reference."""
    rng = np.random.default_rng(7)
    systems, sets = [], []
    for k in range(test_sets):
        systems += [f"t{k}s{i}" for i in range(8) for _ in range(3)]
        sets += [f"test{k + 1}"] * 24
    systems += ["ref"] * 3
    sets += ["reference"] * 3
    true = list(rng.uniform(1, 5, len(sets)))
    return true, systems, sets, [t + rng.normal(0, 0.5) for t in true]


@pytest.mark.parametrize(("test_sets", "avg_rows"), [(1, 0), (2, 2)])
def test_the_average_is_printed_only_where_it_averages_several_sets(test_sets, avg_rows):
    true, systems, sets, pred = sets_beside_a_reference(test_sets)
    result = compare.compare(true, pred, true, systems, sets, resamples=20)
    lines = compare.format_comparison(result, "srcc").splitlines()
    assert len([line for line in lines if line.startswith("avg ")]) == avg_rows
    # The reference's rows are there, under a column as wide as its name.
    assert lines[0].startswith("set       level") and any(line.startswith("reference utt") for line in lines)
    # In the result either way, as in metrics.json.
    assert set(result) == {*(f"test{k + 1}" for k in range(test_sets)), "reference", "avg"}


def test_an_average_over_one_defined_set_leaves_out_that_level_only():
    # Two sets; at system level the second has two systems (srcc needs 3): the average of that
    # level is the first set alone, and is not printed; the utterance level averages both.
    true = [1.0, 2.0, 3.0, 4.0, 5.0, 2.0, 3.0, 4.0, 1.5, 2.5, 3.5, 4.5, 2.2, 4.1]
    systems = ["a", "b", "c", "d", "e", "a", "b", "c", "x", "x", "x", "y", "y", "y"]
    sets = ["t1"] * 8 + ["t2"] * 6
    pred = [t + 0.3 * math.sin(i) for i, t in enumerate(true)]
    result = compare.compare(true, pred, true, systems, sets, resamples=20)
    assert result["avg"]["sys"]["averaged_over"] == ["t1"]
    rows = [line.split()[:2] for line in compare.format_comparison(result, "srcc").splitlines()[1:]]
    assert ["avg", "utt"] in rows and ["avg", "sys"] not in rows


@pytest.mark.parametrize(
    ("true", "pairs"),
    [
        ([1.0, 2.0], 1),  # two clips: one pair
        ([1.0, 1.0, 2.0], 2),  # three clips, two tied: two pairs
        ([1.0, 2.0, 3.0], 3),
    ],
)
def test_pair_acc_needs_two_pairs_of_different_true_scores(true, pairs):
    systems = [f"s{i}" for i in range(len(true))]
    pred_a = [t + 1.0 if i == 0 else t for i, t in enumerate(true)]
    result = compare.compare(pred_a, list(true), list(true), systems, ["reference"] * len(true), "pair_acc")
    r = result["reference"]["utt"]
    if pairs < compare.MIN_PAIRS:
        assert r["undefined"] == "A: 1 pair of clips with different true scores (needs at least 2)"
        assert math.isnan(r["a"]) and math.isnan(r["b"]) and math.isnan(r["diff"])
        line = compare.format_comparison(result, "pair_acc").splitlines()[1]
        assert line.split()[2:5] == ["n/a", "n/a", "n/a"]
    else:
        assert "undefined" not in r and r["b"] == 1.0 and 0.0 <= r["a"] < 1.0


def test_a_single_pair_is_null_in_the_json(tmp_path):
    true, systems, sets = (
        [4.8, 4.9, 1.0, 2.0, 3.0],
        ["r", "r2", "s1", "s2", "s3"],
        ["reference"] * 2 + ["t"] * 3,
    )
    a = write_predictions(tmp_path / "a.csv", [4.0, 3.0, 1.0, 2.0, 3.0], true, systems, sets)
    b = write_predictions(tmp_path / "b.csv", [4.0, 5.0, 1.0, 3.0, 2.0], true, systems, sets)
    out = tmp_path / "c.json"
    assert (
        compare.main([str(a), str(b), "--metric", "pair_acc", "--resamples", "10", "--json", str(out)]) == 0
    )
    reference = json.loads(out.read_text())["results"]["reference"]
    for level, unit in (("utt", "clips"), ("sys", "systems")):
        entry = reference[level]
        assert entry["a"] is None and entry["b"] is None and entry["diff"] is None
        assert entry["undefined"] == f"A: 1 pair of {unit} with different true scores (needs at least 2)"
