"""Preferences: P(A better) from score differences and the export's residual spread; `sqa-score --pairs`."""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import sqa
from sqa.core.artefacts import read_predictions
from sqa.core.spread import probability
from sqa.data.synthetic.mos import generate
from sqa.exports.format import load_export
from sqa.exports.residual import VALID_RMSE_SOURCE
from sqa.metrics import pair_acc
from sqa.reports.preferences import (
    PREFERENCES_FILE,
    calibration,
    describe,
    evaluate_preferences,
    pair_outcomes,
    preference_accuracy,
    rated_above,
    song_preferences,
)
from sqa.scoring import cli as score
from sqa.scoring.preferences import check_sigma, preference_note, preference_of, read_pairs
from sqa.scoring.results import SpreadScore
from sqa.scoring.scorer import PreferenceWarning
from sqa.training.evaluation import evaluate
from sqa.training.run import run
from tests.exports.test_residual import run_export
from tests.scoring.test_scoring import sung_phrase
from tests.training.test_eval import compose_eval
from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus


def test_probability_is_the_normal_cdf_of_the_difference_over_root_two_sigma():
    assert probability(0.0, 0.7) == 0.5
    # Φ(1) = 0.8413: a difference of √2·σ.
    assert probability(math.sqrt(2) * 0.7, 0.7) == pytest.approx(0.841345, abs=1e-6)
    assert probability(np.array([-1.0, 1.0]), 0.5).sum() == pytest.approx(1.0)


def test_preference_accuracy_on_each_test_set_is_its_pair_acc():
    rng = np.random.default_rng(0)
    true = np.round(rng.uniform(1, 5, 120) * 5) / 5  # ties in the labels, as means of five ratings
    pred = np.round(true + rng.normal(0, 0.6, true.size), 1)  # and ties in the predictions
    sets = np.repeat(["test1", "test2", "test3"], 40)
    for name in ("test1", "test2", "test3"):
        member = sets == name
        pred_diff, true_diff, _ = pair_outcomes(pred[member], true[member], sets[member])
        assert preference_accuracy(pred_diff, true_diff) == pytest.approx(
            pair_acc(pred[member], true[member])
        )
    # Pairs never cross groups, and `apart` keeps only pairs of different systems.
    _, _, index = pair_outcomes(pred, true, sets, apart=np.arange(120) % 4)
    assert (sets[index[:, 0]] == sets[index[:, 1]]).all() and (index[:, 0] % 4 != index[:, 1] % 4).all()


def test_pairs_are_every_two_clips_of_a_group_in_row_order_with_signed_float_differences():
    # Clips 0, 2, 3, 5 form one group and 1, 4 another (groups given as (test set, song) tuples).
    groups = [("t", "a"), ("t", "b"), ("t", "a"), ("t", "a"), ("t", "b"), ("t", "a")]
    systems = ["s1", "s2", "s1", "s3", "s1", "s2"]
    # Small integer scores held as uint8, as a compact array of 1-5 labels may be: a difference
    # taken in uint8 wraps (1 - 3 = 254), so the sign of every pair must come from float values.
    pred, true = [3, 1, 4, 1, 5, 2], [2, 5, 3, 4, 1, 2]
    pred_u8, true_u8 = np.array(pred, dtype=np.uint8), np.array(true, dtype=np.uint8)
    for apart in (None, systems):
        # The reference: itertools.combinations over the clips, which gives i < j in row order and
        # never a clip with itself; `apart` keeps only pairs of different systems.
        expected = [
            (i, j)
            for i, j in itertools.combinations(range(len(groups)), 2)
            if groups[i] == groups[j] and (apart is None or apart[i] != apart[j])
        ]
        pred_diff, true_diff, index = pair_outcomes(pred_u8, true_u8, groups, apart)
        assert index.tolist() == [list(pair) for pair in expected]
        assert pred_diff.tolist() == [float(pred[i] - pred[j]) for i, j in expected]
        assert true_diff.tolist() == [float(true[i] - true[j]) for i, j in expected]
    # Without `apart`, 6 + 1 pairs (4 clips' and 2 clips'); the tie (0, 5) in `true` is kept.
    assert len(pair_outcomes(pred, true, groups)[2]) == 7
    assert evaluate_preferences(pred, true, groups, sigma=None)["tied"] == 1


