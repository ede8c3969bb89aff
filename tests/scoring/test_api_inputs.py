"""What `Scorer.score` and `score_files` take and give back: paths, arrays of either layout, input order."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import sqa
from sqa.data.audio import AudioError
from sqa.scoring.clips import ClipWarning
from sqa.scoring.scorer import Scorer
from tests.conftest import REPO


def write(path: Path, seconds: float, rate: int = 16000, channels: int = 1, seed: int = 0) -> Path:
    """A float WAV of noise and a tone at `rate` Hz, (samples, channels) as soundfile writes it."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    data = np.stack(
        [
            0.2 * np.sin(2 * np.pi * (220 + 110 * c) * t) + 0.05 * rng.standard_normal(t.size)
            for c in range(channels)
        ],
        axis=1,
    )
    sf.write(path, data, rate, subtype="FLOAT")
    return path


@pytest.fixture(scope="module")
def predictor(default_export: Path) -> Scorer:
    return sqa.load(default_export, batch_size=3)


def test_score_files_returns_shuffled_inputs_in_input_order(predictor, tmp_path):
    seconds = [0.3, 2.0, 0.5, 1.5, 0.1, 1.0, 0.7, 1.8, 0.2, 1.2]
    paths = [write(tmp_path / f"clip{i}.wav", s, seed=i) for i, s in enumerate(seconds)]
    paths.append(tmp_path / "missing.wav")  # an unreadable file keeps its place too
    shuffled = [paths[i] for i in np.random.default_rng(1).permutation(len(paths))]
    results = list(predictor.score_files(shuffled))
    assert [r.path for r in results] == [str(p) for p in shuffled]
    assert [r.index for r in results] == list(range(len(shuffled)))
    assert [r.error is not None for r in results] == [p.name == "missing.wav" for p in shuffled]
    alone = {str(p): next(predictor.score_files([p])).score for p in paths}
    # Batches give one-by-one scores up to float rounding (tests/scoring/test_scoring.py).
    assert [r.score for r in results] == pytest.approx([alone[str(p)] for p in shuffled], abs=1e-5)
    # The inputs do exercise the reordering: as batches finish, the results come by length.
    as_done = [r.index for r in predictor.score_files(shuffled, ordered=False)]
    assert sorted(as_done) == list(range(len(shuffled))) and as_done != sorted(as_done)


def test_score_of_a_path_equals_the_score_of_its_audio_as_soundfile_reads_it(predictor, tmp_path):
    path = write(tmp_path / "song.wav", 1.5, rate=44100, channels=2)
    data, rate = sf.read(path)  # (samples, 2), float64
    assert data.shape == (66150, 2)
    from_path = predictor.score(str(path))
    assert predictor.score(path) == from_path  # os.PathLike as str
    assert predictor.score(data, rate) == pytest.approx(from_path, abs=1e-6)
    assert predictor.score(*sf.read(path)) == pytest.approx(from_path, abs=1e-6)


def test_a_list_mixing_paths_and_arrays_comes_back_in_input_order(predictor, tmp_path):
    a = write(tmp_path / "a.wav", 2.0, seed=1)
    b = write(tmp_path / "b.wav", 0.4, seed=2)
    clip = sf.read(write(tmp_path / "c.wav", 1.0, rate=22050, seed=3))[0]
    scores = predictor.score([a, clip, str(b), clip[:8000]], 22050)
    expected = [predictor.score(a), predictor.score(clip, 22050), predictor.score(b)]
    expected.append(predictor.score(clip[:8000], 22050))
    assert scores == pytest.approx(expected, abs=1e-6)
    assert len(set(scores)) == 4
    assert predictor.score((b, a)) == pytest.approx([expected[2], expected[0]], abs=1e-6)


def test_sample_rate_applies_to_arrays_only(predictor, tmp_path):
    path = write(tmp_path / "song.wav", 0.5)
    refused = (
        "sample_rate 16000 applies to arrays only; a file is read at its header's rate: leave sample_rate out"
    )
    for audio in (path, [path, path]):
        with pytest.raises(ValueError, match=f"^{re.escape(refused)}$"):
            predictor.score(audio, 16000)
    with pytest.raises(
        ValueError, match="^sample_rate applies to arrays only; a file is read at its header's rate$"
    ):
        predictor.timeline(path, 16000)
    assert predictor.score([], 16000) == [] and predictor.score([]) == []
    message = "score() needs the sample_rate of an array, e.g. score(audio, 44100); a path needs none"
    for audio in (np.zeros(1600), [path, np.zeros(1600)]):
        with pytest.raises(TypeError, match=f"^{re.escape(message)}$"):
            predictor.score(audio)


