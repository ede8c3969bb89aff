"""Scoring an export with a spread: sqa-score columns, `score_with_spread`, chunks and preferences."""

from __future__ import annotations

import csv
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa.core.spread import INTERVAL_LEVELS, interval, listener_probability, pooled, probability
from sqa.data.audio import load_audio
from sqa.exports.format import export_predictor
from sqa.scoring.scorer import Scorer, SpreadScore
from tests.exports.test_datastore import clips, export_with_store
from tests.models.test_uncertainty import tiny
from tests.scoring.test_scoring import run_score, sung_phrase, write_clips

LEVEL90 = INTERVAL_LEVELS["90"]


@pytest.fixture(scope="module")
def uncertain_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained tiny Gaussian uncertain predictor on a 0-10 scale (spreads scale by 2.5)."""
    model = tiny(score_range=[0.0, 10.0])
    return export_predictor(model, tmp_path_factory.mktemp("uncertain") / "export", 16000, ["d"])


def alone(scorer: Scorer, wav: np.ndarray) -> tuple[float, float]:
    """The predictor's own score and spread (export scale) of one waveform (N,) forwarded alone."""
    with torch.no_grad():
        out = scorer.predictor(torch.from_numpy(wav)[None], torch.tensor([wav.shape[0]]))
    spread = scorer.predictor.spread_to_scale(out.spread)
    return float(scorer.predictor.to_scale(out.score)[0]), float(spread[0])


def test_sqa_score_adds_spread_and_90_interval_equal_to_the_models_forward(uncertain_export, tmp_path):
    paths = write_clips(tmp_path / "wavs", [16000, 5000, 30000])
    out = tmp_path / "s.csv"
    args = ["--output", out, "--batch-size", 2, "--num-workers", 0, "--device", "cpu"]
    assert run_score(uncertain_export, *args, *paths) == 0
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["path", "score", "spread", "lo90", "hi90"]
    scorer = Scorer(uncertain_export)
    assert scorer.distribution == "gaussian"
    for row, path in zip(rows, paths, strict=True):
        score, spread = alone(scorer, load_audio(path, 16000))
        low, high = interval(score, spread, LEVEL90, "gaussian")
        got = [float(row[k]) for k in ("score", "spread", "lo90", "hi90")]
        assert got == pytest.approx([score, spread, low, high], abs=1e-5)
    assert run_score(uncertain_export, "--output", tmp_path / "s.json", "--num-workers", 0, *paths) == 0
    records = json.loads((tmp_path / "s.json").read_text())
    assert list(records[0]) == ["path", "score", "spread", "lo90", "hi90"]
    assert [r["spread"] for r in records] == pytest.approx([float(r["spread"]) for r in rows], abs=1e-12)


def test_an_export_without_a_spread_writes_the_columns_it_always_did(default_export, tmp_path):
    paths = write_clips(tmp_path / "wavs", [16000, 5000])
    for name in ("s.csv", "s.json"):
        assert run_score(default_export, "--output", tmp_path / name, "--num-workers", 0, *paths) == 0
    with (tmp_path / "s.csv").open() as fh:
        assert next(csv.reader(fh)) == ["path", "score"]
    assert [list(r) for r in json.loads((tmp_path / "s.json").read_text())] == [["path", "score"]] * 2
    scorer = Scorer(default_export)
    assert scorer.distribution is None
    wav = load_audio(paths[0], 16000)
    assert scorer.score_with_spread(wav, 16000) == SpreadScore(scorer.score(wav, 16000), None, None)


def test_score_with_spread_is_the_scores_and_does_not_depend_on_batch_mates(uncertain_export):
    rng = np.random.default_rng(0)
    wavs = [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in (24000, 3000, 12000)]
    one = Scorer(uncertain_export, batch_size=1)
    many = Scorer(uncertain_export, batch_size=3)
    results = many.score_with_spread(wavs, 16000)
    assert [r.score for r in results] == many.score(wavs, 16000)
    for wav, result in zip(wavs, results, strict=True):
        assert one.score_with_spread(wav, 16000) == result
        score, spread = alone(one, wav)
        assert (result.score, result.spread) == pytest.approx((score, spread), abs=1e-6)
        low, high = interval(result.score, result.spread, LEVEL90, "gaussian")
        assert result.interval90 == (float(low), float(high))
    # A padded batch (what a GPU scores at once) gives each clip its own spread too.
    lengths = torch.tensor([w.size for w in wavs])
    padded = torch.zeros(3, int(lengths.max()))
    for i, wav in enumerate(wavs):
        padded[i, : wav.size] = torch.from_numpy(wav)
    with torch.no_grad():
        batch = many.predictor.spread_to_scale(many.predictor(padded, lengths).spread)
    assert batch.tolist() == pytest.approx([r.spread for r in results], abs=1e-5)


def test_pooled_spread_is_the_weighted_rms_on_hand_numbers():
    # √((1·1² + 3·2²) / 4) = √(13/4); equal spreads pool to themselves.
    assert pooled(np.array([1.0, 2.0]), np.array([1, 3])) == pytest.approx(math.sqrt(13 / 4))
    assert pooled(np.array([0.7, 0.7, 0.7]), np.array([5, 1, 9])) == pytest.approx(0.7)


