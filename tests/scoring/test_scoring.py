"""Scoring: any audio, whole clips, batches equal to one-by-one, bad inputs reported."""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa.data.audio import downmix_resample, load_audio
from sqa.scoring import cli as score
from sqa.scoring.clips import ClipWarning
from sqa.scoring.inputs import expand_inputs
from sqa.scoring.scorer import Scorer
from sqa.scoring.walks import listed_audio
from tests.conftest import REPO


def test_batched_scores_equal_one_by_one(default_export):
    rng = np.random.default_rng(0)
    wavs = [(0.1 * rng.standard_normal(n)).astype(np.float32) for n in (1600, 16000, 5000, 48000, 400, 30000)]
    batched = Scorer(default_export, batch_size=4).score_waveforms(wavs)
    single = Scorer(default_export, batch_size=1).score_waveforms(wavs)
    np.testing.assert_allclose(batched, single, atol=1e-5)


# Ten minutes of eight-channel audio decoded and scored: with the slow tests.
@pytest.mark.slow
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
    # libsndfile's reason, without its repeat of the path as bytes.
    assert f"{tmp_path / 'corrupt.flac'}: cannot read audio header (" in err and "b'" not in err
    lines = out.read_text().splitlines()
    assert lines[0] == "path,score" and len(lines) == 2 and lines[1].startswith(str(tmp_path / "good.wav"))


def test_a_manifest_naming_a_file_with_a_nul_character_is_reported_and_the_rest_scored(
    default_export, tmp_path, capsys
):
    sf.write(tmp_path / "good.wav", np.full(8000, 0.1), 16000)
    (tmp_path / "m.csv").write_text("wav_path\na\x00b.wav\ngood.wav\n", encoding="utf-8")
    out = tmp_path / "scores.csv"
    args = ["--checkpoint", str(default_export), "--output", str(out), str(tmp_path / "m.csv")]
    assert score.main(args) == 1
    nul = repr(str(tmp_path / "a\x00b.wav"))
    assert f"{nul}: a file name cannot hold a NUL character" in capsys.readouterr().err
    rows = out.read_text(encoding="utf-8").splitlines()[1:]
    assert [row.split(",")[0] for row in rows] == [str(tmp_path / "good.wav")]


def test_unsafe_or_missing_export_exits_with_code_2(tmp_path, capsys):
    assert score.main(["--checkpoint", str(tmp_path / "nope"), "x.wav"]) == 2
    assert "not found" in capsys.readouterr().err


def write_clips(folder, lengths, rate=16000, seed=0):
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    paths = []
    for i, n in enumerate(lengths):
        path = folder / f"sys{i % 3}-utt{i:03d}.wav"
        sf.write(path, 0.1 * rng.standard_normal(n), rate, subtype="FLOAT")
        paths.append(path)
    return paths


def run_score(export, *args):
    return score.main(["--checkpoint", str(export), *map(str, args)])


def test_batched_workers_equal_the_predictors_own_forward_in_input_order(default_export, tmp_path):
    lengths = [30000, 1600, 48000, 5000, 400, 16000, 22000, 9000, 700]
    paths = write_clips(tmp_path / "wavs", lengths)
    shuffled = [paths[i] for i in (4, 0, 8, 2, 6, 1, 7, 3, 5)]
    out = tmp_path / "s.csv"
    args = ["--output", out, "--batch-size", 4, "--num-workers", 2, "--device", "cpu"]
    assert run_score(default_export, *args, *shuffled) == 0
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["path"] for r in rows] == [str(p) for p in shuffled]
    scorer = Scorer(default_export)
    with torch.no_grad():
        for row, path in zip(rows, shuffled, strict=True):
            wav = torch.from_numpy(load_audio(path, 16000))
            wav = torch.nn.functional.pad(wav, (0, max(0, 400 - wav.shape[0])))
            reference = scorer.predictor(
                wav[None], torch.tensor([wav.shape[0]]), torch.zeros(1, dtype=torch.long)
            )
            assert float(row["score"]) == pytest.approx(reference.score.item(), abs=1e-5)


