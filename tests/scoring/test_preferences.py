"""Preferences: P(A better) from score differences and the export's residual spread; `sqa-score --pairs`."""

from __future__ import annotations

import json
import math
import shutil
import warnings

import numpy as np
import pytest
import soundfile as sf

import sqa
from sqa.metrics import pair_acc
from sqa.scoring import cli as score
from sqa.scoring.preferences import evaluate_preferences, pair_outcomes, preference_accuracy, probability
from sqa.scoring.scorer import PreferenceWarning
from tests.scoring.test_scoring import sung_phrase


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


def test_stated_probabilities_are_calibrated_where_residuals_are_normal():
    # Residuals of spread σ, as the formula assumes: every bin's observed rate is its stated one,
    # up to the sampling noise of 400 clips' pairs (which share clips, so are not independent).
    rng = np.random.default_rng(1)
    true = rng.uniform(1, 5, 400)
    pred = true + rng.normal(0, 0.5, true.size)
    result = evaluate_preferences(pred, true, np.zeros(true.size), sigma=0.5)
    assert result["pairs"] == 400 * 399 // 2
    assert len(result["bins"]) == 5 and result["max_gap"] < 0.05


@pytest.mark.filterwarnings("ignore::sqa.scoring.scorer.LearningWarning")
def test_prefer_uses_the_validation_rmse_and_says_when_it_falls_back(default_export, tmp_path):
    good = sung_phrase(2.0)
    noisy = good + 0.2 * np.random.default_rng(0).normal(size=good.size).astype(np.float32)
    export = tmp_path / "export"
    shutil.copytree(default_export, export)
    (export / "run_info.json").write_text(json.dumps({"learning_check": {"valid": {"rmse": 0.5}}}))
    model = sqa.load(export)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = model.prefer(good, noisy, 16000)
    assert result.difference == pytest.approx(result.score_a - result.score_b)
    assert result.p_a_better == pytest.approx(probability(result.difference, 0.5))
    assert model.prefer(good, noisy, 16000, sigma=1.0).p_a_better == pytest.approx(
        probability(result.difference, 1.0)
    )
    # Without a validation RMSE: the test RMSE, said once; without either, no probability.
    (export / "run_info.json").unlink()
    (export / "metrics.json").write_text(json.dumps({"avg": {"utt": {"rmse": 0.8}}}))
    with pytest.warns(PreferenceWarning, match="test RMSE 0.8"):
        fallback = sqa.load(export).prefer(good, noisy, 16000)
    assert fallback.p_a_better == pytest.approx(probability(fallback.difference, 0.8))
    (export / "metrics.json").unlink()
    with pytest.warns(PreferenceWarning, match="neither a validation RMSE"):
        assert sqa.load(export).prefer(good, noisy, 16000).p_a_better is None


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
