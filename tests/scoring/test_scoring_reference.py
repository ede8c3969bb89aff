"""The scorer against an independent reference: the in-memory predictor called on one clip at a time."""

from __future__ import annotations

import itertools

import numpy as np
import torch

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
