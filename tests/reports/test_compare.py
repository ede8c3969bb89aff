import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from sqa import metrics
from sqa.core.atomic import json_text
from sqa.reports import compare
from tests.conftest import REPO


def write_predictions(path, pred, true, systems, sets, ids=None):
    ids = ids or [f"utt{i:04d}" for i in range(len(pred))]
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["sample_id", "system_id", "test_set", "mos", "pred"])
        for row in zip(ids, systems, sets, true, pred, strict=True):
            writer.writerow([*row[:3], repr(float(row[3])), repr(float(row[4]))])
    return path


@pytest.fixture
def corpus():
    rng = np.random.default_rng(0)
    n = 600
    systems = [f"sys{i % 30:02d}" for i in range(n)]
    quality = {s: rng.uniform(1.5, 4.5) for s in sorted(set(systems))}
    true = np.array([quality[s] for s in systems]) + rng.normal(0, 0.4, n)
    sets = [f"test{i % 2 + 1}" for i in range(n)]
    return rng, true, systems, sets


def test_identical_predictions_differ_by_zero_and_not_significantly(corpus, tmp_path, capsys):
    rng, true, systems, sets = corpus
    pred = true + rng.normal(0, 0.8, len(true))
    a = write_predictions(tmp_path / "a.csv", pred, true, systems, sets)
    b = write_predictions(tmp_path / "b.csv", pred, true, systems, sets)
    out = tmp_path / "cmp.json"
    assert compare.main([str(a), str(b), "--resamples", "200", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["metric"] == "srcc" and list(result["results"]) == ["test1", "test2", "avg"]
    for block in result["results"].values():
        for r in block.values():
            assert r["diff"] == 0.0 and r["ci"] == [0.0, 0.0] and r["p"] == 1.0
            assert not r["significant"]
    assert "significant" not in capsys.readouterr().out


def test_clearly_better_run_is_significantly_better(corpus, tmp_path, capsys):
    rng, true, systems, sets = corpus
    a = write_predictions(tmp_path / "a.csv", true + rng.normal(0, 1.5, len(true)), true, systems, sets)
    b = write_predictions(tmp_path / "b.csv", true + rng.normal(0, 0.2, len(true)), true, systems, sets)
    runs = compare.align([a, b])
    pred_a, pred_b = runs["preds"]
    result = compare.compare(pred_a, pred_b, runs["mos"], runs["system_id"], runs["test_set"], resamples=300)
    for name in ("test1", "test2", "avg"):
        r = result[name]["utt"]
        assert r["diff"] > 0.2 and r["ci"][0] > 0 and r["p"] < 0.01 and r["significant"]
        assert r["ci"][0] <= r["diff"] <= r["ci"][1]
    assert result["avg"]["sys"]["significant"] and result["avg"]["sys"]["diff"] > 0
    # The observed values are those metrics.json reports.
    expected = metrics.evaluate_sets(pred_b, runs["mos"], runs["system_id"], runs["test_set"])
    assert result["avg"]["sys"]["b"] == pytest.approx(expected["avg"]["sys"]["srcc"])
    # Lower RMSE is better: B is still the better run.
    assert compare.main([str(a), str(b), "--metric", "rmse", "--resamples", "100"]) == 0
    out = capsys.readouterr().out.splitlines()
    # The sides by name, and the metric's direction said.
    assert out[0].startswith("rmse (lower is better): B - A over 100 paired resamples")
    assert out[1:3] == [f"A = a.csv: {a}", f"B = b.csv: {b}"]
    assert next(line for line in out if line.startswith("set")).split()[2:4] == ["a.csv", "b.csv"]
    utt_avg = next(line for line in out if line.startswith("avg      utt"))
    assert "significant (b.csv better)" in utt_avg


def test_the_sides_are_named_by_what_their_paths_do_not_share():
    assert compare.side_names(["runs/ssl/0", "runs/ssl/1"], ["runs/midi/0", "runs/midi/1"]) == ("ssl", "midi")
    assert compare.side_names(["runs/ssl/0"], ["runs/midi/0"]) == ("ssl/0", "midi/0")
    assert compare.side_names(["x/0"], ["x/0"]) == ("A", "B")  # the same run twice: no name tells them apart
    assert compare.side_names(["x"], ["x/y"]) == ("A", "B")  # one side's folder holds the other's
    assert compare.direction("srcc") == "higher is better" and compare.direction("mse") == "lower is better"


def test_mismatched_clips_are_an_error_naming_the_file_and_sample(corpus, tmp_path, capsys):
    rng, true, systems, sets = corpus
    pred = true + rng.normal(0, 0.5, len(true))
    a = write_predictions(tmp_path / "a.csv", pred, true, systems, sets)
    b = write_predictions(tmp_path / "b.csv", pred[:-1], true[:-1], systems[:-1], sets[:-1])
    assert compare.main([str(a), str(b)]) == 1
    err = capsys.readouterr().err
    assert str(b) in err and "utt0599" in err
    shifted = true.copy()
    shifted[5] += 0.5
    c = write_predictions(tmp_path / "c.csv", pred, shifted, systems, sets)
    with pytest.raises(ValueError, match=r"c\.csv.*'utt0005'.*true MOS"):
        compare.align([a, c])


def test_runs_as_a_module(corpus, tmp_path):
    rng, true, systems, sets = corpus
    a = write_predictions(tmp_path / "a.csv", true + rng.normal(0, 1, len(true)), true, systems, sets)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sqa.reports.compare",
            str(a),
            str(a),
            "--resamples",
            "50",
            "--metric",
            "pair_acc",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.startswith("pair_acc (higher is better): B - A over 50 paired resamples (seed 0)")


def test_a_set_where_the_metric_is_undefined_is_left_out_of_the_average(corpus, tmp_path, capsys):
    rng, true, systems, sets = corpus
    true, systems, sets = list(true), list(systems), list(sets)
    # A third test set with a single system: no system-level SRCC for either run.
    true += [3.0, 3.5]
    systems += ["solo", "solo"]
    sets += ["test3", "test3"]
    pred_a = np.array(true) + rng.normal(0, 1.0, len(true))
    pred_b = np.array(true) + rng.normal(0, 0.3, len(true))
    a = write_predictions(tmp_path / "a.csv", pred_a, true, systems, sets)
    b = write_predictions(tmp_path / "b.csv", pred_b, true, systems, sets)
    out = tmp_path / "cmp.json"
    assert compare.main([str(a), str(b), "--resamples", "100", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text(), parse_constant=lambda c: pytest.fail(f"bare {c} in the JSON"))
    solo = result["results"]["test3"]["sys"]
    assert solo["undefined"] == "A: 1 system (needs at least 3)"
    assert solo["a"] is None and solo["diff"] is None and solo["ci"] is None and not solo["significant"]
    avg = result["results"]["avg"]["sys"]
    assert avg["averaged_over"] == ["test1", "test2"] and avg["diff"] is not None
    # The average's observed values are those of metrics.json, which leaves test3 out alike.
    expected_b = metrics.evaluate_sets(list(pred_b), true, systems, sets)["avg"]["sys"]["srcc"]
    assert avg["b"] == pytest.approx(expected_b)
    assert "test3    sys       n/a     n/a     n/a  undefined: A: 1 system (needs at least 3)" in printed
    assert "(over test1, test2)" in printed


def test_p_below_the_resolution_prints_as_a_bound(corpus, tmp_path, capsys):
    rng, true, systems, sets = corpus
    a = write_predictions(tmp_path / "a.csv", true + rng.normal(0, 1.5, len(true)), true, systems, sets)
    b = write_predictions(tmp_path / "b.csv", true + rng.normal(0, 0.1, len(true)), true, systems, sets)
    out = tmp_path / "cmp.json"
    assert compare.main([str(a), str(b), "--resamples", "200", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    utt = next(line for line in lines if line.startswith("avg      utt"))
    # No resample of 200 reverses the order: p is below 1/200, not 0.000.
    assert json.loads(out.read_text())["results"]["avg"]["utt"]["p"] == 0.0
    assert " <0.005 " in utt and "0.000 " not in utt.split("]")[1]
    entry = {"a": 0.5, "b": 0.6, "diff": 0.1, "ci": [0.01, 0.2], "p": 0.0, "significant": True}
    line = compare.format_comparison({"t": {"utt": {**entry, "resamples": 1000, "ties": 0}}}, "srcc")
    assert line.splitlines()[1].endswith(" <0.001   0 %  significant (B better)")


def test_too_few_points_give_a_difference_but_no_interval():
    # Five systems of two clips: system-level SRCC is defined, an interval is not (needs 8).
    true = [float(1 + i // 2) + 0.1 * (i % 2) for i in range(10)]
    systems = [f"s{i // 2}" for i in range(10)]
    pred_a = [t + (1.5 if i in (0, 1) else 0.0) for i, t in enumerate(true)]  # s0 above s1
    result = compare.compare(pred_a, true, true, systems, ["t"] * 10, resamples=100)
    sys_level = result["t"]["sys"]
    assert sys_level["a"] == pytest.approx(0.9) and sys_level["b"] == pytest.approx(1.0)
    assert sys_level["diff"] == pytest.approx(0.1) and sys_level["ci"] is None
    assert sys_level["no_interval"] == "5 systems (needs at least 8)" and not sys_level["significant"]
    assert result["t"]["utt"]["ci"] is not None  # ten clips: enough
    line = next(
        x for x in compare.format_comparison(result, "srcc").splitlines() if x.startswith("t        sys")
    )
    assert line.endswith("+0.100  no interval: 5 systems (needs at least 8)")


def test_p_is_two_sided_by_a_hand_count():
    # 2 of 10 resampled differences are <= 0, 8 are >= 0: p = 2 * min(2/10, 8/10) = 0.4.
    diffs = np.array([-0.2, -0.1, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8])
    assert compare.summarise(0.35, diffs)["p"] == pytest.approx(0.4)
    assert compare.summarise(-0.35, -diffs)["p"] == pytest.approx(0.4)
    # Balanced differences: 2 * 1/2 = 1 (and never above 1, although 0 counts on both sides).
    assert compare.summarise(0.0, np.array([-1.0, 0.0, 1.0]))["p"] == pytest.approx(1.0)


def test_p_and_interval_of_a_comparison_by_a_hand_count_over_the_drawn_resamples(drawn):
    rng = np.random.default_rng(2)
    n = 80
    true = rng.uniform(1, 5, n)
    # B is a little better than A: p lands strictly between 0 and 1.
    pred_a, pred_b = true + rng.normal(0, 1.6, n), true + rng.normal(0, 1.0, n)
    systems = [f"s{i % 10}" for i in range(n)]
    result = compare.compare(list(pred_a), list(pred_b), list(true), systems, ["t"] * n, resamples=400)
    utt_idx = next(idx for idx in drawn if idx.shape[1] == n)
    diffs = np.array(
        [stats.spearmanr(pred_b[i], true[i])[0] - stats.spearmanr(pred_a[i], true[i])[0] for i in utt_idx]
    )
    below, above = np.count_nonzero(diffs <= 0), np.count_nonzero(diffs >= 0)
    r = result["t"]["utt"]
    assert 0 < below < above
    assert r["p"] == pytest.approx(2 * below / len(diffs))
    np.testing.assert_allclose(r["ci"], np.percentile(diffs, [2.5, 97.5]), rtol=1e-9)
    assert r["significant"] == (r["ci"][0] > 0 or r["ci"][1] < 0)


def test_tied_resamples_are_counted_and_explained_beside_a_p_of_one():
    # 3 of 5 resampled differences are exactly 0: p = 2 * min(4/5, 4/5), capped at 1, although
    # the interval is not [0, 0].
    r = compare.summarise(-0.02, np.array([-0.2, 0.0, 0.0, 0.0, 0.1]))
    assert (r["p"], r["ties"], r["resamples"]) == (1.0, 3, 5) and r["ci"] != [0.0, 0.0]
    lines = compare.format_comparison({"t": {"sys": {"a": 0.9, "b": 0.88, **r}}}, "srcc").splitlines()
    assert lines[0].endswith("p  ties")
    assert lines[1].split()[-2:] == ["60", "%"] and lines[1].split()[-3] == "1.000"
    assert lines[-1] == compare.TIES_NOTE
    untied = compare.summarise(0.35, np.array([-0.2, -0.1, 0.1, 0.2, 0.3]))
    assert untied["ties"] == 0
    text = compare.format_comparison({"t": {"utt": {"a": 0.5, "b": 0.85, **untied}}}, "srcc")
    assert text.splitlines()[1].split()[-2:] == ["0", "%"] and compare.TIES_NOTE not in text


def test_few_systems_tie_in_many_resamples_and_the_output_says_why_p_is_high(tmp_path, capsys):
    # Ten systems that both runs rank almost alike: most resamples draw systems ranked the same.
    rng = np.random.default_rng(1)
    systems = [f"s{i % 10}" for i in range(100)]
    quality = {f"s{i}": rng.uniform(1, 5) for i in range(10)}
    true = np.array([quality[s] for s in systems]) + rng.normal(0, 0.3, 100)
    a = write_predictions(tmp_path / "a.csv", true + rng.normal(0, 0.8, 100), true, systems, ["t"] * 100)
    b = write_predictions(tmp_path / "b.csv", true + rng.normal(0, 0.8, 100), true, systems, ["t"] * 100)
    assert compare.main([str(a), str(b), "--json", str(tmp_path / "c.json")]) == 0
    result = json.loads((tmp_path / "c.json").read_text())["results"]["t"]["sys"]
    assert result["p"] == 1.0 and result["ci"][0] < 0 and result["ties"] > 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("t        sys"))
    assert row.split()[-2:] == [f"{100 * result['ties'] / result['resamples']:.0f}", "%"]
    assert compare.TIES_NOTE in out


def _by_hand(pred, true, systems, idx, level):
    """SRCC of every resample `idx` (R, m) at `level`, system means taken by hand in sorted order."""
    pred, true, systems = np.asarray(pred), np.asarray(true), np.asarray(systems)
    if level == "sys":
        names = sorted(set(systems))
        pred = np.array([pred[systems == s].mean() for s in names])
        true = np.array([true[systems == s].mean() for s in names])
    observed = stats.spearmanr(pred, true)[0]
    return observed, np.array([stats.spearmanr(pred[i], true[i])[0] for i in idx])


def _p(diffs):
    return min(1.0, 2 * min(np.mean(diffs <= 0), np.mean(diffs >= 0)))


def test_the_average_weights_each_set_by_its_clips_or_systems_by_hand(drawn):
    # t1: 30 clips of 10 systems, t2: 24 clips of 12 systems. The weights differ between the levels
    # (30:24 clips, 10:12 systems), so weighting a level by the other's counts changes every number.
    rng = np.random.default_rng(5)
    layout = {"t1": (10, 3), "t2": (12, 2)}
    systems, sets = [], []
    for name, (n_sys, per) in layout.items():
        systems += [f"{name}s{i}" for i in range(n_sys) for _ in range(per)]
        sets += [name] * (n_sys * per)
    quality = {s: rng.uniform(1, 5) for s in set(systems)}
    true = np.array([quality[s] for s in systems]) + rng.normal(0, 0.3, len(systems))
    pred_a = true + rng.normal(0, 1.2, len(true))
    pred_b = true + rng.normal(0, 0.7, len(true))
    result = compare.compare(list(pred_a), list(pred_b), list(true), systems, sets, resamples=200)
    # compare draws t1 utt, t1 sys, t2 utt, t2 sys.
    idx = iter(drawn)
    weights = {"utt": {"t1": 30, "t2": 24}, "sys": {"t1": 10, "t2": 12}}
    avg = {level: {"a": 0.0, "b": 0.0, "diffs": 0.0} for level in metrics.LEVELS}
    for name in layout:
        mask = np.array(sets) == name
        s = list(np.array(systems)[mask])
        for level in metrics.LEVELS:
            level_idx = next(idx)
            a, draws_a = _by_hand(pred_a[mask], true[mask], s, level_idx, level)
            b, draws_b = _by_hand(pred_b[mask], true[mask], s, level_idx, level)
            diffs = draws_b - draws_a
            r = result[name][level]
            assert (r["a"], r["b"]) == pytest.approx((a, b), rel=1e-12)
            assert r["diff"] == pytest.approx(b - a, rel=1e-12)
            np.testing.assert_allclose(r["ci"], np.percentile(diffs, [2.5, 97.5]), rtol=1e-9)
            assert r["p"] == pytest.approx(_p(diffs)) and r["resamples"] == 200
            w = weights[level][name] / sum(weights[level].values())
            for key, value in (("a", a), ("b", b), ("diffs", diffs)):
                avg[level][key] = avg[level][key] + w * value
    for level in metrics.LEVELS:
        r, expected = result["avg"][level], avg[level]
        assert (r["a"], r["b"]) == pytest.approx((expected["a"], expected["b"]), rel=1e-12)
        assert r["diff"] == pytest.approx(expected["b"] - expected["a"], rel=1e-12)
        np.testing.assert_allclose(r["ci"], np.percentile(expected["diffs"], [2.5, 97.5]), rtol=1e-9)
        assert r["p"] == pytest.approx(_p(expected["diffs"]))
        assert r["significant"] == (r["ci"][0] > 0 or r["ci"][1] < 0)
    # Every set is in the average: no entry lists the sets it is over.
    assert not any("averaged_over" in r for block in result.values() for r in block.values())


def test_a_set_undefined_for_one_run_only_is_left_out_of_both_runs_averages():
    # t3's run A predicts one value everywhere: its SRCC is undefined for A but defined for B, and
    # B's average must still leave t3 out, or A and B would be averaged over different sets.
    rng = np.random.default_rng(3)
    layout = {"t1": 6, "t2": 10, "t3": 3}
    systems = [f"{name}s{i}" for name, n in layout.items() for i in range(n) for _ in range(2)]
    sets = [name for name, n in layout.items() for _ in range(2 * n)]
    true = rng.uniform(1, 5, len(sets))
    pred_b = true + rng.normal(0, 0.5, len(true))
    pred_a = np.where(np.array(sets) == "t3", 3.0, true + rng.normal(0, 1.0, len(true)))
    result = compare.compare(list(pred_a), list(pred_b), list(true), systems, sets, resamples=50)
    assert result["t3"]["utt"]["undefined"] == "A: every clip has the same prediction"
    assert result["t3"]["sys"]["undefined"] == "A: every system has the same prediction"
    assert result["t3"]["sys"]["b"] == pytest.approx(
        _by_hand(pred_b[-6:], true[-6:], systems[-6:], [], "sys")[0]
    )
    for level, (w1, w2) in (("utt", (12, 20)), ("sys", (6, 10))):
        avg = result["avg"][level]
        for run in ("a", "b"):
            t1, t2 = (result[name][level][run] for name in ("t1", "t2"))
            assert avg[run] == pytest.approx((w1 * t1 + w2 * t2) / (w1 + w2), rel=1e-12)
        assert avg["averaged_over"] == ["t1", "t2"] and "averaged_over" not in result["t1"][level]


def test_the_average_leaves_out_the_reference_and_anchor_sets_as_metrics_json_does():
    # A listening test's hidden reference and anchors: rated, but not systems under test. A set
    # named "anchors" is an ordinary set, averaged like t1.
    rng = np.random.default_rng(11)
    layout = {"t1": 10, "anchors": 8, "reference": 6, "anchor": 8}
    systems = [f"{name}s{i}" for name, n in layout.items() for i in range(n) for _ in range(3)]
    sets = [name for name, n in layout.items() for _ in range(3 * n)]
    true = rng.uniform(1, 5, len(sets))
    roles = np.isin(sets, metrics.ROLES)
    # Their predictions are noise: averaged in, they would pull both sides' averages down.
    pred_a = np.where(roles, rng.uniform(1, 5, len(sets)), true + rng.normal(0, 1.0, len(true)))
    pred_b = np.where(roles, rng.uniform(1, 5, len(sets)), true + rng.normal(0, 0.5, len(true)))
    result = compare.compare(list(pred_a), list(pred_b), list(true), systems, sets, resamples=50)
    assert set(result) == {*layout, "avg"}
    for run, pred in (("a", pred_a), ("b", pred_b)):
        reference = metrics.evaluate_sets(list(pred), list(true), systems, sets, apart=metrics.ROLES)
        everything = metrics.evaluate_sets(list(pred), list(true), systems, sets)
        for level in metrics.LEVELS:
            expected = reference["avg"][level]["srcc"]
            assert result["avg"][level][run] == pytest.approx(expected, rel=1e-12)
            assert abs(everything["avg"][level]["srcc"] - expected) > 0.01
            for name in layout:
                assert result[name][level][run] == pytest.approx(reference[name][level]["srcc"], rel=1e-12)
    # Every set that can be averaged is: the average lists no subset.
    assert not any("averaged_over" in r for r in result["avg"].values())


def test_a_level_undefined_in_every_set_is_undefined_on_average(tmp_path, capsys):
    # Two systems per set: no system-level SRCC anywhere; the utterance level is defined.
    true = [1.0, 2.0, 3.0, 4.0, 2.0, 3.0, 4.0, 5.0]
    systems = ["x", "x", "y", "y", "u", "u", "v", "v"]
    sets = ["t1"] * 4 + ["t2"] * 4
    pred_b = [1.2, 1.9, 3.1, 4.2, 2.2, 2.9, 4.1, 4.8]
    a = write_predictions(tmp_path / "a.csv", true, true, systems, sets)
    b = write_predictions(tmp_path / "b.csv", pred_b, true, systems, sets)
    assert compare.main([str(a), str(b), "--resamples", "20", "--json", str(tmp_path / "c.json")]) == 0
    result = json.loads((tmp_path / "c.json").read_text())["results"]
    assert result["t1"]["sys"]["undefined"] == "A: 2 systems (needs at least 3)"
    assert result["avg"]["sys"]["undefined"] == "undefined in every set"
    assert "undefined" not in result["avg"]["utt"] and result["avg"]["utt"]["diff"] == 0.0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("avg      sys"))
    assert row.split()[2:] == ["n/a", "n/a", "n/a", "undefined:", "undefined", "in", "every", "set"]


def _systems_and_sets(layout, clips_per_system):
    systems = [f"{name}s{i}" for name, n in layout.items() for i in range(n) for _ in range(clips_per_system)]
    sets = [name for name, n in layout.items() for _ in range(n * clips_per_system)]
    return systems, sets


@pytest.mark.parametrize(
    ("metric", "few", "enough", "need"), [("srcc", 7, 8, 8), ("pair_acc", 7, 8, 8), ("rmse", 1, 2, 2)]
)
def test_an_interval_needs_enough_points_in_its_own_set(metric, few, enough, need):
    # Set f has one system too few for an interval, set e just enough; each clip count suffices.
    systems, sets = _systems_and_sets({"e": enough, "f": few}, 8)
    rng = np.random.default_rng(0)
    true = rng.uniform(1, 5, len(sets))
    pred_a, pred_b = true + rng.normal(0, 1, len(true)), true + rng.normal(0, 0.5, len(true))
    result = compare.compare(list(pred_a), list(pred_b), list(true), systems, sets, metric, resamples=30)
    unit = "system" if few == 1 else "systems"
    short = result["f"]["sys"]
    assert short["no_interval"] == f"{few} {unit} (needs at least {need})"
    assert short["ci"] is None and np.isnan(short["p"]) and not short["significant"]
    assert short["diff"] == pytest.approx(short["b"] - short["a"]) and not np.isnan(short["diff"])
    for name, level in (("e", "sys"), ("f", "utt"), ("avg", "sys")):
        entry = result[name][level]
        assert "no_interval" not in entry and entry["resamples"] == 30 and len(entry["ci"]) == 2


def test_rmse_over_two_clips_has_an_interval_and_over_one_has_none():
    result = compare.compare(
        [1.0, 2.0, 3.0],
        [1.5, 2.0, 3.0],
        [1.0, 2.0, 3.0],
        ["s", "s", "z"],
        ["p", "p", "q"],
        "rmse",
        resamples=40,
    )
    assert (
        result["p"]["utt"]["diff"] == pytest.approx(np.sqrt(0.125)) and result["p"]["utt"]["resamples"] == 40
    )
    assert result["q"]["utt"]["no_interval"] == "1 clip (needs at least 2)"
    assert result["q"]["utt"]["diff"] == 0.0


def test_a_set_with_too_few_points_still_prints_both_levels(capsys):
    # Six clips of three systems: neither level has an interval, and both rows are printed. The
    # average of one set would repeat it: it is in the result but not printed.
    true = [1.0, 1.2, 2.0, 2.2, 3.0, 3.3]
    systems = ["a", "a", "b", "b", "c", "c"]
    result = compare.compare(true, list(reversed(true)), true, systems, ["t"] * 6, resamples=20)
    lines = compare.format_comparison(result, "srcc").splitlines()
    assert [line.split()[:2] for line in lines[1:]] == [["t", "utt"], ["t", "sys"]]
    assert result["avg"]["utt"]["diff"] == result["t"]["utt"]["diff"]
    assert lines[1].endswith("-2.000  no interval: 6 clips (needs at least 8)")
    assert lines[2].endswith("-2.000  no interval: 3 systems (needs at least 8)")


def test_the_same_seed_gives_the_same_comparison_and_the_defaults_are_seed_0_and_1000_resamples():
    rng = np.random.default_rng(4)
    true = list(rng.uniform(1, 5, 40))
    pred_a, pred_b = list(np.array(true) + rng.normal(0, 1, 40)), list(np.array(true) + rng.normal(0, 1, 40))
    systems, sets = [f"s{i % 10}" for i in range(40)], ["t"] * 40
    default = compare.compare(pred_a, pred_b, true, systems, sets)
    assert default == compare.compare(pred_a, pred_b, true, systems, sets, seed=0, resamples=1000)
    assert default["t"]["utt"]["resamples"] == 1000
    other = compare.compare(pred_a, pred_b, true, systems, sets, seed=1, resamples=1000)
    assert other["t"]["utt"]["ci"] != default["t"]["utt"]["ci"]


def test_significance_excludes_an_interval_that_ends_at_zero():
    # The 2.5th percentile of 20 zeros and 380 ones is 0: the interval touches 0, not significant.
    touching = np.array([0.0] * 20 + [1.0] * 380)
    assert compare.summarise(0.9, touching)["ci"][0] == 0.0
    assert not compare.summarise(0.9, touching)["significant"]
    assert not compare.summarise(-0.9, -touching)["significant"]
    assert compare.summarise(0.9, touching + 1e-6)["significant"]
    assert compare.summarise(-0.9, -touching - 1e-6)["significant"]


def test_undefined_resamples_are_left_out_of_p_and_when_all_are_p_is_undefined():
    r = compare.summarise(0.5, np.array([np.nan, -1.0, 1.0, 2.0, 3.0]))
    assert (r["p"], r["resamples"], r["ties"]) == (pytest.approx(0.5), 4, 0)
    none = compare.summarise(0.5, np.array([np.nan, np.nan]))
    assert np.isnan(none["p"]) and none["resamples"] == 0 and not none["significant"]
    row = compare.format_comparison({"t": {"sys": {"a": 0.4, "b": 0.9, **none}}}, "srcc").splitlines()[1]
    assert row.split()[2:5] == ["0.400", "0.900", "+0.500"] and row.split()[-1] == "n/a"


def _entry(diff, ci, **extra):
    return {
        "a": 0.5,
        "b": 0.5 + diff,
        "diff": diff,
        "ci": ci,
        "p": 0.01,
        "significant": True,
        "resamples": 100,
        "ties": 0,
        **extra,
    }


@pytest.mark.parametrize(
    ("metric", "diff", "ci", "better"),
    [
        ("srcc", 0.1, [0.01, 0.2], "B"),
        ("srcc", -0.1, [-0.2, -0.01], "A"),
        # An observed difference of 0 beside an interval above 0: B's metric is the higher.
        ("srcc", 0.0, [0.01, 0.2], "B"),
        ("rmse", -0.1, [-0.2, -0.01], "B"),
        ("rmse", 0.1, [0.01, 0.2], "A"),
        ("rmse", 0.0, [0.01, 0.2], "A"),
    ],
)
def test_the_verdict_names_the_better_run_for_each_direction_of_metric(metric, diff, ci, better):
    text = compare.format_comparison({"t": {"utt": _entry(diff, ci)}}, metric)
    header, row = text.splitlines()
    assert header.split() == ["set", "level", "A", "B", "B-A", "95", "%", "interval", "p", "ties"]
    assert row.split()[:5] == ["t", "utt", "0.500", f"{0.5 + diff:.3f}", f"{diff:+.3f}"]
    assert f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" in row
    assert row.endswith(f"significant ({better} better)")


def test_a_significant_average_over_some_sets_says_both():
    entry = _entry(0.1, [0.01, 0.2], averaged_over=["t1", "t2"])
    sets = {name: {"sys": _entry(0.1, [0.01, 0.2])} for name in ("t1", "t2", "t3")}
    row = compare.format_comparison({**sets, "avg": {"sys": entry}}, "srcc").splitlines()[-1]
    assert row.startswith("avg") and row.endswith("significant (B better)  (over t1, t2)")
    undefined = {
        "a": 0.7,
        "b": np.nan,
        **compare.UNDEFINED_COMPARISON,
        "undefined": "B: 2 systems (needs at least 3)",
    }
    row = compare.format_comparison({"t": {"sys": undefined}}, "srcc").splitlines()[1]
    assert row.split() == [
        "t",
        "sys",
        "0.700",
        "n/a",
        "n/a",
        "undefined:",
        "B:",
        "2",
        "systems",
        "(needs",
        "at",
        "least",
        "3)",
    ]


def test_a_single_tied_resample_brings_the_note_below_the_table():
    r = compare.summarise(0.1, np.array([-0.1, 0.0, 0.1, 0.2, 0.3]))
    lines = compare.format_comparison({"t": {"utt": {"a": 0.5, "b": 0.6, **r}}}, "srcc").splitlines()
    assert r["ties"] == 1 and lines[1].split()[-2:] == ["20", "%"]
    assert lines[2:] == ["", compare.TIES_NOTE]


def _rows(path, rows):
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["sample_id", "system_id", "test_set", "mos", "pred"])
        writer.writerows(rows)
    return path


ROWS = [("u1", "s1", "t1", "1.0", "1.5"), ("u2", "s2", "t1", "2.0", "2.5"), ("u1", "s1", "t2", "3.0", "2.0")]


def test_runs_align_by_set_and_sample_not_by_row_order(tmp_path):
    a = _rows(tmp_path / "a.csv", ROWS)
    b = _rows(tmp_path / "b.csv", [ROWS[2], ("u2", "s2", "t1", "2.0", "9.0"), ROWS[0]])
    runs = compare.align([a, b])
    assert runs == {
        "preds": [[1.5, 2.5, 2.0], [1.5, 9.0, 2.0]],
        "mos": [1.0, 2.0, 3.0],
        "system_id": ["s1", "s2", "s1"],
        "test_set": ["t1", "t1", "t2"],
    }


@pytest.mark.parametrize(
    ("rows_b", "message"),
    [
        (
            ROWS + [("u9", "s1", "t2", "1.0", "1.0")],
            "{b}: sample 'u9' of test set 't2' is not in {a}" + compare.SAME_CLIPS,
        ),
        (ROWS[:1] + ROWS[2:], "{b}: lacks sample 'u2' of test set 't1' (in {a})" + compare.SAME_CLIPS),
        (
            ROWS[:2] + [("u1", "s1", "t2", "3.5", "2.0")],
            "{b}: sample 'u1' of test set 't2' has true MOS 3.5, {a} has 3.0",
        ),
        (
            ROWS[:2] + [("u1", "s7", "t2", "3.0", "2.0")],
            "{b}: sample 'u1' of test set 't2' has system 's7', {a} has 's1'",
        ),
    ],
    ids=["extra", "lacking", "mos", "system"],
)
def test_runs_that_do_not_match_are_refused_naming_the_sample_and_its_set(tmp_path, capsys, rows_b, message):
    a, b = _rows(tmp_path / "a.csv", ROWS), _rows(tmp_path / "b.csv", rows_b)
    assert compare.main([str(a), str(b), "--json", str(tmp_path / "c.json")]) == 1
    captured = capsys.readouterr()
    assert captured.err == f"sqa-compare: {message.format(a=a, b=b)}\n" and captured.out == ""
    assert not (tmp_path / "c.json").exists()


@pytest.mark.parametrize(
    ("mos_a", "mos_b", "same"),
    [
        # A 0-100 scale written to different precision: equal to a relative 1e-9.
        ("100.0", "100.00000005", True),
        ("100.0", "100.0000002", False),
        # Near 0 the relative test fails whatever the precision: an absolute 1e-9 holds.
        ("0.0", "5e-10", True),
        ("0.0", "5e-9", False),
    ],
)
def test_true_mos_match_up_to_rounding(tmp_path, mos_a, mos_b, same):
    a = _rows(tmp_path / "a.csv", [("u1", "s1", "t", mos_a, "1.0")])
    b = _rows(tmp_path / "b.csv", [("u1", "s1", "t", mos_b, "1.0")])
    if same:
        assert compare.align([a, b])["mos"] == [float(mos_a)]
    else:
        with pytest.raises(ValueError, match="has true MOS"):
            compare.align([a, b])


def test_a_sample_listed_twice_is_refused_with_its_line(tmp_path, capsys):
    a = _rows(tmp_path / "a.csv", [*ROWS, ("u2", "s2", "t1", "2.0", "2.5")])
    b = _rows(tmp_path / "b.csv", ROWS)
    assert compare.main([str(a), str(b)]) == 1
    assert capsys.readouterr().err == f"sqa-compare: {a}:5: sample 'u2' of 't1' appears twice\n"
    assert compare.main([str(b), str(a)]) == 1
    assert capsys.readouterr().err == f"sqa-compare: {a}:5: sample 'u2' of 't1' appears twice\n"


def test_a_missing_input_is_an_error_naming_it(tmp_path, capsys):
    a = _rows(tmp_path / "a.csv", ROWS)
    assert compare.main([str(a), str(tmp_path / "nope.csv")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sqa-compare: ") and str(tmp_path / "nope.csv") in err and err.count("\n") == 1


ACCENTED = "sample_id,system_id,test_set,mos,pred\nu1,s1,t1,1.0,1.5\ncafé,s2,t1,2.0,2.5\n"


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig"])
def test_utf8_predictions_are_read_with_or_without_a_byte_order_mark(tmp_path, encoding):
    a = tmp_path / "a.csv"
    a.write_text(ACCENTED, encoding=encoding)
    assert compare.align([a, a])["preds"][1] == [1.5, 2.5]
    assert list(compare.read_predictions(a)) == [("t1", "u1"), ("t1", "café")]


def test_a_latin1_predictions_file_is_refused_naming_its_first_bad_byte_and_line(tmp_path, capsys):
    a = tmp_path / "a.csv"
    a.write_text(ACCENTED, encoding="utf-8")
    b = tmp_path / "b.csv"
    b.write_text(ACCENTED, encoding="latin-1")
    assert compare.main([str(a), str(b)]) == 1
    assert (
        capsys.readouterr().err
        == f"sqa-compare: {b}: not UTF-8 text (byte 0xe9 on line 3); save it as UTF-8\n"
    )


def _two_runs(tmp_path):
    rng = np.random.default_rng(8)
    systems = [f"s{i % 10}" for i in range(40)]
    true = rng.uniform(1, 5, 40)
    sets = ["t"] * 40
    pred_a, pred_b = true + rng.normal(0, 1, 40), true + rng.normal(0, 0.6, 40)
    a = write_predictions(tmp_path / "a.csv", pred_a, true, systems, sets)
    b = write_predictions(tmp_path / "b.csv", pred_b, true, systems, sets)
    return a, b, (list(pred_a), list(pred_b), list(true), systems, sets)


def test_the_cli_reports_its_settings_and_writes_the_comparison_it_prints(tmp_path, capsys):
    a, b, runs = _two_runs(tmp_path)
    out = tmp_path / "c.json"
    args = [str(a), str(b), "--json", str(out)]
    assert compare.main([*args, "--metric", "lcc", "--seed", "3", "--resamples", "60"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:4] == [
        "lcc (higher is better): B - A over 60 paired resamples (seed 3)",
        f"A = a.csv: {a}",
        f"B = b.csv: {b}",
        compare.SEED_NOTE,
    ]
    expected = compare.compare(*runs, metric="lcc", resamples=60, seed=3)
    assert "\n".join(printed[4:]) == compare.format_comparison(expected, "lcc", names=("a.csv", "b.csv"))
    written = json.loads(out.read_text())
    assert {k: v for k, v in written.items() if k != "results"} == {
        "a": [str(a)],
        "b": [str(b)],
        "metric": "lcc",
        "resamples": 60,
        "seed": 3,
        "seed_variance": False,
    }
    assert written["results"] == json.loads(json_text(expected))
    assert written["results"] != json.loads(json_text(compare.compare(*runs, metric="lcc", resamples=60)))
    # The defaults: SRCC, 1000 resamples, seed 0; the earlier --json is replaced only with --overwrite.
    assert compare.main([*args, "--overwrite"]) == 0
    assert capsys.readouterr().out.startswith(
        "srcc (higher is better): B - A over 1000 paired resamples (seed 0)\n"
    )
    written = json.loads(out.read_text())
    assert (written["metric"], written["resamples"], written["seed"]) == ("srcc", 1000, 0)
    assert written["results"] == json.loads(json_text(compare.compare(*runs)))


def test_one_resample_is_enough_and_none_is_refused(tmp_path, capsys):
    a, b, _ = _two_runs(tmp_path)
    assert compare.main([str(a), str(b), "--resamples", "1"]) == 0
    assert capsys.readouterr().out.startswith("srcc (higher is better): B - A over 1 paired resamples")
    with pytest.raises(SystemExit) as exit_:
        compare.main([str(a), str(b), "--resamples", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == "sqa-compare: error: --resamples must be at least 1"


def test_an_unknown_metric_is_refused_naming_the_choices(tmp_path, capsys):
    a, b, _ = _two_runs(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        compare.main([str(a), str(b), "--metric", "mae"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("sqa-compare: error: argument --metric: invalid choice: 'mae'")
    assert all(name in err for name in metrics.METRIC_NAMES)


def test_the_help_says_what_each_argument_is(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    with pytest.raises(SystemExit) as exit_:
        compare.main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: sqa-compare ")
    assert text.split("\n\n")[1] == (
        "Compare two settings on the same test clips: groups of runs (seeds), or two single runs."
    )
    # Each argument's line: its name, then (two spaces or more on) what it is.
    columns = (re.split(r"\s{2,}", line.strip(), maxsplit=1) for line in text.splitlines())
    described = dict(c for c in columns if len(c) == 2)
    assert described["RUN"] == (
        "run A then run B, or A's runs, --, then B's (each a predictions.csv or its run directory)"
    )
    assert described["--a RUN [RUN ...]"] == "the runs of setting A (the reference), a seed each"
    assert described["--b RUN [RUN ...]"] == "the runs of setting B, a seed each"
    assert described["--json JSON"] == "also write the comparison as JSON to this file"


@pytest.mark.parametrize("how", ["same", "relative", "symlink"])
def test_the_json_output_never_overwrites_an_input(tmp_path, capsys, monkeypatch, how):
    a, b, _ = _two_runs(tmp_path)
    before = b.read_bytes()
    target = str(b)
    if how == "relative":
        (tmp_path / "elsewhere").mkdir()
        monkeypatch.chdir(tmp_path / "elsewhere")
        target = "../b.csv"
    elif how == "symlink":
        target = str(tmp_path / "link.json")
        (tmp_path / "link.json").symlink_to(b)
    # Refused in one line, --overwrite or not.
    with pytest.raises(SystemExit) as exit_:
        compare.main([str(a), str(b), "--json", target, "--overwrite"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"sqa-compare: --json {target}: is one of the inputs of this command ({b.resolve()}); sqa never "
        "writes over an input, even with --overwrite: write the output elsewhere"
    ]
    assert b.read_bytes() == before


def test_an_existing_json_is_kept_byte_for_byte_without_overwrite_and_replaced_with_it(tmp_path, capsys):
    # As reported: `sqa-compare --json my_compare.json` replaced the user's file.
    a, b, _ = _two_runs(tmp_path)
    out = tmp_path / "my_compare.json"
    out.write_bytes(b"{ my notes }\n")
    args = [str(a), str(b), "--resamples", "20", "--json", str(out)]
    with pytest.raises(SystemExit) as exit_:
        compare.main(args)
    assert exit_.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and out.read_bytes() == b"{ my notes }\n"
    assert captured.err.splitlines() == [
        f"sqa-compare: --json {out}: already exists; pass --overwrite to replace it"
    ]
    assert compare.main([*args, "--overwrite"]) == 0
    assert json.loads(out.read_text())["resamples"] == 20


@pytest.mark.parametrize(("runs_a", "runs_b"), [(1, 1), (1, 2), (2, 1), (3, 3)])
def test_welch_only_with_several_runs_on_both_sides_and_each_runs_values_with_more_than_two(runs_a, runs_b):
    # The documented rule: one run on either side leaves the paired clip bootstrap alone (ties, no
    # seed variance); each run's value is listed wherever there are more than the two runs.
    rng = np.random.default_rng(2)
    systems = [f"s{i}" for i in range(10) for _ in range(3)]
    true = list(rng.uniform(1, 5, 30))
    a = [list(np.array(true) + rng.normal(0, 1.0, 30)) for _ in range(runs_a)]
    b = [list(np.array(true) + rng.normal(0, 0.5, 30)) for _ in range(runs_b)]
    r = compare.compare_groups(a, b, true, systems, ["t"] * 30, resamples=50)["t"]["utt"]
    several = runs_a > 1 and runs_b > 1
    assert ("df" in r) is several and ("ties" in r) is not several
    assert ("a_runs" in r) is (runs_a + runs_b > 2)
    if "a_runs" in r:
        assert len(r["a_runs"]) == runs_a and len(r["b_runs"]) == runs_b


def test_a_set_undefined_for_side_b_only_names_run_b():
    rng = np.random.default_rng(4)
    systems = [f"s{i}" for i in range(8) for _ in range(2)]
    true = list(rng.uniform(1, 5, 16))
    result = compare.compare(
        list(np.array(true) + rng.normal(0, 1, 16)), [3.0] * 16, true, systems, ["t"] * 16
    )
    assert result["t"]["utt"]["undefined"] == "B: every clip has the same prediction"
