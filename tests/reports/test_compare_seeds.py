"""sqa-compare over seeds: groups of runs tested against the seed-to-seed spread and the clip resampling."""

import json

import numpy as np
import pytest
from scipy import stats

from sqa import metrics
from sqa.reports import compare
from sqa.training.run import run
from tests.conftest import small_corpus_overrides
from tests.reports.test_compare import write_predictions
from tests.training.test_train import compose_train

TRUE = [1.0, 2.0, 3.0, 4.0]
SYSTEMS = ["x", "x", "y", "y"]
SETS = ["t"] * 4
# Seed values s² = 1/16 for A, 1/48 for B: SE² = (1/16)/3 + (1/48)/3 = 1/36, SE = 1/6, and
# Welch–Satterthwaite df = (1/36)² / ((1/48)²/2 + (1/144)²/2) = 3.2.
B_OFFSETS = [0.25, 0.25, 0.5]
CLOSE = [0.5, 0.75, 1.0]  # B − A = 1/3 − 3/4 = −5/12: t = −2.5
FAR = [1.0, 1.25, 1.5]  # B − A = 1/3 − 5/4 = −11/12: t = −5.5


def offset_runs(tmp_path, side, offsets):
    """predictions.csv files whose every clip is off its true MOS by the run's offset (its RMSE)."""
    # Dyadic offsets and MOS: each run's RMSE is its offset on every resample, so the clip
    # variance is 0 and the test is Welch's t on the seed values alone.
    return [
        write_predictions(tmp_path / f"{side}{i}.csv", [t + c for t in TRUE], TRUE, SYSTEMS, SETS)
        for i, c in enumerate(offsets)
    ]


@pytest.mark.parametrize(("a_offsets", "t", "significant"), [(CLOSE, -2.5, False), (FAR, -5.5, True)])
def test_welch_on_hand_made_runs_by_hand_on_both_sides_of_five_percent(
    tmp_path, capsys, a_offsets, t, significant
):
    a, b = offset_runs(tmp_path, "a", a_offsets), offset_runs(tmp_path, "b", B_OFFSETS)
    out = tmp_path / "c.json"
    args = [*map(str, a), "--", *map(str, b), "--metric", "rmse", "--json", str(out)]
    assert compare.main(args) == 0
    written = json.loads(out.read_text())
    assert written["seed_variance"] and written["a"] == list(map(str, a))
    r = written["results"]["t"]["utt"]
    diff = np.mean(B_OFFSETS) - np.mean(a_offsets)
    assert r["a_runs"] == a_offsets and r["b_runs"] == B_OFFSETS
    assert r["diff"] == pytest.approx(diff) and r["diff"] * 6 == pytest.approx(t)
    assert r["se"] == pytest.approx(1 / 6) and r["seed_se"] == pytest.approx(1 / 6)
    assert r["clip_se"] == pytest.approx(0, abs=1e-12) and r["df"] == pytest.approx(3.2)
    p = 2 * stats.t.sf(abs(t), 3.2)
    assert r["p"] == pytest.approx(p, rel=1e-6)
    # Welch's test as scipy computes it from the six values gives the same p.
    assert r["p"] == pytest.approx(stats.ttest_ind(B_OFFSETS, a_offsets, equal_var=False).pvalue, rel=1e-6)
    half = stats.t.ppf(0.975, 3.2) / 6
    assert r["ci"] == pytest.approx([diff - half, diff + half])
    assert r["significant"] is significant and (r["p"] < 0.05) is significant
    # By hand: p 0.082 (t −2.5) and 0.010 (t −5.5) on 3.2 degrees of freedom.
    assert (0.05 < r["p"] < 0.1) if not significant else (r["p"] < 0.02)
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("t  ")]
    assert [row.split()[1] for row in rows] == ["utt", "sys"]
    assert all(row.endswith("significant (B better)") is significant for row in rows)
    assert f"{r['p']:.3f}" in rows[0] and " 3.2 " in rows[0]


