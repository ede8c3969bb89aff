"""sqa-score keeps what it computed: a dead decoding worker or a failed write loses no score.

And the arguments and exports that once ended in a traceback end in one line naming them.
"""

from __future__ import annotations

import csv
import errno
import importlib
import io
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch
import yaml

from sqa.data.audio import load_audio
from sqa.exports.format import export_predictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli as score
from sqa.scoring import clips, outputs
from sqa.scoring.scorer import Scorer
from tests.conftest import REPO


def write_clips(folder: Path, count: int, samples: int = 8000) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = [folder / f"sys{i % 2}-utt{i:02d}.wav" for i in range(count)]
    for path in paths:
        sf.write(path, 0.1 * rng.standard_normal(samples), 16000, subtype="FLOAT")
    return paths


def run_score(export: Path, *args: object) -> int:
    return score.main(["--checkpoint", str(export), *map(str, args)])


def one_line_errors(err: str) -> list[str]:
    """The lines of stderr; each must be a one-line message of sqa-score, never a traceback."""
    lines = err.splitlines()
    assert "Traceback" not in err and all(line.startswith("sqa-score: ") for line in lines), err
    return lines


def test_a_killed_decoding_worker_loses_no_score(default_export, tmp_path, capsys, monkeypatch):
    paths = write_clips(tmp_path / "wavs", 6)
    victim = paths[3]
    main_pid = os.getpid()

    def load_or_die(path, *args, **kwargs):
        # The worker decoding this file is killed as `kill -9` (or the OOM killer) would kill it,
        # while this process scores the first batch: torch's SIGCHLD handler would raise there.
        if Path(path) == victim and os.getpid() != main_pid:
            time.sleep(1)
            os.kill(os.getpid(), signal.SIGKILL)
        return load_audio(path, *args, **kwargs)

    score_prepared = Scorer._score_prepared
    scored = []

    def slow_first_batch(self, prepared, kept=None):
        if not scored:
            time.sleep(3)
        scored.append(prepared)
        return score_prepared(self, prepared, kept)

    monkeypatch.setattr(clips, "load_audio", load_or_die)
    monkeypatch.setattr(Scorer, "_score_prepared", slow_first_batch)
    out = tmp_path / "s.csv"
    args = ["--output", out, "--batch-size", 2, "--num-workers", 2, "--device", "cpu"]
    assert run_score(default_export, *args, *paths) == 0
    (line,) = one_line_errors(capsys.readouterr().err)
    assert line.startswith("sqa-score: warning: a decoding worker exited unexpectedly (DataLoader worker")
    assert "the remaining" in line and "are decoded in this process" in line
    # Every file is scored, the dead worker's too (decoded again here), with the scores of a run
    # without workers.
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["path"] for r in rows] == [str(p) for p in paths]
    expected = [r.score for r in sorted(Scorer(default_export).score_files(paths), key=lambda r: r.index)]
    assert [float(r["score"]) for r in rows] == pytest.approx(expected, abs=1e-6)
    # torch's SIGCHLD handler is back in place, as the DataLoader left it.
    assert signal.getsignal(signal.SIGCHLD) is not signal.SIG_DFL


def test_a_worker_raising_an_error_is_not_taken_for_a_dead_one(default_export, tmp_path, monkeypatch):
    paths = write_clips(tmp_path, 2)
    main_pid = os.getpid()

    def broken(path, *args, **kwargs):
        if os.getpid() != main_pid:
            raise RuntimeError("a bug in the decoder")
        return load_audio(path, *args, **kwargs)

    monkeypatch.setattr(clips, "load_audio", broken)
    with pytest.raises(RuntimeError, match="a bug in the decoder"):
        list(Scorer(default_export).score_files(paths, num_workers=1))


def efbig(*args: object, **kwargs: object) -> None:
    raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))