def test_calibration_bins_are_closed_below_and_the_last_holds_one():
    # Five bins [0, .2), [.2, .4), [.4, .6), [.6, .8), [.8, 1]: a probability on an edge belongs to
    # the bin above it, one just below to the bin below, and 1 itself to the last bin. Bin
    # [.2, .4) is empty: it is left out and the bins after it still reported.
    below_06, below_08 = np.nextafter(0.6, 0.0), np.nextafter(0.8, 0.0)
    p = np.array([0.0, 0.1, below_06, 0.6, 0.7, below_08, 0.8, 1.0])
    outcome = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0])

    # One bin as plain means of its members, compared to 1e-12.
    def expected(low: float, high: float, stated: list[float], observed: list[float]) -> object:
        mean_p, mean_o = sum(stated) / len(stated), sum(observed) / len(observed)
        return pytest.approx(
            {
                "low": low,
                "high": high,
                "pairs": len(stated),
                "stated": mean_p,
                "observed": mean_o,
                "gap": mean_o - mean_p,
            },
            rel=0,
            abs=1e-12,
        )

    assert calibration(p, outcome) == [
        expected(0.0, 0.2, [0.0, 0.1], [0.0, 1.0]),
        expected(0.4, 0.6, [below_06], [1.0]),
        expected(0.6, 0.8, [0.6, 0.7, below_08], [0.0, 1.0, 0.0]),
        expected(0.8, 1.0, [0.8, 1.0], [1.0, 1.0]),
    ]
    # Other bin counts: edges k / bins, 0.5 on the edge of two bins opening the upper one.
    halves = calibration(np.array([0.25, 0.5, 1.0]), np.ones(3), bins=2)
    assert [(b["low"], b["high"], b["pairs"]) for b in halves] == [(0.0, 0.5, 1), (0.5, 1.0, 2)]


def test_stated_probabilities_are_calibrated_where_residuals_are_normal():
    # Residuals of spread σ, as the formula assumes: every bin's observed rate is its stated one,
    # up to the sampling noise of 400 clips' pairs (which share clips, so are not independent).
    rng = np.random.default_rng(1)
    true = rng.uniform(1, 5, 400)
    pred = true + rng.normal(0, 0.5, true.size)
    result = evaluate_preferences(pred, true, np.zeros(true.size), sigma=0.5)
    assert result["pairs"] == 400 * 399 // 2
    assert len(result["bins"]) == 5 and result["max_gap"] < 0.05


def same_pairs_pair_acc(rows: list[dict]) -> tuple[float, int]:
    """`pair_acc` over the same-song pairs of different systems of one test set, found by brute force.

    Each pair's pair_acc (1, 0 or ½ where untied in the labels) averaged; and the untied pairs' count.
    """
    scores = [
        pair_acc(np.array([a["pred"], b["pred"]]), np.array([a["mos"], b["mos"]]))
        for a, b in itertools.combinations(rows, 2)
        if (a["test_set"], a.get("song")) == (b["test_set"], b.get("song"))
        and a.get("song")  # predictions.csv's empty cell: no song
        and a["system_id"] != b["system_id"]
        and a["mos"] != b["mos"]
    ]
    return float(np.mean(scores)), len(scores)


# A set's or the pool's block in preferences.json, as docs/scoring.md lists it ("undefined" only
# where a number is null).
SONG_BLOCK_KEYS = {"clips", "songs", "pairs", "tied", "accuracy", "max_gap", "bins"}


def song_rows() -> list[dict]:
    """Hand-made test rows: songs by several systems (one system twice), ties, clips without a song."""
    rows = []
    rng = np.random.default_rng(3)
    for test_set in ("test1", "test2"):
        for song in range(4):
            for system in ("s1", "s2", "s3", "s3", "s4"):
                mos = float(rng.integers(5, 21) / 5)  # means of five ratings: ties between clips
                pred = round(mos + rng.normal(0, 0.5), 1)  # and between predictions
                rows.append(
                    {
                        "test_set": test_set,
                        "song": f"{test_set}-{song}",
                        "system_id": system,
                        "mos": mos,
                        "pred": pred,
                    }
                )
        rows.append({"test_set": test_set, "system_id": "s1", "mos": 3.0, "pred": 3.0})
    return rows