def test_the_standard_error_adds_the_clip_variance_of_the_drawn_resamples_to_the_seed_variance(drawn):
    rng = np.random.default_rng(6)
    n = 40
    true = rng.uniform(1, 5, n)
    runs_a = [list(true + rng.normal(0, 1.2, n)) for _ in range(3)]
    runs_b = [list(true + rng.normal(0, 0.8, n)) for _ in range(4)]
    systems = [f"s{i % 10}" for i in range(n)]
    result = compare.compare_groups(runs_a, runs_b, list(true), systems, ["t"] * n, resamples=300)
    idx = drawn[0]  # the utterance level's resamples of set t
    by_run = [
        (
            stats.spearmanr(run, true)[0],
            np.array([stats.spearmanr(np.array(run)[i], true[i])[0] for i in idx]),
        )
        for run in [*runs_a, *runs_b]
    ]
    values_a, values_b = [v for v, _ in by_run[:3]], [v for v, _ in by_run[3:]]
    diffs = np.mean([d for _, d in by_run[3:]], axis=0) - np.mean([d for _, d in by_run[:3]], axis=0)
    seed_a, seed_b = np.var(values_a, ddof=1) / 3, np.var(values_b, ddof=1) / 4
    clip = np.var(diffs, ddof=1)
    se = np.sqrt(seed_a + seed_b + clip)
    df = (seed_a + seed_b + clip) ** 2 / (seed_a**2 / 2 + seed_b**2 / 3)
    diff = np.mean(values_b) - np.mean(values_a)
    r = result["t"]["utt"]
    assert (r["a"], r["b"], r["diff"]) == pytest.approx((np.mean(values_a), np.mean(values_b), diff))
    assert (r["se"], r["clip_se"], r["df"]) == pytest.approx((se, np.sqrt(clip), df), rel=1e-9)
    assert r["seed_se"] == pytest.approx(np.sqrt(seed_a + seed_b), rel=1e-9)
    assert r["p"] == pytest.approx(2 * stats.t.sf(abs(diff) / se, df), rel=1e-9)
    assert r["ci"] == pytest.approx([diff - stats.t.ppf(0.975, df) * se, diff + stats.t.ppf(0.975, df) * se])
    assert clip > 0 and seed_a + seed_b > 0 and "ties" not in r


def test_identical_runs_on_both_sides_differ_by_exactly_zero():
    pred = list(np.array(TRUE) + [0.5, -0.25, 0.25, 0.0])
    result = compare.compare_groups([pred, pred], [pred, pred], TRUE, SYSTEMS, SETS, "rmse", resamples=50)
    r = result["t"]["utt"]
    assert (r["diff"], r["se"], r["p"], r["ci"], r["significant"]) == (0.0, 0.0, 1.0, [0.0, 0.0], False)