def test_a_failed_output_write_saves_the_scores_in_a_temporary_file(
    default_export, tmp_path, capsys, monkeypatch
):
    paths = write_clips(tmp_path / "wavs", 2)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(outputs.tempfile, "tempdir", str(temp))
    monkeypatch.setattr(outputs, "atomic_write_text", efbig)
    out = tmp_path / "s.csv"
    assert run_score(default_export, "--output", out, *paths) == 1
    (line,) = one_line_errors(capsys.readouterr().err)
    (kept,) = temp.iterdir()
    assert line == f"sqa-score: {out}: not written (File too large); the scores were saved to {kept}"
    assert [r["path"] for r in csv.DictReader(kept.open())] == [str(p) for p in paths]
    assert not out.exists()


def test_when_every_file_write_fails_the_scores_go_to_stdout(default_export, tmp_path, capsys, monkeypatch):
    # torch makes a folder of its own in the temporary folder when torch.distributed.nn is first
    # imported (Lightning imports it at its first use): imported before `temp` becomes that folder.
    importlib.import_module("torch.distributed.nn")
    paths = write_clips(tmp_path / "wavs", 3)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(outputs.tempfile, "tempdir", str(temp))
    monkeypatch.setattr(outputs, "atomic_write_text", efbig)

    class Full(io.BufferedWriter):
        def write(self, data):
            super().write(data[:10])  # part of it, then the limit: a partial file to remove
            super().flush()
            efbig()

    real_fdopen = os.fdopen

    def fdopen(fd: int, *args, **kwargs):
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(temp)):  # the fallback's file
            return Full(io.FileIO(fd, "w"))
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(outputs.os, "fdopen", fdopen)
    out = tmp_path / "s.json"
    assert run_score(default_export, "--by-system", "--output", out, *paths) == 1
    captured = capsys.readouterr()
    # The ranking's lines come first; then what could not be written.
    lines = [line for line in one_line_errors(captured.err) if ": not written" in line]
    assert lines[0] == (
        f"sqa-score: {out}: not written (File too large), nor to a new file in {temp} (File too large); "
        "the scores were printed to stdout as CSV"
    )
    assert lines[1].startswith(f"sqa-score: {out.with_name('s.systems.json')}: not written")
    assert list(temp.iterdir()) == []  # no partial temporary file is left
    # Both tables, as CSV, one after the other: the clips', then the systems' means.
    clip_table, system_table = captured.out.split("system_id,n,score,")
    system_table = system_table.split("\n", 1)[1]
    assert [r["path"] for r in csv.DictReader(io.StringIO(clip_table))] == [str(p) for p in paths]
    assert sorted(line.split(",")[0] for line in system_table.splitlines()) == ["sys0", "sys1"]


LIMIT = 4096
# sqa-score under a file size limit of argv[1] bytes.
WITH_FILE_LIMIT = textwrap.dedent(
    """
    import resource, signal, sys
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the write returns EFBIG, as under Python
    limit = int(sys.argv[1])
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    from sqa.scoring import cli
    sys.exit(cli.main(sys.argv[2:]))
    """
)


def score_under_the_file_limit(
    export: Path, tmp_path: Path, stdout: Any = subprocess.PIPE
) -> tuple[subprocess.CompletedProcess, Path, Path, list[Path]]:
    """`sqa-score` of 64 short clips in a process limited to LIMIT bytes a file, TMPDIR in tmp_path/tmp.

    Returns the finished process, the output path it was given, the temporary folder and the clips.
    """
    paths = write_clips(tmp_path / "wavs", 64, samples=1600)
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "s.csv"
    args = ["--checkpoint", str(export), "--output", str(out), *map(str, paths)]
    done = subprocess.run(
        [sys.executable, "-c", WITH_FILE_LIMIT, str(LIMIT), *args],
        cwd=REPO,
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
        env={**os.environ, "TMPDIR": str(temp)},
    )
    return done, out, temp, paths