def test_song_preference_accuracy_is_pair_acc_of_the_same_pairs():
    rows = song_rows()
    record = song_preferences(rows, 0.5, VALID_RMSE_SOURCE)
    assert record["basis"] == "mos" and record["sigma"] == 0.5 and record["sigma_source"] == VALID_RMSE_SOURCE
    # The record's fields as docs/scoring.md lists them; `pairs` says in words how pairs are formed,
    # so a reader of preferences.json alone knows that tied pairs are left out.
    assert set(record) == {"pairs", "basis", "sigma", "sigma_source", "calibration_bins", "sets", "all"}
    assert record["pairs"] == (
        "clips of one test set and song by different systems; pairs tied in the true MOS left out"
    )
    assert record["calibration_bins"] == 5 and set(record["sets"]) == {"test1", "test2"}
    for block in (*record["sets"].values(), record["all"]):
        assert set(block) == SONG_BLOCK_KEYS
    for name in ("test1", "test2"):
        expected, pairs = same_pairs_pair_acc([r for r in rows if r["test_set"] == name])
        block = record["sets"][name]
        assert (block["clips"], block["songs"], block["pairs"]) == (20, 4, pairs)
        assert block["tied"] > 0 and block["accuracy"] == pytest.approx(expected, abs=1e-12)
        # The bins hold every pair twice (both ways round), symmetric about ½.
        assert sum(b["pairs"] for b in block["bins"]) == 2 * pairs
        assert block["max_gap"] == max(abs(b["gap"]) for b in block["bins"])
    pooled, pairs = same_pairs_pair_acc(rows)
    assert (record["all"]["pairs"], record["all"]["accuracy"]) == (pairs, pytest.approx(pooled, abs=1e-12))
    # The whole of a group with one clip per system: its pair_acc, pairs weighted by the untied ones.
    solo = [r for r in rows if r.get("song") == "test1-0" and r["system_id"] != "s3"]
    one = song_preferences(solo, 0.5, VALID_RMSE_SOURCE)["all"]
    assert one["accuracy"] == pytest.approx(
        pair_acc(np.array([r["pred"] for r in solo]), np.array([r["mos"] for r in solo]))
    )


def test_song_preferences_say_why_a_number_is_null():
    rows = song_rows()
    assert song_preferences([r for r in rows if "song" not in r], 0.5, VALID_RMSE_SOURCE) is None
    no_sigma = song_preferences(rows, None, "the run recorded no validation RMSE")
    block = no_sigma["all"]
    assert block["accuracy"] is not None and block["max_gap"] is None and block["bins"] == []
    assert block["undefined"] == {"max_gap": "the run recorded no validation RMSE"}
    tied = [{**r, "mos": 3.0} for r in rows]
    tied_record = song_preferences(tied, 0.5, "")
    assert tied_record["all"]["undefined"] == {
        "accuracy": "every pair is tied in the true MOS",
        "max_gap": "every pair is tied in the true MOS",
    }
    # No untied pair: accuracy and max_gap are null under their own keys (not NaN, and no other key).
    pooled = tied_record["all"]
    assert pooled["accuracy"] is None and pooled["max_gap"] is None and pooled["bins"] == []
    assert set(pooled) == {*SONG_BLOCK_KEYS, "undefined"}
    json.dumps(tied_record, allow_nan=False)
    alone = [{**r, "system_id": "s1"} for r in rows]
    assert (
        song_preferences(alone, 0.5, "")["sets"]["test1"]["undefined"]["accuracy"]
        == "no song is sung by two systems"
    )
    # Every number is finite or null, so the record is strict JSON.
    json.dumps(no_sigma, allow_nan=False)