def test_one_run_a_side_says_seed_variance_is_not_included_in_one_line(tmp_path, capsys):
    a = offset_runs(tmp_path, "a", CLOSE)
    b = offset_runs(tmp_path, "b", B_OFFSETS)
    assert compare.main([str(a[0]), str(b[0])]) == 0
    out = capsys.readouterr().out
    assert out.count(compare.SEED_NOTE) == 1 and compare.SEED_NOTE.count("\n") == 0
    assert "several seeds" in compare.SEED_NOTE and "A1 A2 A3 -- B1 B2 B3" in compare.SEED_NOTE
    # Several runs on one side only: the clip bootstrap of the side means, still without seeds.
    out_json = tmp_path / "c.json"
    assert compare.main([*map(str, a), "--", str(b[0]), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert out.count(compare.SEED_NOTE) == 1 and out.splitlines()[0].startswith(
        "srcc (higher is better): B - A of the means"
    )
    written = json.loads(out_json.read_text())
    r = written["results"]["t"]["utt"]
    assert not written["seed_variance"] and "ties" in r and "df" not in r and r["b_runs"] == [1.0]
    # Several a side: no such line.
    assert compare.main([*map(str, a), "--", *map(str, b)]) == 0
    assert compare.SEED_NOTE not in capsys.readouterr().out


def test_two_runs_a_side_print_welchs_table_and_one_run_a_side_the_bootstraps(tmp_path, capsys):
    a, b = offset_runs(tmp_path, "a", [1.0, 1.5]), offset_runs(tmp_path, "b", [0.25, 0.5])
    a, b = list(map(str, a)), list(map(str, b))
    assert compare.main([*a, "--", *b, "--metric", "rmse", "--resamples", "20", "--seed", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == [
        "rmse (lower is better): B - A of the means over runs (A: 2, B: 2); "
        "Welch's t over seed-to-seed and clip variance, 20 paired resamples (seed 3)",
        f"A = {a[0]}, {a[1]}",
        f"B = {b[0]}, {b[1]}",
    ]
    assert lines[3].split() == ["set", "level", "A", "B", "B-A", "95", "%", "interval", "p"] + [
        "df",
        "seed",
        "SE",
        "clip",
        "SE",
    ]
    # By hand: seed variances (1/8)/2 and (1/32)/2, no clip variance (every resample gives the
    # offsets); SE² = 5/64, df = (5/64)² / ((1/16)² + (1/64)²) = 25/17.
    se, df, diff = np.sqrt(5 / 64), 25 / 17, 0.375 - 1.25
    half = stats.t.ppf(0.975, df) * se
    p = 2 * stats.t.sf(abs(diff) / se, df)
    row = ["1.250", "0.375", "-0.875", f"[{diff - half:+.3f},", f"{diff + half:+.3f}]", f"{p:.3f}"]
    assert lines[4].split() == ["t", "utt", *row, "1.5", f"{se:.3f}", "0.000"]
    # The system means are off by the same offsets: the same row at system level.
    assert lines[5] == lines[4].replace("t        utt  ", "t        sys  ")
    assert compare.SEED_NOTE not in lines and len(lines) == 6
    # One run on side A, two on B: no Welch, the ties column, and the one-line note.
    assert compare.main([a[0], "--", *b, "--metric", "rmse", "--resamples", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "rmse (lower is better): B - A of the means over runs (A: 1, B: 2); 20 paired resamples (seed 0)"
    )
    assert lines[3] == compare.SEED_NOTE and lines[4].split()[-1] == "ties"


def welch_row(p: float, df: float) -> dict[str, dict[str, dict]]:
    """A one-set result of several runs a side with this p and these degrees of freedom."""
    row = {"a": 1.0, "b": 0.5, "diff": -0.5, "ci": [-0.9, -0.1], "p": p, "significant": True}
    return {"t": {"utt": {**row, "df": df, "seed_se": 0.125, "clip_se": 0.0625}}}


@pytest.mark.parametrize(
    ("p", "df", "shown"),
    [
        (0.000999, 99.9, ["<0.001", "99.9"]),
        (0.001, 100.0, ["0.001", "100"]),
        (0.0014, 100.5, ["0.001", "100"]),
    ],
)
def test_welch_rows_show_p_below_a_thousandth_and_df_from_100_without_decimals(p, df, shown):
    lines = compare.format_comparison(welch_row(p, df), "rmse", seeds=True).splitlines()
    assert lines[1].split()[7:10] == [*shown, "0.125"]
    assert lines[1].endswith("0.062  significant (B better)")


def test_the_ways_of_naming_the_sides_agree(tmp_path, capsys):
    a, b = offset_runs(tmp_path, "a", CLOSE), offset_runs(tmp_path, "b", B_OFFSETS)
    a, b = list(map(str, a)), list(map(str, b))
    forms = [
        [*a, "--", *b, "--metric", "rmse"],
        ["--metric", "rmse", *a, "--", *b],
        ["--a", *a, "--b", *b, "--metric", "rmse"],
        ["--metric", "rmse", "--b", *b, "--a", *a],
    ]
    outputs = []
    for form in forms:
        assert compare.main(form) == 0
        outputs.append(capsys.readouterr().out)
    assert all(out == outputs[0] for out in outputs) and f"A = {', '.join(a)}" in outputs[0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["x.csv", "y.csv", "z.csv"], "give two runs (A B), or several a side"),
        (["x.csv"], "give two runs (A B), or several a side"),
        (["--a", "x.csv", "y.csv"], "give two runs (A B), or several a side"),
        (["x.csv", "--a", "y.csv", "--b", "z.csv"], "give two runs (A B), or several a side"),
        (["--", "x.csv", "y.csv"], "give two runs (A B), or several a side"),
        (["x.csv", "y.csv", "x.csv", "--", "z.csv"], "x.csv is given twice for A: each run counts once"),
    ],
)
def test_sides_that_cannot_be_told_are_refused(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        compare.main(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith(f"sqa-compare: error: {message}")


def test_a_run_of_other_clips_is_refused_naming_the_split_files(tmp_path, capsys):
    a = offset_runs(tmp_path, "a", CLOSE)
    other = write_predictions(tmp_path / "other.csv", TRUE, TRUE, SYSTEMS, SETS, ids=["u9", "u1", "u2", "u3"])
    assert compare.main([*map(str, a), "--", str(other), str(a[0])]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"sqa-compare: {other}: sample 'u9' of test set 't' is not in {a[0]}")
    assert err.endswith("(runs that carve their test split need the same data.test_split_csv)\n")


# Short runs of one configuration: seeds differ a lot (average utterance SRCC from −0.38 to 0.60).
SHORT = ["trainer.max_steps=30", "trainer.val_check_interval=10"]
# A model that learns against the same model with learning rate 0, which stays the constant
# training-mean predictor (`head_init=train_mean`): two settings that really differ.
TRAINED = ["head_init=train_mean", "trainer.max_steps=120", "trainer.val_check_interval=40"]
CONSTANT = ["head_init=train_mean", "optim.lr=0", "trainer.max_steps=1", "trainer.val_check_interval=1"]


def train_seeds(root, tmp_path_factory, overrides, seeds):
    """Run directories of the small synthetic corpus trained with `overrides` for each seed."""
    dirs = []
    for seed in seeds:
        run_dir = tmp_path_factory.mktemp(f"seed{seed}")
        common = [f"seed={seed}", "bootstrap=0", "trainer.enable_progress_bar=false"]
        run(compose_train([*small_corpus_overrides(root), *common, *overrides]), run_dir)
        dirs.append(run_dir)
    return dirs


@pytest.fixture(scope="module")
def short_runs(small_synthetic_root, tmp_path_factory):
    return train_seeds(small_synthetic_root, tmp_path_factory, SHORT, range(6))


@pytest.mark.slow
def test_three_seeds_against_three_seeds_of_one_config_are_not_significant(short_runs, tmp_path, capsys):
    out = tmp_path / "c.json"
    assert compare.main([*map(str, short_runs[:3]), "--", *map(str, short_runs[3:]), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())["results"]
    # Measured: p 0.74-0.95 on every set and level (average utterance SRCC 0.225 against 0.129,
    # B - A -0.096, 95 % interval [-1.139, +0.947], df 3.8, seed SE 0.355, clip SE 0.100).
    for name, block in result.items():
        for level, r in block.items():
            assert not r["significant"] and r["p"] > 0.05, (name, level, r["p"])
    assert "significant" not in printed and compare.SEED_NOTE not in printed
    # Seeds alone: the clip bootstrap of the two seeds farthest apart calls their gap significant
    # (measured: -0.378 against 0.597, p < 0.001), and says that seed variance is not included.
    values = [json.loads((d / "metrics.json").read_text())["avg"]["utt"]["srcc"] for d in short_runs]
    low, high = short_runs[int(np.argmin(values))], short_runs[int(np.argmax(values))]
    assert compare.main([str(low), str(high), "--json", str(out), "--overwrite"]) == 0
    assert json.loads(out.read_text())["results"]["avg"]["utt"]["significant"]
    assert capsys.readouterr().out.count(compare.SEED_NOTE) == 1


@pytest.mark.slow
def test_a_model_that_learns_is_significantly_better_than_one_that_cannot_over_three_seeds_each(
    small_synthetic_root, tmp_path_factory, tmp_path, capsys
):
    constant = train_seeds(small_synthetic_root, tmp_path_factory, CONSTANT, range(3))
    trained = train_seeds(small_synthetic_root, tmp_path_factory, TRAINED, range(3))
    out = tmp_path / "c.json"
    args = [*map(str, constant), "--", *map(str, trained), "--metric", "rmse", "--json", str(out)]
    assert compare.main(args) == 0
    printed = capsys.readouterr().out
    result = json.loads(out.read_text())["results"]
    # Measured: average utterance RMSE 1.109 (every seed: the constant) against 0.901, p < 0.001.
    for level in metrics.LEVELS:
        r = result["avg"][level]
        assert r["significant"] and r["diff"] < 0 and r["p"] < 0.05, (level, r)
        assert len(set(r["a_runs"])) == 1 and r["seed_se"] > 0
    avg = [line for line in printed.splitlines() if line.startswith("avg")]
    assert len(avg) == 2 and all(line.endswith("significant (B better)") for line in avg)