def test_a_timeline_keeps_the_scorers_sample_limit_and_names_an_array_audio(default_export, tmp_path):
    path = write(tmp_path / "song.wav", 0.5)  # 8000 samples at 16 kHz
    limited = Scorer(default_export, max_samples=7999)
    with pytest.raises(AudioError, match=f"^{re.escape(str(path))}: .* exceeds the limit of 7999 samples$"):
        limited.timeline(path)
    assert Scorer(default_export, max_samples=8000).timeline(path).frame_scores.shape == (24,)
    # Files scored in batches keep the limit too: the long one fails alone, naming it.
    short = write(tmp_path / "short.wav", 0.25, seed=1)
    results = list(Scorer(default_export, max_samples=7999, batch_size=2).score_files([short, path, short]))
    assert [r.error is None for r in results] == [True, False, True]
    assert results[1].error.endswith("exceeds the limit of 7999 samples")
    assert results[0].score == results[2].score == pytest.approx(limited.score(short), abs=1e-6)
    with pytest.raises(AudioError, match="^audio: the audio holds NaN or infinite samples$"):
        limited.timeline(np.full(1600, np.nan), 16000)


def test_an_unreadable_path_raises_naming_it(predictor, tmp_path):
    (tmp_path / "text.wav").write_text("not audio", encoding="utf-8")
    for bad in (tmp_path / "missing.wav", tmp_path / "text.wav"):
        with pytest.raises(AudioError, match=f"^{re.escape(str(bad))}: "):
            predictor.score([write(tmp_path / "good.wav", 0.5), bad])


def test_a_path_too_short_or_silent_warns_naming_it(predictor, tmp_path):
    sf.write(tmp_path / "silent.wav", np.zeros(16000), 16000)
    with pytest.warns(ClipWarning, match=f"^{re.escape(str(tmp_path / 'silent.wav'))}: silent"):
        predictor.score(tmp_path / "silent.wav")


def test_samples_by_channels_is_one_clip_whatever_its_memory_order(predictor):
    clip = np.stack([np.sin(np.arange(20000) / 7), np.random.default_rng(0).uniform(-0.3, 0.3, 20000)]).T
    assert clip.shape == (20000, 2)
    assert predictor.score(np.asfortranarray(clip), 16000) == predictor.score(clip, 16000)
    assert predictor.score(clip, 16000) == pytest.approx(predictor.score(clip.mean(axis=1), 16000), abs=1e-6)


@pytest.mark.parametrize("shape", [(16000, 8), (9, 8), (16000, 1)])
def test_a_last_dimension_of_at_most_8_below_a_longer_one_is_the_channels(predictor, shape):
    clip = np.random.default_rng(0).uniform(-0.3, 0.3, shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClipWarning)  # 9 samples: shorter than the receptive field
        score = predictor.score(clip, 16000)
        assert isinstance(score, float)
        assert score == pytest.approx(predictor.score(clip.mean(axis=1), 16000), abs=1e-6)


@pytest.mark.parametrize("shape", [(8, 16000), (8, 9), (1, 16000), (16, 16000)])
def test_fewer_rows_than_over_8_columns_is_a_batch_of_clips(predictor, shape):
    batch = np.random.default_rng(0).uniform(-0.3, 0.3, shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ClipWarning)
        scores = predictor.score(batch, 16000)
        assert scores == predictor.score(list(batch), 16000)
        assert scores == [predictor.score(row, 16000) for row in batch]


@pytest.mark.parametrize("shape", [(8, 8), (1, 1), (9, 9), (16000, 9), (1, 8)])
def test_a_shape_neither_a_batch_nor_samples_by_channels_is_refused(predictor, shape):
    message = (
        "audio: a 2-D clip is (samples, channels), with at most 8 channels and more samples, or "
        f"(1, samples); shape {shape} is neither: rows are clips (score(batch) scores a (clips, "
        "samples) batch, one score per row); for one clip's channels pass (samples, channels) or "
        "their mean"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        predictor.score(np.zeros(shape, dtype=np.float32), 16000)


def test_several_rows_as_one_clip_of_a_list_are_refused_naming_it(predictor):
    with pytest.raises(ValueError, match=r"^audio\[1\]: a 2-D clip is .* shape \(2, 16000\) is neither"):
        predictor.score([np.zeros(16000), np.zeros((2, 16000))], 16000)


def test_a_clip_with_no_samples_or_no_channels_is_refused(predictor):
    for shape in [(0,), (0, 100), (100, 0)]:
        with pytest.raises(AudioError, match=r"^audio: the clip holds no samples$"):
            predictor.score(np.zeros(shape, dtype=np.float32), 16000)


def test_sqa_score_prints_the_chunking_warning_as_one_line(default_export, tmp_path):
    # In a fresh interpreter, with Python's own warning filters and formatter.
    write(tmp_path / "song.wav", 3.0)
    args = ["--checkpoint", str(default_export), "--chunk-seconds", "1", "--num-workers", "0"]
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sqa.scoring.cli",
            *args,
            "--output",
            str(tmp_path / "s.csv"),
            str(tmp_path / "song.wav"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stderr.splitlines() == [
        "sqa-score: warning: LogMelBackbone windows shorter than 10 s moved scores of long songs by more "
        "than 0.02 MOS against whole-clip scoring (docs/scoring.md); use longer windows where memory allows"
    ]
