"""The scorer against an independent reference: the in-memory predictor called on one clip at a time."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa.data.pitch import F0Extractor
from sqa.exports.format import export_predictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring.scorer import Scorer


def test_scores_are_the_predictors_per_clip_outputs_in_input_order(tmp_path):
    torch.manual_seed(1)
    model = MOSPredictor(LogMelBackbone()).eval()
    export = export_predictor(model, tmp_path / "export", 16000, ["d"])
    rng = np.random.default_rng(0)
    # Unsorted lengths and distinct spectra (tone + noise), so any reordering shows.
    lengths = (30000, 1600, 48000, 5000, 16000, 9000, 3200)
    wavs = []
    for k, n in enumerate(lengths):
        t = np.arange(n) / 16000
        tone = np.sin(2 * np.pi * (150 + 400 * k) * t)
        wavs.append((0.3 * tone + (0.02 + 0.1 * k) * rng.standard_normal(n)).astype(np.float32))
    with torch.no_grad():
        expected = [model(torch.from_numpy(w)[None], torch.tensor([w.shape[0]])).score.item() for w in wavs]
    assert min(abs(a - b) for a, b in itertools.combinations(expected, 2)) > 1e-3
    got = Scorer(export, batch_size=3).score_waveforms(wavs)
    np.testing.assert_allclose(got, expected, atol=1e-5)


def tones(lengths: tuple[int, ...], seed: int = 0) -> list[np.ndarray]:
    """Tone + noise clips (N,) at 16 kHz of `lengths`, each of another pitch and noise level."""
    rng = np.random.default_rng(seed)
    wavs = []
    for k, n in enumerate(lengths):
        t = np.arange(n) / 16000
        tone = np.sin(2 * np.pi * (150 + 90 * k) * t)
        wavs.append((0.3 * tone + (0.02 + 0.05 * k) * rng.standard_normal(n)).astype(np.float32))
    return wavs


def test_domain_pitch_pooling_and_dimensions_are_the_predictors_per_clip_outputs(tmp_path):
    torch.manual_seed(2)
    model = MOSPredictor(
        LogMelBackbone(n_mels=16, channels=8),
        num_domains=2,
        domain_dim=4,
        pitch="midi",
        pitch_dim=8,
        dimensions=["mos", "lyrics"],
    ).eval()
    f0 = F0Extractor()
    export = export_predictor(model, tmp_path / "export", 16000, ["p1", "p2"], f0_extractor=f0)
    wavs = tones((9000, 4000, 16000))
    model.pooling = "s3prl_padded_mean"
    with torch.no_grad():
        expected = [
            model(
                torch.from_numpy(w)[None],
                torch.tensor([w.size]),
                torch.tensor([1]),
                torch.from_numpy(f0(w, 16000))[None],
            ).scores[0]
            for w in wavs
        ]
    scorer = Scorer(export, batch_size=2, domain="p2", pooling="s3prl_padded_mean")
    np.testing.assert_allclose(scorer.score_dimensions(wavs), torch.stack(expected).numpy(), atol=1e-5)
    paths = []
    for i, w in enumerate(wavs):
        paths.append(tmp_path / f"{i}.wav")
        sf.write(paths[-1], w, 16000, subtype="FLOAT")
    paths.insert(1, tmp_path / "missing.wav")
    results = list(scorer.score_files(paths))
    by_index = {r.index: r for r in results}
    assert sorted(by_index) == [0, 1, 2, 3]
    assert (
        by_index[1].score is None and by_index[1].path == str(paths[1]) and "missing.wav" in by_index[1].error
    )
    for i, row in zip((0, 2, 3), expected, strict=True):
        result = by_index[i]
        assert result.path == str(paths[i]) and result.error is None and result.warning is None
        assert result.score == pytest.approx(float(row[0]), abs=1e-5)
        assert dict(result.dimension_scores) == pytest.approx({"lyrics": float(row[1])}, abs=1e-5)


def test_scores_of_a_score_range_are_mapped_whole_and_chunked(tmp_path):
    # One model on the 1-5 scale and the same weights on a 0-10 scale: every score maps linearly.
    exports = []
    for name, score_range in (("five", [1.0, 5.0]), ("ten", [0.0, 10.0])):
        torch.manual_seed(3)
        model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), score_range=score_range).eval()
        exports.append(export_predictor(model, tmp_path / name, 16000, ["d"]))
    wav = tones((30000,))[0]
    for chunk in (None, 0.5):
        five, ten = (Scorer(e, chunk_seconds=chunk).score(wav, 16000) for e in exports)
        assert ten == pytest.approx((five - 1.0) * 2.5, abs=1e-5), chunk
        assert abs(five - 3.0) > 1e-3
