"""DNSMOS baseline: the bundled ONNX models, the reference's pre-processing and the sqa-baseline CLI."""

from __future__ import annotations

import csv
import importlib.resources
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr
from scipy import signal

from sqa import metrics
from sqa.baselines.cli import main
from sqa.baselines.dnsmos import DNSMOS, SAMPLE_RATE, WINDOW, window_starts
from sqa.core.atomic import json_text
from sqa.reports.results import build_table

# (formant frequencies, bandwidths) in Hz of the vowels a, i, o, e.
VOWELS = (
    ((730, 1090, 2440), (80, 90, 120)),
    ((270, 2290, 3010), (60, 100, 120)),
    ((570, 840, 2410), (60, 80, 120)),
    ((530, 1840, 2480), (60, 100, 120)),
)
# speechmos.dnsmos.run (librosa 0.11 features) on speech_like(): the pre-processing here must match it.
REFERENCE = {"sig": 3.3078, "bak": 3.0605, "ovrl": 2.5545, "p808": 2.5807}


def speech_like(seconds: float = 4.6, seed: int = 1) -> np.ndarray:
    """A speech-like 16 kHz signal: pulse source, vowel formants, 4 syllables/s, pauses, a noise floor."""
    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    f0 = 120 + 25 * np.sin(2 * np.pi * 0.6 * t) + 10 * np.sin(2 * np.pi * 2.3 * t)
    source = np.diff(2 * (np.cumsum(f0) / SAMPLE_RATE % 1.0), prepend=0.0)
    out = np.zeros(n)
    syllable = SAMPLE_RATE // 4
    for i, start in enumerate(range(0, n, syllable)):
        seg = source[start : start + syllable]
        formants, bandwidths = VOWELS[i % len(VOWELS)]
        voiced = np.zeros_like(seg)
        for fc, bw in zip(formants, bandwidths, strict=True):
            r = np.exp(-np.pi * bw / SAMPLE_RATE)
            voiced += signal.lfilter([1 - r], [1, -2 * r * np.cos(2 * np.pi * fc / SAMPLE_RATE), r * r], seg)
        out[start : start + syllable] = voiced * np.sin(np.pi * np.arange(seg.size) / seg.size) ** 0.7
    out *= np.sin(np.pi * t / 0.9) ** 2 > 0.05
    out = 0.3 * out / np.abs(out).max() + 0.002 * np.random.default_rng(seed).standard_normal(n)
    # Band-limited below 7 kHz like a real recording, so resampling round trips are near exact.
    sos = signal.butter(8, 7000, fs=SAMPLE_RATE, output="sos")
    return signal.sosfilt(sos, out).astype(np.float32)


@pytest.fixture(scope="module")
def scorer() -> DNSMOS:
    return DNSMOS()


@pytest.fixture(scope="module")
def clean(scorer: DNSMOS) -> tuple[np.ndarray, dict[str, float]]:
    wav = speech_like()
    return wav, scorer.score(wav)


def test_models_are_bundled_with_the_package(scorer):
    models = importlib.resources.files("speechmos") / "dnsmos_models"
    assert (models / "sig_bak_ovr.onnx").is_file() and (models / "model_v8.onnx").is_file()
    assert isinstance(scorer, DNSMOS)


def test_scores_match_the_reference_implementation(clean):
    _, scores = clean
    assert set(scores) == {"sig", "bak", "ovrl", "p808"}
    for key, expected in REFERENCE.items():
        assert scores[key] == pytest.approx(expected, abs=2e-3), key


def test_heavy_noise_lowers_background_and_overall(scorer, clean):
    wav, scores = clean
    noise = np.random.default_rng(0).standard_normal(wav.size) * np.sqrt(np.mean(wav**2))
    noisy = scorer.score((wav + noise).astype(np.float32))  # 0 dB SNR
    assert noisy["bak"] < scores["bak"] - 1.0
    assert noisy["ovrl"] < scores["ovrl"] - 1.0


def test_scores_are_deterministic(scorer, clean):
    wav, scores = clean
    assert scorer.score(wav.copy()) == scores


def test_short_clip_is_repeated_to_the_window(scorer, clean):
    wav, scores = clean
    # The reference doubles a short clip until it fills one 9.01 s window: 4.6 s -> 9.2 s.
    assert wav.size < WINDOW <= 2 * wav.size
    assert scorer.score(np.tile(wav, 2)) == pytest.approx(scores, abs=1e-5)


def test_window_starts_follow_the_reference():
    assert window_starts(WINDOW) == [0]
    assert window_starts(10 * SAMPLE_RATE + 1) == [0]
    assert window_starts(11 * SAMPLE_RATE) == [0, SAMPLE_RATE]
    # The reference's float window end falls one sample short for windows 7..10 of a 20 s clip.
    assert window_starts(20 * SAMPLE_RATE) == [i * SAMPLE_RATE for i in range(7)]