def test_files_are_decoded_in_this_process_unless_workers_are_asked(default_export, tmp_path, monkeypatch):
    from sqa.scoring import clips

    decoded_in = []

    def recording_load_audio(*args, **kwargs):
        decoded_in.append(os.getpid())
        return load_audio(*args, **kwargs)

    monkeypatch.setattr(clips, "load_audio", recording_load_audio)
    paths = write_clips(tmp_path, [1600, 3200])
    scorer = Scorer(default_export)
    assert all(r.error is None for r in scorer.score_files(paths))
    assert decoded_in == [os.getpid()] * 2
    # A worker decodes in its own process: nothing is recorded in this one.
    assert all(r.error is None for r in scorer.score_files(paths, num_workers=1))
    assert decoded_in == [os.getpid()] * 2
    # `score` (the API's paths) starts no process either.
    decoded_in.clear()
    assert len(scorer.score(paths)) == 2 and decoded_in == [os.getpid()] * 2


def test_output_in_a_missing_folder_is_refused_before_scoring(default_export, tmp_path, capsys, monkeypatch):
    (wav,) = write_clips(tmp_path, [8000])
    monkeypatch.setattr(
        "sqa.scoring.scorer.Scorer.score_files", lambda *a: pytest.fail("scored before the check")
    )
    assert run_score(default_export, "--output", tmp_path / "no" / "s.csv", wav) == 2
    assert "the folder" in capsys.readouterr().err and not (tmp_path / "no").exists()


def test_existing_output_needs_overwrite_and_an_input_is_never_overwritten(default_export, tmp_path, capsys):
    (wav,) = write_clips(tmp_path, [8000])
    out = tmp_path / "s.csv"
    out.write_text("keep me")
    assert run_score(default_export, "--output", out, wav) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err and out.read_text() == "keep me"
    assert run_score(default_export, "--output", out, "--overwrite", wav) == 0
    assert out.read_text().startswith("path,score\n")
    before = wav.read_bytes()
    as_json = tmp_path / "list.json"
    as_json.write_text("[]")
    manifest = tmp_path / "m.csv"
    manifest.write_text(f"wav_path\n{wav.name}\n")
    for victim in (manifest, as_json):
        assert run_score(default_export, "--output", victim, "--overwrite", manifest, as_json) == 2
        assert "is one of the inputs" in capsys.readouterr().err
    assert manifest.read_text() == f"wav_path\n{wav.name}\n" and wav.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temp files left


def test_all_inputs_failing_leaves_an_existing_output_untouched(default_export, tmp_path, capsys):
    out = tmp_path / "s.csv"
    out.write_text("path,score\nold.wav,3.0\n")
    (tmp_path / "bad.wav").write_bytes(b"not audio")
    assert run_score(default_export, "--output", out, "--overwrite", tmp_path / "bad.wav") == 1
    assert "was not written" in capsys.readouterr().err
    assert out.read_text() == "path,score\nold.wav,3.0\n"


def test_every_unscorable_input_is_reported(default_export, tmp_path, capsys):
    (good,) = write_clips(tmp_path / "wavs", [8000])
    (tmp_path / "empty").mkdir()
    (tmp_path / "nowav.csv").write_text("file,score\nx.wav,3\n")
    (tmp_path / "latin1.csv").write_bytes("wav_path,singer\nwavs/a.wav,Jos\xe9\n".encode("latin-1"))
    (tmp_path / "bom.csv").write_bytes("\ufeffwav_path,score\nwavs/sys0-utt000.wav,4.5\n".encode())
    (tmp_path / "blank.txt").write_text("\n\n")
    inputs = ["empty", "nowav.csv", "latin1.csv", "bom.csv", "blank.txt", "missing.wav", "wavs"]
    out = tmp_path / "s.csv"
    assert run_score(default_export, "--output", out, *[tmp_path / i for i in inputs]) == 1
    err = capsys.readouterr().err
    assert "empty: the folder holds no audio files" in err
    assert "nowav.csv: the CSV manifest has no wav_path or path column (columns: file, score)" in err
    assert "latin1.csv: not UTF-8 text" in err and "blank.txt: the list names no files" in err
    assert "missing.wav: does not exist" in err and "5 input(s) could not be scored; 2 clip(s) scored" in err
    assert "\r" not in err  # no progress bar when stderr is not a terminal
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["path"] for r in rows] == [str(tmp_path / "wavs" / good.name), str(good)]
    assert rows[0]["manifest_score"] == "4.5" and rows[1]["manifest_score"] == ""


