import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from sqa import compare, metrics

from .conftest import REPO


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
        [sys.executable, "-m", "sqa.compare", str(a), str(a), "--resamples", "50", "--metric", "pair_acc"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.startswith("pair_acc: B - A over 50 paired resamples (seed 0)")


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