def test_describe_gives_the_pooled_pairs_figures_and_basis_in_one_line():
    # The log line of docs/scoring.md: accuracy and max_gap to three decimals, σ to four digits and
    # its source, the record's own bin count. Hand-built records, one per branch.
    mos = {
        "basis": "mos",
        "sigma": 0.90876,
        "sigma_source": VALID_RMSE_SOURCE,
        "calibration_bins": 5,
        "sets": {},
        "all": {"pairs": 573, "accuracy": 0.7449, "max_gap": 0.03851, "bins": []},
    }
    assert describe(mos) == (
        "same-song pairs of different systems: 573 untied pairs, accuracy 0.745, max_gap 0.039 over 5 bins "
        f"(sigma 0.9088, {VALID_RMSE_SOURCE})"
    )
    # No σ: max_gap is undefined and its reason shown, while accuracy is still a number.
    why = "the run recorded no validation RMSE"
    no_sigma = {
        **mos,
        "sigma": None,
        "sigma_source": why,
        "calibration_bins": 3,
        "all": {"pairs": 2, "accuracy": 0.5, "max_gap": None, "bins": [], "undefined": {"max_gap": why}},
    }
    assert describe(no_sigma) == (
        "same-song pairs of different systems: 2 untied pairs, accuracy 0.500, "
        f"max_gap undefined ({why}) over 3 bins (no sigma)"
    )
    # A listener's basis names no σ; with every pair tied, both figures are undefined.
    tied = "every pair is tied in the true MOS"
    listener = {
        **mos,
        "basis": "listener",
        "sigma": None,
        "sigma_source": "not used: the predictor has a spread (laplace)",
        "all": {
            "pairs": 0,
            "accuracy": None,
            "max_gap": None,
            "bins": [],
            "undefined": {"accuracy": tied, "max_gap": tied},
        },
    }
    assert describe(listener) == (
        f"same-song pairs of different systems: 0 untied pairs, accuracy undefined ({tied}), "
        f"max_gap undefined ({tied}) over 5 bins (P from the clips' spreads)"
    )


def test_a_predictor_with_a_spread_is_evaluated_as_a_listeners_preference():
    assert rated_above([1, 2], [2]) == 0.25 and rated_above([4, 5], [1, 2]) == 1.0
    # Ratings drawn about each clip's score with its spread: the stated P is what listeners do.
    rng = np.random.default_rng(0)
    scores, spreads = rng.uniform(1, 5, 120), rng.uniform(0.3, 1.0, 120)
    rows = [
        {
            "test_set": "test1",
            "song": "one",
            "system_id": f"s{k}",
            "mos": float(score),
            "pred": float(score),
            "spread": float(spread),
            "ratings": list(rng.normal(score, spread, 40)),
        }
        for k, (score, spread) in enumerate(zip(scores, spreads, strict=True))
    ]
    record = song_preferences(rows, 0.7, VALID_RMSE_SOURCE, "gaussian")
    assert record["basis"] == "listener" and record["sigma"] is None
    # sigma_source says why σ is not used and what the stated and observed figures are, by name.
    assert record["sigma_source"] == (
        "not used: the predictor has a spread (gaussian), so P is a listener's from both clips' spreads, "
        "observed as the share of the clips' rating pairs with A rated higher (ties 1/2)"
    )
    assert record["all"]["pairs"] == 120 * 119 // 2 and record["all"]["max_gap"] < 0.02
    # Without every clip's ratings there is nothing a listener did to compare: the MOS question.
    rows[0]["ratings"] = []
    assert song_preferences(rows, 0.7, VALID_RMSE_SOURCE, "gaussian")["basis"] == "mos"