def test_a_file_size_limit_at_every_write_prints_the_scores(default_export, tmp_path):
    # What a user with `ulimit -f` saw: the output and its fallback hit RLIMIT_FSIZE (EFBIG).
    # Model building writes a 3 KiB file (torch's generated RemoteModule template): the limit lets
    # it through, the output of 64 clips (about 6 KiB) not.
    done, out, temp, paths = score_under_the_file_limit(default_export, tmp_path)
    assert done.returncode == 1
    (line,) = one_line_errors(done.stderr)
    assert line == (
        f"sqa-score: {out}: not written (File too large), nor to a new file in {temp} (File too large); "
        "the scores were printed to stdout as CSV"
    )
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [r["path"] for r in rows] == [str(p) for p in paths]
    assert len(done.stdout) > LIMIT
    # Neither the output's temporary file nor the fallback's is left behind.
    assert list(temp.iterdir()) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["tmp", "wavs"]
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] != LIMIT  # the test process is untouched


def test_stdout_into_a_file_under_the_size_limit_is_not_said_to_hold_the_scores(default_export, tmp_path):
    # `ulimit -f` with stdout redirected to a file: the last fallback is cut short at the limit too.
    with open(tmp_path / "stdout.csv", "wb") as stdout:
        done, out, temp, _ = score_under_the_file_limit(default_export, tmp_path, stdout)
    assert done.returncode == 1
    (line,) = one_line_errors(done.stderr)
    assert line == (
        f"sqa-score: {out}: not written (File too large), nor to a new file in {temp} (File too large), "
        "nor to stdout (File too large); the scores are lost"
    )
    assert (tmp_path / "stdout.csv").stat().st_size <= LIMIT


def test_a_closed_stdout_saves_the_scores_in_a_temporary_file(tmp_path, monkeypatch):
    monkeypatch.setattr(outputs.tempfile, "tempdir", str(tmp_path))

    def closed(text: str) -> None:
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")

    monkeypatch.setattr(outputs, "_print", closed)
    message = outputs.emit([{"path": "a.wav", "score": 3.0}], None)
    (kept,) = tmp_path.iterdir()
    assert message == f"stdout: not written (Broken pipe); the scores were saved to {kept}"
    assert kept.suffix == ".csv" and kept.read_text() == "path,score\na.wav,3.0\n"


BOUNDS = "must be a number of seconds above 0 and at most 86400"


@pytest.mark.parametrize("value", ["inf", "-inf", "nan", "0", "-1", "1e300", "86401"])
def test_unusable_chunk_seconds_are_refused_in_one_line(value, default_export, tmp_path, capsys):
    (wav,) = write_clips(tmp_path, 1)
    assert run_score(default_export, f"--chunk-seconds={value}", wav) == 2
    (line,) = one_line_errors(capsys.readouterr().err)
    assert line == f"sqa-score: --chunk-seconds {BOUNDS}, got {float(value)}"
    with pytest.raises(ValueError, match=f"^chunk_seconds {BOUNDS}, got"):
        Scorer(default_export, chunk_seconds=float(value))


@pytest.mark.parametrize("value", ["0.5", "86400"])
def test_chunk_seconds_within_the_bounds_score(value, default_export, tmp_path, capsys):
    (wav,) = write_clips(tmp_path, 1, samples=32000)
    out = tmp_path / "s.csv"
    assert run_score(default_export, "--chunk-seconds", value, "--output", out, wav) == 0
    assert len(list(csv.DictReader(out.open()))) == 1


@pytest.fixture
def two_domain_export(tmp_path: Path) -> Path:
    """An export whose model embeds 2 domains, its config.yaml listing 3 (edited, or another tool's)."""
    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), num_domains=2, domain_dim=4)
    export = export_predictor(model, tmp_path / "export", 16000, ["p1", "p2"])
    config = yaml.safe_load((export / "config.yaml").read_text())
    config["domains"] = ["p1", "p2", "p3"]
    (export / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return export


def test_a_domain_beyond_the_models_embedding_is_refused_by_name(two_domain_export, tmp_path, capsys):
    (wav,) = write_clips(tmp_path / "wavs", 1)
    for domain in ("p3", "2"):
        assert run_score(two_domain_export, "--domain", domain, wav) == 2
        (line,) = one_line_errors(capsys.readouterr().err)
        assert line == (
            "sqa-score: domain 'p3' (index 2): the export's config.yaml lists domains ['p1', 'p2', 'p3'], "
            "but its model embeds only 2 (model.num_domains): the first 2 of the list can be scored"
        )
    # The domains it embeds still score.
    for domain in ("p1", "p2", "1"):
        assert run_score(two_domain_export, "--domain", domain, wav) == 0
    assert capsys.readouterr().out.count("\n") == 6


def test_a_domain_index_of_thousands_of_digits_is_out_of_range(default_export, tmp_path, capsys):
    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), num_domains=2, domain_dim=4)
    export = export_predictor(model, tmp_path / "export", 16000, ["p1", "p2"])
    (wav,) = write_clips(tmp_path / "wavs", 1)
    assert run_score(export, "--domain", "9" * 5000, wav) == 2
    (line,) = one_line_errors(capsys.readouterr().err)
    assert line.startswith("sqa-score: domain index 999") and line.endswith(
        "out of range for domains ['p1', 'p2']"
    )