@pytest.mark.parametrize(
    "flag, value, message",
    [
        ("--batch-size", "0", "--batch-size must be at least 1"),
        ("--num-workers", "-1", "--num-workers must be 0 or more"),
        ("--chunk-seconds", "0", "--chunk-seconds must be a number of seconds above 0"),
        ("--device", "cuda:7", "is not available"),
        ("--device", "nonsense", "unknown device"),
        ("--output", "scores.txt", "must end in .csv or .json"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(flag, value, message, default_export, tmp_path, capsys):
    (wav,) = write_clips(tmp_path, [8000])
    assert run_score(default_export, flag, value, wav) == 2
    assert message in capsys.readouterr().err


def test_one_sample_and_silent_clips_are_scored_with_a_warning(default_export, tmp_path, capsys):
    sf.write(tmp_path / "one.wav", np.full(1, 0.5), 16000, subtype="FLOAT")
    sf.write(tmp_path / "silent.wav", np.zeros(16000), 16000)
    out = tmp_path / "s.json"
    assert run_score(default_export, "--output", out, tmp_path / "one.wav", tmp_path / "silent.wav") == 0
    err = capsys.readouterr().err
    assert "one.wav: only 1 samples" in err and "silent.wav: silent" in err
    assert len(json.loads(out.read_text())) == 2


def test_decoded_audio_held_at_once_is_bounded_by_the_batch(default_export, tmp_path, monkeypatch):
    import weakref

    import sqa.scoring.clips

    paths = write_clips(tmp_path, [4000 + 100 * i for i in range(20)])
    alive: list[weakref.ref] = []
    peak = []

    def tracked(path, rate, max_samples):
        wav = load_audio(path, rate, max_samples)
        alive.append(weakref.ref(wav))
        peak.append(sum(r() is not None for r in alive))
        return wav

    monkeypatch.setattr(sqa.scoring.clips, "load_audio", tracked)
    results = list(Scorer(default_export, batch_size=3).score_files(paths, num_workers=0))
    assert len(results) == 20 and all(r.error is None for r in results)
    assert max(peak) <= 2 * 3  # the batch being decoded and the one just scored


def test_by_system_means_and_manifest_columns(default_export, tmp_path):
    paths = write_clips(tmp_path / "wavs", [8000, 9000, 10000, 11000, 12000, 13000])
    manifest = tmp_path / "m.csv"
    manifest.write_text(
        "wav_path,system_id,score,singer\nwavs/sys0-utt000.wav,A,4.0,x\nwavs/sys1-utt001.wav,A,2.0,y\n"
    )
    out = tmp_path / "s.csv"
    assert run_score(default_export, "--output", out, "--by-system", manifest, *paths[2:]) == 0
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["system_id"] for r in rows] == ["A", "A", "sys2", "sys0", "sys1", "sys2"]
    assert rows[0]["manifest_score"] == "4.0" and rows[1]["singer"] == "y" and rows[2]["singer"] == ""
    with (tmp_path / "s.systems.csv").open() as fh:
        systems = {r["system_id"]: r for r in csv.DictReader(fh)}
    assert sorted(systems) == ["A", "sys0", "sys1", "sys2"]
    # Ranked by mean score, best first.
    means = [float(r["score"]) for r in systems.values()]
    assert means == sorted(means, reverse=True)
    expected = np.mean([float(r["score"]) for r in rows if r["system_id"] == "sys2"])
    assert systems["sys2"]["n"] == "2" and float(systems["sys2"]["score"]) == pytest.approx(
        expected, abs=1e-9
    )


def test_by_system_without_a_system_for_every_clip_stops_before_scoring_and_writes_nothing(
    default_export, tmp_path, capsys
):
    # Two clips side by side in one folder: neither a folder of their own nor a <sys>-<utt> name.
    sf.write(tmp_path / "nosystem.wav", np.full(8000, 0.1), 16000)
    sf.write(tmp_path / "sys1-utt1.wav", np.full(9000, 0.1), 16000)
    out = tmp_path / "s.csv"
    args = ["--output", out, "--by-system", tmp_path / "nosystem.wav", tmp_path / "sys1-utt1.wav"]
    assert run_score(default_export, *args) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"sqa-score: --by-system: cannot tell the system of 1 clip(s), e.g. {tmp_path / 'nosystem.wav'}; "
        "put each system's clips in a folder of its own (audio/<system>/...) and give the folder above "
        "them, name them <sys>-<utt>, or give a manifest with a system_id column; nothing was scored"
    )
    assert not out.exists() and not (tmp_path / "s.systems.csv").exists()


def sung_phrase(seconds: float, rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A long, statistically homogeneous sung line: random notes every 0.4 s with vibrato."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    notes = rng.integers(0, 12, int(seconds / 0.4) + 1)[(t / 0.4).astype(int)]
    phase = 2 * np.pi * np.cumsum(196 * 2 ** (notes / 12) * (1 + 0.01 * np.sin(2 * np.pi * 5.5 * t))) / rate
    voice = 0.3 * np.sin(phase) + 0.15 * np.sin(2 * phase) + 0.07 * np.sin(3 * phase)
    return (voice * (0.6 + 0.4 * np.sin(np.pi * t / 0.4) ** 2) + 0.01 * rng.standard_normal(t.size)).astype(
        np.float32
    )


# Windows are normalised on their own (one mean/variance per window instead of per clip), so a
# chunked score differs slightly from the whole-clip score; measured: under 1e-3 on this clip, where
# adding noise to it moves the score by 0.07 (benchmarks/chunking.py measures long varied songs).
CHUNK_TOLERANCE = 0.005


def test_chunked_scoring_of_a_long_clip_matches_whole_clip_scoring_with_bounded_input(default_export):
    wav = sung_phrase(115)
    whole = Scorer(default_export)
    chunked = Scorer(default_export, batch_size=2, chunk_seconds=10)
    seen = []
    forward = chunked.predictor.forward

    def recording(wav, lengths, *args):
        seen.append(wav.numel())
        return forward(wav, lengths, *args)

    chunked.predictor.forward = recording
    score_chunked = chunked.score(wav, 16000)
    score_whole = whole.score(wav, 16000)
    assert score_chunked == pytest.approx(score_whole, abs=CHUNK_TOLERANCE)
    # 10 s windows (500 frames) keep their centre 250 frames: 21 windows 5 s apart, and a last one
    # ending with the clip, over its 5749 frames, one per forward on the CPU (test_determinism.py).
    size = 160000
    assert len(seen) == 22 and max(seen) <= size
    # The combination is the mean over every frame of the song, each from the window that keeps it.
    kept = []
    for start in range(0, 21 * 80000, 80000):
        frames = whole.predictor(torch.from_numpy(wav[start : start + size])[None], torch.tensor([size]))
        lo = 0 if start == 0 else 125
        kept.append(frames.frame_scores[0, lo:375])
    last = (wav.size - size) // 320 * 320
    frames = whole.predictor(torch.from_numpy(wav[last:])[None], torch.tensor([wav.size - last]))
    kept.append(frames.frame_scores[0, (20 * 80000 + 120000 - last) // 320 :])
    kept = torch.cat(kept)
    assert kept.numel() == (wav.size - 400) // 320 + 1
    assert score_chunked == pytest.approx(float(kept.double().mean()), abs=1e-5)
    noisy = wav + 0.2 * np.random.default_rng(1).standard_normal(wav.size).astype(np.float32)
    assert abs(whole.score(noisy, 16000) - score_whole) > 10 * CHUNK_TOLERANCE


def test_windows_keep_every_frame_of_the_clip_once_with_context_around_it():
    from sqa.scoring.clips import clip_frames, windows

    for samples in range(1300, 120000, 997):
        for window in (1280, 1600, 16000, 48000):
            if samples <= window:
                continue
            spans = windows(samples, window)
            kept = []
            for start, stop, lo, hi in spans:
                assert start % 320 == 0 and stop <= samples and stop - start >= window
                assert 0 <= lo < hi <= clip_frames(stop - start)
                kept += range(start // 320 + lo, start // 320 + hi)
            assert kept == list(range(clip_frames(samples)))
            # Every kept frame but the song's first and last quarter-window has a quarter-window of
            # context on each side.
            margin = max(1, window // 4 // 320)
            for start, stop, lo, hi in spans[1:-1]:
                assert lo >= margin and clip_frames(stop - start) - hi >= margin - 1


def test_chunk_seconds_on_the_command_line_equals_the_api(default_export, tmp_path):
    wav = sung_phrase(25, seed=3)
    sf.write(tmp_path / "song.wav", wav, 16000, subtype="FLOAT")
    out = tmp_path / "s.csv"
    assert run_score(default_export, "--output", out, "--chunk-seconds", 4, tmp_path / "song.wav") == 0
    with out.open() as fh:
        (row,) = list(csv.DictReader(fh))
    expected = Scorer(default_export, chunk_seconds=4).score(wav, 16000)
    assert float(row["score"]) == pytest.approx(expected, abs=1e-6)


def test_device_auto_is_the_gpu_when_present():
    from sqa.scoring.scorer import resolve_device

    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == torch.device("cpu")


# The peak resident memory of this process (VmHWM; unlike ru_maxrss, it does not carry the
# parent's peak over an exec).
PEAK_RSS = """
import sys
import numpy as np
import sqa

def peak_kib():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))

wav = np.load(sys.argv[1])
chunk = float(sys.argv[3]) if sys.argv[3] != "none" else None
scorer = sqa.load(sys.argv[2], batch_size=2, chunk_seconds=chunk)
scorer.score(wav[:16000], 16000)
before = peak_kib()
scorer.score(wav, 16000)
print(peak_kib() - before)
"""


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads VmHWM from Linux's /proc")
def test_chunked_scoring_bounds_peak_memory(default_export, tmp_path):
    # Peak resident memory a 10-minute clip adds while it is scored, in a fresh process each.
    np.save(
        tmp_path / "long.npy",
        (0.1 * np.random.default_rng(0).standard_normal(16000 * 600)).astype(np.float32),
    )
    growth = {}
    for chunk in ("none", "10"):
        result = subprocess.run(
            [sys.executable, "-c", PEAK_RSS, str(tmp_path / "long.npy"), str(default_export), chunk],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        growth[chunk] = int(result.stdout.strip().splitlines()[-1])  # KiB
    # Measured: 170-240 MB whole (the 38 MB input is float32 at 16 kHz), 32 MB in 10 s windows,
    # two per forward pass.
    assert growth["10"] < 0.3 * growth["none"], growth


def test_chunking_in_windows_shorter_than_the_measured_bound_warns_once(default_export):
    import warnings

    from sqa.scoring.scorer import ChunkWarning

    wav = sung_phrase(25, seed=3)
    short = Scorer(default_export, chunk_seconds=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ChunkWarning)
        short.score(wav[:16000], 16000)  # shorter than a window: scored whole, no warning
        Scorer(default_export, chunk_seconds=10).score(wav, 16000)
    # A clip of two (overlapping) 5 s windows is chunked: the first one warns.
    assert len(short.prepare(wav[:100_000])) == 2
    with pytest.warns(ChunkWarning, match=r"LogMelBackbone windows shorter than 10 s .* 0.02 MOS"):
        short.score(wav[:100_000], 16000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ChunkWarning)
        short.score(wav, 16000)


def test_scoring_warnings_point_at_the_callers_line(default_export, tmp_path):
    from sqa.scoring.scorer import ChunkWarning

    wav = sung_phrase(8, seed=3)
    with pytest.warns(ClipWarning) as caught:
        Scorer(default_export).score(np.zeros(1600, dtype=np.float32), 16000)
    with pytest.warns(ClipWarning) as silent:
        Scorer(default_export, vocal_only=True).score(np.zeros(16000, dtype=np.float32), 16000)
    with pytest.warns(ChunkWarning) as chunked:
        Scorer(default_export, chunk_seconds=5).score(wav, 16000)
    sf.write(tmp_path / "long.wav", wav, 16000, subtype="FLOAT")
    with pytest.warns(ChunkWarning) as from_files:
        list(Scorer(default_export, chunk_seconds=5).score_files([tmp_path / "long.wav"]))
    assert [w.filename for w in [*caught, *silent, *chunked, *from_files]] == [__file__] * 4


# What sqa-score is asked to score (sqa.scoring.inputs), without scoring it: files need not be audio.


def touch(*paths: Path) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


def test_inputs_of_folders_are_their_audio_files_at_any_depth_sorted(tmp_path, monkeypatch):
    touch(tmp_path / "f" / "b.wav", tmp_path / "f" / "a.FLAC", tmp_path / "f" / "sub" / "c.mp3")
    touch(tmp_path / "f" / "notes.txt", tmp_path / "f" / "m.csv", tmp_path / "f" / "noext")
    (tmp_path / "f" / "folder.wav").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "f")
    (tmp_path / "empty").mkdir()
    touch(tmp_path / "empty" / "readme.md")
    monkeypatch.chdir(tmp_path)
    inputs = expand_inputs(["f", str(tmp_path / "link"), "empty"])
    assert inputs.paths == [
        "f/a.FLAC",
        "f/b.wav",
        "f/sub/c.mp3",
        *(str(tmp_path / "link" / name) for name in ("a.FLAC", "b.wav", "sub/c.mp3")),
    ]
    assert inputs.columns == [{}] * 6
    suffixes = ".aif, .aiff, .flac, .mp3, .ogg, .opus, .wav"
    assert inputs.problems == [f"empty: the folder holds no audio files ({suffixes})"]


def test_a_double_star_in_a_pattern_matches_files_at_any_depth(tmp_path, monkeypatch):
    deep = ("top.wav", "one/a.wav", "one/two/three/b.wav")
    touch(*(tmp_path / "f" / name for name in deep), tmp_path / "f" / "one" / "two" / "notes.txt")
    # Depth 0 (`**` matching no folder), 1 and 3.
    assert listed_audio(f"{tmp_path}/f/**/*.wav") == ([tmp_path / "f" / name for name in sorted(deep)], None)
    assert listed_audio(f"{tmp_path}/f/**/b.wav") == ([tmp_path / "f" / "one/two/three/b.wav"], None)
    monkeypatch.chdir(tmp_path)
    assert expand_inputs(["f/**/*.wav"]).paths == [f"f/{name}" for name in sorted(deep)]


def test_inputs_of_files_are_kept_as_named_and_missing_ones_reported(tmp_path, monkeypatch):
    touch(tmp_path / "a.wav", tmp_path / "noext", tmp_path / "b.M4A")
    monkeypatch.chdir(tmp_path)
    inputs = expand_inputs(["a.wav", "missing.wav", str(tmp_path / "noext"), "b.M4A"])
    assert inputs.paths == ["a.wav", str(tmp_path / "noext"), "b.M4A"]
    assert inputs.columns == [{}, {}, {}]
    assert inputs.problems == ["missing.wav: does not exist"]


def test_inputs_of_manifests_resolve_against_the_manifests_folder(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    # A byte-order mark, an absolute path, a cell over two lines, a blank line, padded and empty
    # wav_path cells, a row with an extra field.
    rows = [
        "\ufeffwav_path,singer",
        'wavs/a.wav,"x\r\ny"',
        f"{tmp_path / 'b.wav'},y",
        "",
        " ,z",
        "  wavs/c.wav  ,w,extra",
    ]
    (corpus / "m.CSV").write_bytes(("\n".join(rows) + "\n").encode())
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    inputs = expand_inputs(["../corpus/m.CSV"])
    assert inputs.paths == ["../corpus/wavs/a.wav", str(tmp_path / "b.wav"), "../corpus/wavs/c.wav"]
    assert inputs.columns == [{"singer": "x\r\ny"}, {"singer": "y"}, {"singer": "w"}]
    assert inputs.problems == ["../corpus/m.CSV, line 6: empty wav_path"]


def test_unreadable_manifests_are_reported_one_line_each(tmp_path):
    (tmp_path / "nowav.csv").write_text("file,score\nx.wav,3\n")
    (tmp_path / "header.csv").write_text("wav_path,score\n")
    (tmp_path / "latin1.csv").write_bytes("wav_path,singer\na.wav,Jos\xe9\n".encode("latin-1"))
    (tmp_path / "huge.csv").write_text("wav_path\n" + "x" * 200_000 + "\n")
    (tmp_path / "blank.csv").write_text("")
    # A row too short to reach its wav_path cell.
    (tmp_path / "short.csv").write_text("singer,wav_path\nx\n")
    names = ["nowav.csv", "header.csv", "latin1.csv", "huge.csv", "blank.csv", "short.csv"]
    inputs = expand_inputs([str(tmp_path / name) for name in names])
    assert inputs.paths == []
    nowav, header, latin1, huge, blank, short = inputs.problems
    assert short == f"{tmp_path / 'short.csv'}, line 2: empty wav_path"
    assert (
        nowav
        == f"{tmp_path / 'nowav.csv'}: the CSV manifest has no wav_path or path column (columns: file, score)"
    )
    assert header == f"{tmp_path / 'header.csv'}: the manifest holds no rows"
    assert latin1.startswith(f"{tmp_path / 'latin1.csv'}: not UTF-8 text (")
    assert latin1.endswith(
        "can't decode byte 0xe9 in position 25: invalid continuation byte); save the manifest as UTF-8"
    )
    assert huge.startswith(
        f"{tmp_path / 'huge.csv'}: cannot read the CSV manifest (field larger than field limit"
    )
    assert blank == f"{tmp_path / 'blank.csv'}: the CSV manifest has no wav_path or path column (columns: )"


def test_inputs_of_lists_resolve_against_the_lists_folder(tmp_path, monkeypatch):
    lists = tmp_path / "lists"
    lists.mkdir()
    (lists / "l.TXT").write_text(f"  a.wav \n\n{tmp_path / 'b.wav'}\nsub/c.wav\n", encoding="utf-8")
    (lists / "blank.txt").write_text(" \n\n")
    (lists / "latin1.txt").write_bytes("Jos\xe9.wav\n".encode("latin-1"))
    monkeypatch.chdir(tmp_path)
    inputs = expand_inputs(["lists/l.TXT", "lists/blank.txt", "lists/latin1.txt"])
    assert inputs.paths == ["lists/a.wav", str(tmp_path / "b.wav"), "lists/sub/c.wav"]
    assert inputs.columns == [{}, {}, {}]
    blank, latin1 = inputs.problems
    assert blank == "lists/blank.txt: the list names no files"
    assert latin1 == (
        "lists/latin1.txt: not UTF-8 text ('utf-8' codec can't decode byte 0xe9 in position 3: "
        "invalid continuation byte)"
    )


def test_chunk_warnings_by_backbone_at_the_measured_bounds():
    from sqa.scoring.scorer import chunk_warning

    assert chunk_warning("LogMelBackbone", 10.0) is None and chunk_warning("TorchaudioWav2Vec2", 5.0) is None
    assert chunk_warning("TorchaudioWav2Vec2", 4.9) == (
        "TorchaudioWav2Vec2 windows shorter than 5 s moved scores of long songs by more than 0.02 MOS "
        "against whole-clip scoring (docs/scoring.md); use longer windows where memory allows"
    )
    assert chunk_warning("LogMelBackbone", 9.99).startswith("LogMelBackbone windows shorter than 10 s moved")
    assert chunk_warning("Other", 60.0) == (
        "chunked scoring of a Other backbone was not measured against whole-clip scoring"
    )


def test_domains_by_name_or_index_within_the_exports_list():
    from sqa.scoring.scorer import resolve_domain

    domains = ["p1", "p2", "p3"]
    assert [resolve_domain(d, domains) for d in (None, "p1", "p3", 0, 2, "2")] == [0, 0, 2, 0, 2, 2]
    assert resolve_domain(0, []) == 0 and resolve_domain(None, []) == 0
    for index in (3, -1, "3"):
        expected = f"domain index {int(index)} out of range for domains ['p1', 'p2', 'p3']"
        with pytest.raises(ValueError, match=f"^{re.escape(expected)}$"):
            resolve_domain(index, domains)
    with pytest.raises(ValueError, match=r"^domain index 1 out of range for domains \[\]$"):
        resolve_domain(1, [])
    with pytest.raises(ValueError, match=r"^unknown domain 'p4'; the export knows \['p1', 'p2', 'p3'\]$"):
        resolve_domain("p4", domains)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusals of a machine without a GPU")
def test_devices_that_this_machine_lacks_are_refused_by_name():
    from sqa.scoring.scorer import resolve_device

    with pytest.raises(ValueError, match=r"^unknown device 'nonsense' \(.+\)$"):
        resolve_device("nonsense")
    for name in ("cuda", "cuda:0"):
        with pytest.raises(
            ValueError, match=f"^device '{name}' is not available: this machine has 0 CUDA GPU"
        ):
            resolve_device(name)
    if not torch.backends.mps.is_available():
        with pytest.raises(ValueError, match=r"^device 'mps' is not available on this machine$"):
            resolve_device("mps")
    assert resolve_device(torch.device("cpu")) == torch.device("cpu")


def test_gpus_are_taken_by_index_below_the_count(monkeypatch):
    from sqa.scoring.scorer import resolve_device

    # A machine with two GPUs, as torch reports it (torch.device needs no GPU to name one).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [resolve_device(d) for d in ("auto", "cuda", "cuda:1")] == [
        torch.device("cuda"),
        torch.device("cuda"),
        torch.device("cuda:1"),
    ]
    with pytest.raises(
        ValueError, match=r"^device 'cuda:2' is not available: this machine has 2 CUDA GPU\(s\)$"
    ):
        resolve_device("cuda:2")


CHUNK_BOUNDS = "must be a number of seconds above 0 and at most 86400"


def test_scorer_settings_at_their_bounds(default_export, tmp_path):
    for kwargs, message in (
        ({"max_samples": 0}, "max_samples must be at least 1, got 0"),
        ({"batch_size": 0}, "batch_size must be at least 1, got 0"),
        ({"chunk_seconds": 0}, f"chunk_seconds {CHUNK_BOUNDS}, got 0"),
        ({"chunk_seconds": float("nan")}, f"chunk_seconds {CHUNK_BOUNDS}, got nan"),
        ({"pooling": "mean"}, "pooling must be one of ('masked_mean', 's3prl_padded_mean'), got 'mean'"),
    ):
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            Scorer(default_export, **kwargs)
    # Windows are whole 20 ms hops, at least 4 of them (the nearest count to the seconds asked for).
    windows = {
        s: Scorer(default_export, chunk_seconds=s).prepare.chunk_samples for s in (0.001, 0.1, 0.13, 10)
    }
    assert windows == {0.001: 1280, 0.1: 1600, 0.13: 1920, 10: 160000}
    assert Scorer(default_export).prepare.chunk_samples is None
    assert Scorer(default_export, max_samples=1, batch_size=1).max_samples == 1
    scorer = Scorer(default_export, max_samples=16000, batch_size=1)
    clip = np.full(16000, 0.1, dtype=np.float32)
    assert isinstance(scorer.score(clip, 16000), float)
    limit = "audio: 16001 frames x 1 channels at 16000 Hz (16001 samples decoded or resampled to 16000 Hz)"
    with pytest.raises(ValueError, match=re.escape(limit)):
        scorer.score(np.full(16001, 0.1, dtype=np.float32), 16000)
    # Files at the limit and one sample over it.
    for n in (16000, 16001):
        sf.write(tmp_path / f"{n}.wav", np.full(n, 0.1), 16000, subtype="FLOAT")
    results = scorer.score_files([tmp_path / "16000.wav", tmp_path / "16001.wav"])
    fits, over = sorted(results, key=lambda r: r.index)
    assert fits.error is None and isinstance(fits.score, float)
    assert over.score is None and "exceeds the limit of 16000 samples" in over.error


def test_sample_rates_and_clip_warnings_of_the_api(default_export):
    scorer = Scorer(default_export)
    clip = np.full(3200, 0.1, dtype=np.float32)
    for rate in (True, 0, 384_001, 16000.0):
        message = f"sample_rate must be an integer in 1..384000 Hz, got {rate!r}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            scorer.score(clip, rate)
    assert isinstance(scorer.score(clip, np.int64(16000)), float)
    assert isinstance(scorer.score(np.full(384_000, 0.1, dtype=np.float32), 384_000), float)
    # 1 Hz is the lowest rate taken: 3 samples are resampled to 3 s at the export's 16 kHz.
    lowest = np.full(3, 0.1, dtype=np.float32)
    resampled = downmix_resample(lowest[:, None], 1, 16000, "audio")
    assert resampled.shape == (48000,)
    assert scorer.score(lowest, 1) == scorer.score_waveforms([resampled])[0]
    with pytest.warns(ClipWarning) as caught:
        scores = scorer.score((clip, np.zeros(16000, dtype=np.float32)), 16000)
    assert [str(w.message).split(":")[0] for w in caught] == ["audio[1]"]
    assert isinstance(scores, list) and len(scores) == 2
    with pytest.raises(ValueError, match=r"^audio\[1\]: the audio holds NaN or infinite samples$"):
        scorer.score([clip, np.full(3200, np.nan, dtype=np.float32)], 16000)
    with pytest.warns(ClipWarning, match="^audio: silent"):
        scorer.score(np.zeros(16000, dtype=np.float32), 16000)


def test_fifos_named_anywhere_are_refused_without_opening_them(default_export, tmp_path):
    import os
    import subprocess
    import sys

    sf.write(tmp_path / "good.wav", np.full(8000, 0.1), 16000)
    for name in ("pipe.wav", "pipe.csv", "pipe.txt"):
        os.mkfifo(tmp_path / name)
    (tmp_path / "m.csv").write_text("wav_path\npipe.wav\ngood.wav\n", encoding="utf-8")
    (tmp_path / "l.txt").write_text("pipe.wav\n", encoding="utf-8")
    out = tmp_path / "scores.csv"
    named = [tmp_path / n for n in ("pipe.wav", "pipe.csv", "pipe.txt", "m.csv", "l.txt")]
    args = ["--checkpoint", str(default_export), "--output", str(out), *map(str, named)]
    # Opening a FIFO for reading blocks until a writer comes: in a process of its own, a
    # regression times out instead of hanging the suite.
    done = subprocess.run(
        [sys.executable, "-m", "sqa.scoring.cli", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 1, done.stderr
    refused = "not a regular file (a FIFO, device or socket); refusing to open it"
    for name in ("pipe.wav", "pipe.csv", "pipe.txt"):
        assert f"{tmp_path / name}: {refused}" in done.stderr
    # From the manifest and from the list: each a problem of its own; the good clip is scored.
    assert done.stderr.count(f"{tmp_path / 'pipe.wav'}: {refused}") == 3
    rows = out.read_text(encoding="utf-8").splitlines()[1:]
    assert [row.split(",")[0] for row in rows] == [str(tmp_path / "good.wav")]
