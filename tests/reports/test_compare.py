import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from sqa import metrics
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
    runs = compare.align(a, b)
    result = compare.compare(
        runs["pred_a"], runs["pred_b"], runs["mos"], runs["system_id"], runs["test_set"], resamples=300
    )
    for name in ("test1", "test2", "avg"):
        r = result[name]["utt"]
        assert r["diff"] > 0.2 and r["ci"][0] > 0 and r["p"] < 0.01 and r["significant"]
        assert r["ci"][0] <= r["diff"] <= r["ci"][1]
    assert result["avg"]["sys"]["significant"] and result["avg"]["sys"]["diff"] > 0
    # The observed values are those metrics.json reports.
    expected = metrics.evaluate_sets(runs["pred_b"], runs["mos"], runs["system_id"], runs["test_set"])
    assert result["avg"]["sys"]["b"] == pytest.approx(expected["avg"]["sys"]["srcc"])
    # Lower RMSE is better: B is still the better run.
    assert compare.main([str(a), str(b), "--metric", "rmse", "--resamples", "100"]) == 0
    utt_avg = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("avg      utt"))
    assert "significant (B better)" in utt_avg


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
        compare.align(a, c)


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
    assert result.stdout.startswith("pair_acc: B - A over 50 paired resamples (seed 0)")


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


def test_p_and_interval_of_a_comparison_by_a_hand_count_over_the_drawn_resamples(monkeypatch):
    from scipy import stats

    drawn = []
    real = metrics.bootstrap_indices

    def recording(rng, n, resamples):
        drawn.append(real(rng, n, resamples))
        return drawn[-1]

    monkeypatch.setattr(metrics, "bootstrap_indices", recording)
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