def test_a_run_without_songs_writes_no_preferences(tiny_run):
    _, run_dir = tiny_run
    assert not (run_dir / PREFERENCES_FILE).exists()
    # Nor a song column: predictions.csv stays as it was.
    header = (run_dir / "predictions.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "sample_id,system_id,test_set,mos,pred,wav_path"


def test_a_run_and_eval_of_clips_with_songs_write_preferences(tmp_path, caplog):
    manifest = write_per_system_corpus(tmp_path / "corpus")
    # The k-th clip of every system sings song k: each test song is sung by the three test systems.
    lines = manifest.read_text().splitlines()
    songs = [lines[0] + ",song_id"] + [
        f"{line},song{line.split(',')[3].rsplit('-', 1)[1]}" for line in lines[1:]
    ]
    manifest.write_text("\n".join(songs) + "\n")
    run_dir = tmp_path / "run"
    caplog.set_level(logging.INFO, logger="sqa")
    run(compose_train(tiny_run_overrides(manifest)), run_dir)
    rows = read_predictions(run_dir)
    assert [r["song"] for r in rows[:3]] == ["song0", "song1", "song2"]
    record = json.loads((run_dir / PREFERENCES_FILE).read_text())
    check = json.loads((run_dir / "run_info.json").read_text())["learning_check"]
    assert (record["sigma"], record["sigma_source"]) == (check["valid"]["rmse"], VALID_RMSE_SOURCE)
    # Three songs by three systems of distinct labels: nine untied pairs, as pair_acc counts them.
    expected, pairs = same_pairs_pair_acc(rows)
    assert (record["all"]["pairs"], record["all"]["tied"], pairs) == (9, 0, 9)
    assert record["all"]["accuracy"] == pytest.approx(expected, abs=1e-12)
    assert (
        sum(1 for r in caplog.records if r.getMessage().startswith(f"Preferences ({PREFERENCES_FILE})")) == 1
    )
    # eval.py writes the same, σ read from the export.
    evaluate(compose_eval([f"export={run_dir / 'export'}"]), tmp_path / "eval")
    again = json.loads((tmp_path / "eval" / PREFERENCES_FILE).read_text())
    assert again["sigma"] == record["sigma"] and again["sigma_source"] == VALID_RMSE_SOURCE
    assert again["all"]["accuracy"] == record["all"]["accuracy"]
    # preferences.json is sqa's: overwrite=true replaces the folder rather than refusing it.
    (tmp_path / "eval" / PREFERENCES_FILE).write_text("{}")
    evaluate(compose_eval([f"export={run_dir / 'export'}", "overwrite=true"]), tmp_path / "eval")
    assert json.loads((tmp_path / "eval" / PREFERENCES_FILE).read_text()) == again


# A small songs corpus: one or two test clips per system, so each test set's two songs are sung
# by most of its 10-12 systems (long clips sing their own).
SONGS_CLIPS_PER_SYSTEM = 6
SONGS_STEPS = 200


@pytest.fixture(scope="module")
def small_songs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthetic corpus with songs and per-system listener disagreement, 6 clips per system."""
    root = tmp_path_factory.mktemp("songs") / "synthetic-songs"
    return generate(root, 0, SONGS_CLIPS_PER_SYSTEM, (12, 12, 10, 8, 8), rater_spread=(0.2, 1.0), songs=True)


@pytest.mark.slow
def test_a_trained_models_same_song_preferences_are_calibrated(small_songs_root, tmp_path):
    overrides = [
        "data=synthetic_songs",
        f"data.corpus.root={small_songs_root}",
        f"data.corpus.clips_per_system={SONGS_CLIPS_PER_SYSTEM}",
        f"trainer.max_steps={SONGS_STEPS}",
        "trainer.val_check_interval=50",
        "trainer.enable_progress_bar=false",
        "bootstrap=0",
    ]
    run(compose_train(overrides), tmp_path)
    record = json.loads((tmp_path / PREFERENCES_FILE).read_text())
    rows = read_predictions(tmp_path)
    pooled = record["all"]
    assert pooled["accuracy"] == pytest.approx(same_pairs_pair_acc(rows)[0], abs=1e-12)
    assert len(record["sets"]) == 3 and record["calibration_bins"] == 5
    # Measured: 237 untied pairs of 58 test clips, accuracy 0.755, largest gap 0.095 (σ = 0.919, the
    # validation RMSE; the stated probabilities a little too unsure). Each set alone (58-93 pairs)
    # is too few for 0.1: test2 and test3 miss by 0.18.
    assert pooled["max_gap"] <= 0.1, f"{pooled['pairs']} pairs, sigma {record['sigma']:.3f}: {pooled['bins']}"


@pytest.mark.filterwarnings("ignore::sqa.scoring.scorer.LearningWarning")
def test_prefer_uses_the_validation_rmse_and_says_when_it_falls_back(default_export, tmp_path):
    good = sung_phrase(2.0)
    noisy = good + 0.2 * np.random.default_rng(0).normal(size=good.size).astype(np.float32)
    # The model exported as a run writes it: its learning check's validation RMSE 0.5.
    predictor = load_export(default_export)[0]
    model = sqa.load(run_export(tmp_path / "export", valid_rmse=0.5, model=predictor))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = model.prefer(good, noisy, 16000)
    assert result.difference == pytest.approx(result.score_a - result.score_b)
    assert result.p_a_better == pytest.approx(probability(result.difference, 0.5))
    assert model.prefer(good, noisy, 16000, sigma=1.0).p_a_better == pytest.approx(
        probability(result.difference, 1.0)
    )
    # Without a validation RMSE: the test RMSE, said once; without either, no probability.
    # Exported without a learning check (an import, an earlier run), tested off every label by 0.75.
    falling_back = sqa.load(run_export(tmp_path / "tested", test_rmse=0.75, model=predictor))
    with pytest.warns(PreferenceWarning, match="test RMSE 0.75") as said:
        fallback = falling_back.prefer(good, noisy, 16000)
        falling_back.prefer(noisy, good, 16000)
    # Once per loaded export, not once per preference; with a sigma there is no way out to add.
    assert [str(w.message) for w in said] == [
        "this export records no validation RMSE (run_info.json learning_check.valid.rmse; older runs and "
        "imports lack it): preference probabilities use its test RMSE 0.75 instead"
    ]
    assert fallback.p_a_better == pytest.approx(probability(fallback.difference, 0.75))
    # A sigma given by hand is checked before anything is scored.
    with pytest.raises(ValueError, match="sigma must be a positive number, got -1.0"):
        falling_back.prefer(good, noisy, 16000, sigma=-1.0)
    untested = run_export(tmp_path / "untested", model=predictor)
    with pytest.warns(PreferenceWarning, match="neither a validation RMSE"):
        assert sqa.load(untested).prefer(good, noisy, 16000).p_a_better is None


def test_pairs_option_writes_a_preference_per_pair_and_names_bad_rows(default_export, tmp_path, capsys):
    sf.write(tmp_path / "a.wav", sung_phrase(1.5), 16000)
    sf.write(tmp_path / "b.wav", sung_phrase(1.5, seed=1), 16000)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("a,b\na.wav,b.wav\nb.wav,missing.wav\n,a.wav\n")
    out = tmp_path / "prefs.csv"
    args = ["--checkpoint", str(default_export), "--num-workers", "0", "--pairs", str(pairs)]
    assert score.main([*args, "--output", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{pairs}, line 3: column b: {tmp_path / 'missing.wav'} is not a file" in err
    assert f"{pairs}, line 4: column a is empty" in err
    lines = out.read_text().splitlines()
    assert lines[0] == "line,a,b,score_a,score_b,difference,p_a_better" and len(lines) == 2
    # The default export records no residual spread: a difference, no probability, and a warning.
    assert "neither a validation RMSE" in err and lines[1].endswith(",")
    pairs.write_text("first,second\na.wav,b.wav\n")
    assert score.main(args) == 2
    assert "needs columns a and b" in capsys.readouterr().err
    assert score.main([*args, str(tmp_path / "a.wav")]) == 2


def test_sigma_given_by_hand_is_refused_unless_a_positive_finite_number():
    for sigma in (None, 1e-9, 2, 0.5):
        check_sigma(sigma)
    for sigma in (0, 0.0, -1.0, math.inf, math.nan, "1"):
        with pytest.raises(ValueError) as error:
            check_sigma(sigma)
        assert str(error.value) == f"sigma must be a positive number, got {sigma!r}"


def test_a_preference_names_the_clip_without_a_score_and_keeps_both_scores():
    scored, silent = SpreadScore(3.0, 0.5, None), SpreadScore(None, None, None)
    for a, b, name in ((silent, scored, "a"), (scored, silent, "b")):
        with pytest.raises(ValueError) as error:
            preference_of(a, b, None, 0.4, None)
        assert str(error.value) == f"clip {name} has no score (no vocal activity); no preference can be given"
    listener = preference_of(SpreadScore(3.5, 0.5, None), scored, None, None, "gaussian")
    assert (listener.score_a, listener.score_b, listener.basis) == (3.5, 3.0, "listener")


def test_the_sigma_note_adds_the_way_out_only_when_there_is_no_sigma():
    assert preference_note(0.3, "from the test RMSE") == "from the test RMSE"
    assert preference_note(None, None) is None and preference_note(0.3, None) is None
    assert preference_note(None, "no residual spread recorded") == (
        "no residual spread recorded: preferences give the score difference only, no probability; "
        "pass sigma= (the residual spread of its scores) to get one"
    )


def test_a_pairs_csv_is_read_with_absolute_and_relative_paths_and_its_faults_named(tmp_path):
    one, two = tmp_path / "one.wav", tmp_path / "two.wav"
    for path in (one, two):
        sf.write(path, np.zeros(1600), 16000)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text(f"a,b\n{one},two.wav\n", encoding="utf-8")
    read = read_pairs(pairs)
    assert (read.pairs, read.lines, read.problems) == ([(str(one), str(two))], [2], [])
    pairs.write_text("a,b\n", encoding="utf-8")
    assert read_pairs(pairs).problems == [f"{pairs}: the pairs CSV holds no rows"]
    for header, lacks, columns in (("a,c", "b", "a, c"), ("", "a, b", "none")):
        pairs.write_text(header + "\n", encoding="utf-8")
        with pytest.raises(ValueError) as error:
            read_pairs(pairs)
        assert str(error.value) == (
            f"{pairs}: a pairs CSV needs columns a and b (audio paths); it lacks {lacks} (columns: {columns})"
        )
    pairs.write_bytes(b"a,b\n\xe9.wav,two.wav\n")
    with pytest.raises(
        ValueError, match=rf"^{re.escape(str(pairs))}: not UTF-8 text \(.*\); save the pairs as UTF-8$"
    ):
        read_pairs(pairs)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(tmp_path))}: is a folder, not a file$"):
        read_pairs(tmp_path)


def test_a_pairs_csv_that_is_a_fifo_is_refused_at_once_and_so_is_a_fifo_in_a_pair(tmp_path):
    import os
    import threading

    fifo = tmp_path / "pairs.csv"
    os.mkfifo(fifo)
    # Opening a FIFO for reading waits for a writer: read in a thread, so a hang fails the test.
    outcome: list[BaseException] = []
    thread = threading.Thread(
        target=lambda: outcome.append(pytest.raises(ValueError, read_pairs, fifo).value)
    )
    thread.daemon = True
    thread.start()
    thread.join(5)
    assert not thread.is_alive(), "read_pairs blocked on a FIFO"
    assert str(outcome[0]) == f"{fifo}: not a regular file (a FIFO, device or socket); refusing to open it"
    one = tmp_path / "one.wav"
    sf.write(one, np.zeros(1600), 16000)
    os.mkfifo(tmp_path / "two.wav")
    pairs = tmp_path / "list.csv"
    pairs.write_text("a,b\none.wav,two.wav\n", encoding="utf-8")
    assert read_pairs(pairs).problems == [f"{pairs}, line 2: column b: {tmp_path / 'two.wav'} is not a file"]


def test_a_pairs_row_longer_than_its_header_and_a_repeated_column_are_named(tmp_path):
    for name in ("one.wav", "two.wav"):
        sf.write(tmp_path / name, np.zeros(1600), 16000)
    pairs = tmp_path / "pairs.csv"
    pairs.write_text("a,b\none.wav,two.wav\none.wav,two.wav,one.wav\n", encoding="utf-8")
    read = read_pairs(pairs)
    assert read.lines == [2]
    assert read.problems == [f"{pairs}, line 3: 3 cells; the header names 2"]
    pairs.write_text("a,b,a\none.wav,two.wav,two.wav\n", encoding="utf-8")
    with pytest.raises(ValueError, match=f"^{re.escape(str(pairs))}: column a appears more than once"):
        read_pairs(pairs)


def test_a_song_name_in_two_test_sets_is_two_songs_never_paired_across_the_sets():
    # Both sets sing `song0` and `song1`: pairs and songs are counted per (test set, song), so no
    # clip of test1 is paired with one of test2, in a set's block or in the pool.
    rows = [
        {**r, "song": f"song{int(r['song'].rsplit('-', 1)[1]) % 2}"} for r in song_rows() if r.get("song")
    ]
    assert {r["song"] for r in rows if r["test_set"] == "test1"} == {
        r["song"] for r in rows if r["test_set"] == "test2"
    }
    record = song_preferences(rows, 0.5, VALID_RMSE_SOURCE)
    for name in ("test1", "test2"):
        expected, pairs = same_pairs_pair_acc([r for r in rows if r["test_set"] == name])
        block = record["sets"][name]
        assert (block["clips"], block["songs"], block["pairs"]) == (20, 2, pairs)
        assert block["accuracy"] == pytest.approx(expected, abs=1e-12)
    pooled, pairs = same_pairs_pair_acc(rows)
    across = sum(
        a["test_set"] != b["test_set"] and a["song"] == b["song"] and a["system_id"] != b["system_id"]
        for a, b in itertools.combinations(rows, 2)
    )
    assert across > 0  # grouped by the name alone, these pairs would join the pool
    assert (record["all"]["songs"], record["all"]["pairs"]) == (4, pairs)
    assert record["all"]["accuracy"] == pytest.approx(pooled, abs=1e-12)