# 2.5 s in windows of 2 s: two windows (75 and 49 kept frames); 7 s: six.
@pytest.mark.parametrize(("seconds", "windows"), [(2.5, 2), (7.0, 6)])
def test_a_chunked_clips_spread_pools_its_windows_by_kept_frames(uncertain_export, seconds, windows):
    wav = sung_phrase(seconds)
    chunked = Scorer(uncertain_export, chunk_seconds=2.0)
    pieces = chunked.prepare(wav)
    assert len(pieces) == windows
    spreads, kept = [], []
    for piece, _, (lo, hi) in pieces:
        spreads.append(alone(chunked, piece)[1])
        kept.append(hi - lo)
    by_hand = math.sqrt(sum(n * s**2 for n, s in zip(kept, spreads, strict=True)) / sum(kept))
    # Unequal weights and spreads: the frame weighting shows.
    assert len(set(kept)) > 1 and max(spreads) - min(spreads) > 1e-4
    assert abs(by_hand - float(np.mean(spreads))) > 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the chunk warning of short log-mel windows
        result = chunked.score_with_spread(wav, 16000)
    assert result.spread == pytest.approx(by_hand, abs=1e-6)
    assert result.interval90 == pytest.approx(interval(result.score, by_hand, LEVEL90, "gaussian"), abs=1e-5)


def test_listener_probability_on_hand_numbers():
    # √(0.6² + 0.8²) = 1: a difference of 1 is Φ(1) = 0.841345; a Laplace scale b has SD √2·b.
    assert listener_probability(1.0, 0.6, 0.8, "gaussian") == pytest.approx(0.841345, abs=1e-6)
    root2 = math.sqrt(2.0)
    assert listener_probability(1.0, 0.6 / root2, 0.8 / root2, "laplace") == pytest.approx(0.841345, abs=1e-6)
    assert listener_probability(0.0, 0.3, 2.0, "gaussian") == 0.5


def test_prefer_uses_the_clips_spreads_and_a_given_sigma_asks_about_the_mos(uncertain_export, tmp_path):
    good = sung_phrase(1.5)
    noisy = good + 0.3 * np.random.default_rng(0).standard_normal(good.size).astype(np.float32)
    model = Scorer(uncertain_export)
    a, b = model.score_with_spread([good, noisy], 16000)
    with warnings.catch_warnings():
        # No PreferenceWarning although the export records no RMSE: the spreads need none.
        warnings.simplefilter("error")
        result = model.prefer(good, noisy, 16000)
    difference = a.score - b.score
    by_hand = 0.5 * (1 + math.erf(difference / math.sqrt(2 * (a.spread**2 + b.spread**2))))
    assert (result.difference, result.basis) == (pytest.approx(difference), "listener")
    assert result.p_a_better == pytest.approx(by_hand, abs=1e-12)
    mos = model.prefer(good, noisy, 16000, sigma=0.5)
    assert mos.basis == "mos" and mos.p_a_better == pytest.approx(probability(difference, 0.5))
    # sqa-score --pairs gives the same probability.
    sf.write(tmp_path / "a.wav", good, 16000, subtype="FLOAT")
    sf.write(tmp_path / "b.wav", noisy, 16000, subtype="FLOAT")
    (tmp_path / "pairs.csv").write_text("a,b\na.wav,b.wav\n")
    out = tmp_path / "p.csv"
    assert (
        run_score(uncertain_export, "--pairs", tmp_path / "pairs.csv", "--output", out, "--num-workers", 0)
        == 0
    )
    with out.open() as fh:
        (row,) = csv.DictReader(fh)
    assert float(row["p_a_better"]) == pytest.approx(by_hand, abs=1e-6)


def test_knn_and_fusion_scores_drop_the_spread_and_the_head_with_a_datastore_keeps_it(tmp_path):
    # The spread was calibrated about the head's own score: a kNN or fused score carries none, while
    # the head's score looked up as its neighbours' domain is still the head's, and keeps it.
    model = tiny(num_domains=2, domain_dim=4)
    export = export_with_store(tmp_path, model, domains=[0, 0, 0, 1, 1, 1])
    head = Scorer(export, domain="neighbours")
    assert head.retrieval is not None and head.distribution == "gaussian"
    assert all(s.spread is not None and s.spread > 0 for s in head.score_with_spread(clips(), 16000))
    for mode in ("knn", "fusion"):
        scorer = Scorer(export, mode=mode, domain=0)
        assert scorer.distribution is None, mode
        for clip in scorer.score_with_spread(clips(), 16000):
            assert (clip.spread, clip.interval90) == (None, None), mode


def test_a_clip_without_vocal_activity_has_no_score_spread_or_interval_and_its_batch_mates_keep_theirs(
    uncertain_export,
):
    scorer = Scorer(uncertain_export, vocal_only=True)
    silent, sung = np.zeros(16000, np.float32), sung_phrase(1.5)
    with pytest.warns(UserWarning, match="audio\\[0\\]"):
        first, second = scorer.score_with_spread([silent, sung], 16000)
    assert first == SpreadScore(None, None, None)
    assert second == Scorer(uncertain_export, vocal_only=True).score_with_spread(sung, 16000)
    assert second.spread > 0 and second.interval90[0] < second.score < second.interval90[1]