def test_44k_stereo_file_scores_like_16k_mono(tmp_path, scorer, clean):
    wav, _ = clean
    mono = tmp_path / "mono16k.wav"
    stereo = tmp_path / "stereo44k.wav"
    sf.write(mono, wav, SAMPLE_RATE, subtype="FLOAT")
    up = soxr.resample(wav, SAMPLE_RATE, 44100, quality="HQ")
    sf.write(stereo, np.stack([1.2 * up, 0.8 * up], axis=1), 44100, subtype="FLOAT")
    a, b = scorer.score_file(mono), scorer.score_file(stereo)
    assert b == pytest.approx(a, abs=0.01)


def test_rejects_bad_input(scorer):
    with pytest.raises(ValueError, match="mono"):
        scorer.score(np.zeros((2, 100), dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        scorer.score(np.full(100, np.nan, dtype=np.float32))


def write_rows(path: Path, rows: list[dict[str, str]]) -> Path:
    """`rows` as a CSV manifest at `path` (their keys as the header)."""
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_corpus(root: Path, bad: bool = False) -> Path:
    """A CSV manifest: systems clean and noisy in test sets setA (2 clips each) and setB (1 clip each).

    With `bad`, one good clip and an unreadable file instead.
    """
    rows = []
    for t, test_set in enumerate(("setA", "setB")):
        for s, snr in enumerate((None, 5.0)):
            for u in range(2 - t):
                wav = speech_like(seconds=2.4 + 0.1 * u, seed=10 * t + u)
                if snr is not None:
                    noise = np.random.default_rng(u).standard_normal(wav.size)
                    wav = wav + noise * np.sqrt(np.mean(wav**2) / 10 ** (snr / 10))
                name = f"{test_set}-sys{s}-{u}"
                sf.write(root / f"{name}.wav", wav.astype(np.float32), SAMPLE_RATE)
                mos = 4.2 - 2.0 * s + 0.3 * u + 0.1 * t
                rows.append([f"{name}.wav", mos, f"sys{s}", name, "test", test_set])
    if bad:
        (root / "broken.wav").write_bytes(b"not audio")
        rows = rows[:1] + [["broken.wav", 3.0, "sys0", "broken", "test", "setA"]]
    manifest = root / "manifest.csv"
    with manifest.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["wav_path", "score", "system_id", "sample_id", "split", "test_set"])
        writer.writerows(rows)
    return manifest


def test_cli_writes_predictions_and_metrics(tmp_path, capsys):
    manifest = write_corpus(tmp_path)
    run_dir = tmp_path / "run"
    assert main(["--corpus", "csv", "--manifest", str(manifest), "--run-dir", str(run_dir)]) == 0
    assert "utt    srcc" in capsys.readouterr().out
    with (run_dir / "predictions.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["sample_id", "system_id", "test_set", "mos", "pred", "wav_path"]
    assert len(rows) == 6
    expected = metrics.evaluate_sets(
        [float(r["pred"]) for r in rows],
        [float(r["mos"]) for r in rows],
        [r["system_id"] for r in rows],
        [r["test_set"] for r in rows],
        bootstrap=1000,
    )
    saved = json.loads((run_dir / "metrics.json").read_text())
    # The same intervals and plots as a training run's.
    assert saved["avg"]["ci"]["utt"]["rmse"] is not None
    assert {p.name for p in (run_dir / "plots").iterdir()} == {
        f"{s}_{level}.png" for s in ("setA", "setB") for level in ("utt", "sys")
    }
    assert set(saved) == {"setA", "setB", "avg"}
    assert saved == json.loads(json_text(expected))
    # Two systems per set: no correlations (null), but the one pair, noisy below clean, is
    # ordered right in both sets.
    assert saved["avg"]["sys"]["lcc"] is None and saved["avg"]["sys"]["pair_acc"] == 1.0
    # sqa-table reads the baseline's run directory like a trained run's.
    header, table = build_table([("DNSMOS", str(run_dir))])
    assert table[0][:2] == ["DNSMOS", "1"]


def test_cli_names_unreadable_audio(tmp_path, capsys):
    manifest = write_corpus(tmp_path, bad=True)
    run_dir = tmp_path / "run"
    assert main(["--corpus", "csv", "--manifest", str(manifest), "--run-dir", str(run_dir)]) == 1
    err = capsys.readouterr().err
    assert "broken.wav" in err and "[broken]" in err
    assert not run_dir.exists()


def test_on_another_scale_errors_follow_a_line_fitted_on_the_training_clips(tmp_path):
    # The corpus of `write_corpus` on 0-100 (y -> 25 (y - 1)), with its setB clips as training clips.
    manifest = write_corpus(tmp_path)
    with manifest.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["score"] = repr(25.0 * (float(r["score"]) - 1.0))
        if r["test_set"] == "setB":
            r["split"], r["test_set"] = "train", ""
    wide = write_rows(tmp_path / "wide.csv", rows)
    run_dir = tmp_path / "run"
    argv = [
        "--corpus",
        "csv",
        "--manifest",
        str(wide),
        "--score-range",
        "0",
        "100",
        "--run-dir",
        str(run_dir),
    ]
    assert main([*argv, "--bootstrap", "0"]) == 0
    scorer = DNSMOS()
    train = [r for r in rows if r["split"] == "train"]
    raw_train = [scorer.score_file(tmp_path / r["wav_path"])["ovrl"] for r in train]
    b, a = np.polyfit(raw_train, [float(r["score"]) for r in train], 1)
    info = json.loads((run_dir / "run_info.json").read_text())
    # The run scores clips in batches, this test one at a time: float32 inference differs by about
    # 1e-6 between the two, which the fitted line carries.
    line = info["scale_map"]
    assert line["a"] == pytest.approx(a, rel=1e-5) and line["b"] == pytest.approx(b, rel=1e-5)
    assert info["score_range"] == [0.0, 100.0]
    with (run_dir / "predictions.csv").open(newline="") as fh:
        predicted = list(csv.DictReader(fh))
    raw = [scorer.score_file(tmp_path / f"{r['sample_id']}.wav")["ovrl"] for r in predicted]
    true = [float(r["mos"]) for r in predicted]
    # `pred` is on the corpus's scale; errors are of the mapped scores, correlations of DNSMOS's own.
    np.testing.assert_allclose([float(r["pred"]) for r in predicted], [a + b * v for v in raw], rtol=1e-5)
    saved = json.loads((run_dir / "metrics.json").read_text())["setA"]
    mapped = np.array([a + b * v for v in raw])
    assert saved["utt"]["rmse"] == pytest.approx(
        float(np.sqrt(np.mean((mapped - np.array(true)) ** 2))), rel=1e-5
    )
    assert saved["utt"]["pair_acc"] == pytest.approx(metrics.pair_acc(np.array(raw), np.array(true)))


# 10-20 s of subprocesses or scoring: with the slow tests, as the default run is at its budget.
@pytest.mark.slow
def test_batched_scores_are_the_clip_by_clip_scores(tmp_path, scorer, clean):
    wav, _ = clean
    rng = np.random.default_rng(3)
    # A 1 s clip (doubled 4 times), the 4.6 s clip, a noisy copy and a 12.5 s clip (3 windows):
    # 1 + 1 + 1 + 3 windows, so the batches mix windows of different clips.
    clips = [
        wav[:SAMPLE_RATE],
        wav,
        (wav + 0.05 * rng.standard_normal(wav.size)).astype(np.float32),
        np.tile(wav, 3)[: int(12.5 * SAMPLE_RATE)],
    ]
    one_by_one = [scorer.score(c) for c in clips]
    for got, expected in zip(scorer.score_batch(clips), one_by_one, strict=True):
        assert got == pytest.approx(expected, abs=1e-6)
    assert scorer.score_batch([]) == []
    # Files: read by the scorer's loader in length-sorted batches of 2, an unreadable file at its place.
    paths = []
    for i, c in enumerate(clips):
        paths.append(tmp_path / f"clip{i}.wav")
        sf.write(paths[-1], c, SAMPLE_RATE, subtype="FLOAT")
    (tmp_path / "broken.wav").write_bytes(b"not audio")
    paths.insert(2, tmp_path / "broken.wav")
    results = sorted(scorer.score_files(paths, batch_size=2))
    assert [r.index for r in results] == list(range(5))
    assert results[2].scores is None and "broken.wav" in results[2].error
    files = [r.scores for r in results if r.error is None]
    # Written as float32, the files read back as the clips themselves.
    for got, expected in zip(files, one_by_one, strict=True):
        assert got == pytest.approx(expected, abs=1e-6)
    # Decoded in a DataLoader worker: the same scores.
    in_worker = sorted(scorer.score_files(paths, batch_size=3, num_workers=1))
    for got, expected in zip([r.scores for r in in_worker if r.error is None], files, strict=True):
        assert got == pytest.approx(expected, abs=1e-6)


def test_cli_predictions_are_the_clip_by_clip_scores_in_corpus_order(tmp_path, scorer):
    manifest = write_corpus(tmp_path)
    run_dir = tmp_path / "run"
    argv = ["--corpus", "csv", "--manifest", str(manifest), "--run-dir", str(run_dir), "--bootstrap", "0"]
    assert main([*argv, "--output", "sig", "--num-workers", "1"]) == 0
    with manifest.open(newline="") as fh:
        expected = sorted(csv.DictReader(fh), key=lambda r: r["test_set"])
    with (run_dir / "predictions.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["sample_id"] for r in rows] == [r["sample_id"] for r in expected]
    for row, source in zip(rows, expected, strict=True):
        assert float(row["pred"]) == pytest.approx(
            scorer.score_file(tmp_path / source["wav_path"])["sig"], abs=1e-6
        )
    assert main([*argv, "--num-workers", "-1"]) == 2
