"""Scoring: any audio, whole clips, batches equal to one-by-one, bad inputs reported."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa import score
from sqa.data.audio import load_audio
from sqa.scoring import Scorer


def test_batched_scores_equal_one_by_one(default_export):
    rng = np.random.default_rng(0)
    wavs = [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in (1600, 16000, 5000, 48000, 400, 30000)]
    batched = Scorer(default_export, batch_size=4).score_waveforms(wavs)
    single = Scorer(default_export, batch_size=1).score_waveforms(wavs)
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_ten_minute_multichannel_flac_is_scored_whole(default_export, tmp_path):
    sr, seconds = 48000, 600
    t = np.arange(sr * seconds) / sr
    tone = 0.3 * np.sin(2 * np.pi * 220 * t)
    noise = np.random.default_rng(0).uniform(-0.3, 0.3, t.size)
    signal = np.where(t < seconds / 2, tone, noise)
    sf.write(tmp_path / "long.flac", np.stack([signal, signal, signal], axis=1), sr, subtype="PCM_16")
    scorer = Scorer(default_export)
    result = next(scorer.score_files([tmp_path / "long.flac"]))
    assert result.error is None
    wav = load_audio(tmp_path / "long.flac", 16000)
    assert wav.shape[0] == 16000 * seconds
    with torch.no_grad():
        whole = scorer.predictor(torch.from_numpy(wav)[None], torch.tensor([wav.shape[0]])).score.item()
        half = scorer.predictor(
            torch.from_numpy(wav[: wav.shape[0] // 2])[None], torch.tensor([wav.shape[0] // 2])
        )
    assert result.score == pytest.approx(whole, abs=1e-4)
    assert abs(result.score - half.score.item()) > 1e-3  # the second half counts


def test_short_clip_of_a_tenth_of_a_second(default_export, tmp_path):
    sf.write(tmp_path / "short.wav", np.full(800, 0.2), 8000, subtype="PCM_U8")
    result = next(Scorer(default_export).score_files([tmp_path / "short.wav"]))
    assert result.error is None and 1.0 <= result.score <= 5.0


def test_missing_empty_and_corrupt_inputs_are_reported_and_the_rest_written(default_export, tmp_path, capsys):
    sf.write(tmp_path / "good.wav", np.full(8000, 0.1), 16000)
    sf.write(tmp_path / "empty.wav", np.zeros(0), 16000)
    (tmp_path / "corrupt.flac").write_bytes(b"fLaC\x00\x00\x00\x22" + bytes(64))
    out = tmp_path / "scores.csv"
    inputs = ["missing.wav", "empty.wav", "good.wav", "corrupt.flac"]
    code = score.main(
        ["--checkpoint", str(default_export), "--output", str(out), *[str(tmp_path / i) for i in inputs]]
    )
    assert code == 1
    err = capsys.readouterr().err
    for name in ("missing.wav", "empty.wav", "corrupt.flac"):
        assert name in err
    lines = out.read_text().splitlines()
    assert lines[0] == "path,score" and len(lines) == 2 and lines[1].startswith(str(tmp_path / "good.wav"))


def test_unsafe_or_missing_export_exits_with_code_2(tmp_path, capsys):
    assert score.main(["--checkpoint", str(tmp_path / "nope"), "x.wav"]) == 2
    assert "not found" in capsys.readouterr().err