def test_a_sparse_weight_ends_sqa_score_in_one_line(tmp_path, capsys):
    torch.manual_seed(0)
    export = export_predictor(
        MOSPredictor(LogMelBackbone(n_mels=16, channels=8)), tmp_path / "e", 16000, ["d"]
    )
    state = torch.load(export / "model.pt", weights_only=True)
    state["head.3.weight"] = state["head.3.weight"].to_sparse()
    torch.save(state, export / "model.pt")
    (wav,) = write_clips(tmp_path / "wavs", 1)
    assert run_score(export, wav) == 2
    (line,) = one_line_errors(capsys.readouterr().err)
    assert line == (
        f"sqa-score: {export / 'model.pt'}: 'head.3.weight' is a sparse tensor (torch.sparse_coo); "
        "an export holds dense tensors"
    )


@pytest.mark.parametrize("peak", [1.0, 2.0**31])
def test_loud_but_sane_audio_is_scored(peak, default_export, tmp_path, capsys):
    path = tmp_path / "loud.wav"
    sf.write(path, np.full(8000, peak, dtype=np.float32), 16000, subtype="FLOAT")
    out = tmp_path / "s.csv"
    assert run_score(default_export, "--output", out, path) == 0
    (row,) = csv.DictReader(out.open())
    assert np.isfinite(float(row["score"]))


def test_finite_audio_too_large_to_process_is_named_as_such(default_export, tmp_path, capsys):
    wavs = write_clips(tmp_path / "wavs", 1)
    huge = tmp_path / "huge.wav"
    # Stereo: the channel mean of 3e38 and 3e38 overflows float32 (once reported as "NaN or infinite").
    sf.write(huge, np.full((8000, 2), 3e38, dtype=np.float32), 16000, subtype="FLOAT")
    out = tmp_path / "s.csv"
    assert run_score(default_export, "--output", out, huge, *wavs) == 1
    lines = one_line_errors(capsys.readouterr().err)
    assert lines[0] == (
        f"sqa-score: {huge}: samples as large as 3e+38; audio must be in [-1, 1] or a sane range "
        "(at most 2147483648, int32 PCM's full scale)"
    )
    assert [r["path"] for r in csv.DictReader(out.open())] == [str(wavs[0])]


def test_when_nothing_could_be_scored_no_output_is_written_and_an_old_one_is_kept(
    default_export, tmp_path, capsys
):
    missing = tmp_path / "missing.wav"
    new = tmp_path / "new.csv"
    assert run_score(default_export, "--output", new, missing) == 1
    assert not new.exists()
    old = tmp_path / "old.csv"
    old.write_text("path,score\nearlier.wav,3.0\n")
    assert run_score(default_export, "--output", old, "--overwrite", missing) == 1
    assert old.read_text() == "path,score\nearlier.wav,3.0\n"
    # One scorable clip beside the missing one: written, the old table replaced.
    (wav,) = write_clips(tmp_path / "wavs", 1)
    assert run_score(default_export, "--output", old, "--overwrite", missing, wav) == 1
    assert [r["path"] for r in csv.DictReader(old.open())] == [str(wav)]
    capsys.readouterr()
