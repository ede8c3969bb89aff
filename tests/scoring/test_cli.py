"""The command lines as a user runs them: train.py (single run and multirun) and sqa.scoring.cli."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO


def run_cli(*args: str, cwd=REPO) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "offline"}
    result = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_train_tiny_wav2vec2_end_to_end_then_score(synthetic_root, tmp_path):
    run_dir = tmp_path / "run"
    result = run_cli(
        "train.py",
        "model/backbone=tiny_wav2vec2",
        f"data.corpus.root={synthetic_root}",
        f"hydra.run.dir={run_dir}",
        "trainer.max_steps=20",
        "trainer.val_check_interval=20",
        "trainer.enable_progress_bar=false",
    )
    assert "test1/test2|test3|Avg" in result.stdout
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["avg"]["utt"]["n"] == sum(metrics[t]["utt"]["n"] for t in ("test1", "test2", "test3"))
    with (run_dir / "predictions.csv").open() as fh:
        rows = list(csv.DictReader(fh))[:6]
    wavs = [str(synthetic_root / "wav" / f"{r['sample_id']}.wav") for r in rows]
    out = tmp_path / "scores.json"
    # A run directory is accepted in place of its export/.
    run_cli("-m", "sqa.scoring.cli", "--checkpoint", str(run_dir), "--output", str(out), *wavs)
    scores = {item["path"]: item["score"] for item in json.loads(out.read_text())}
    for wav, row in zip(wavs, rows, strict=True):
        assert scores[wav] == pytest.approx(float(row["pred"]), abs=1e-4)


@pytest.mark.slow
def test_multirun_writes_one_run_directory_per_job(synthetic_root, tmp_path):
    run_cli(
        "train.py",
        "-m",
        "seed=0,1",
        f"data.corpus.root={synthetic_root}",
        f"hydra.sweep.dir={tmp_path}",
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "trainer.enable_progress_bar=false",
    )
    for job in ("0", "1"):
        assert (tmp_path / job / "metrics.json").is_file()
        assert (tmp_path / job / "export" / "model.pt").is_file()


def test_score_reports_bad_inputs_and_still_scores_good_ones(default_export, synthetic_root, tmp_path):
    bad = tmp_path / "broken.wav"
    bad.write_bytes(b"not audio")
    good = sorted((synthetic_root / "wav").iterdir())[:2]
    out = tmp_path / "s.csv"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sqa.scoring.cli",
            "--checkpoint",
            str(default_export),
            "--output",
            str(out),
            str(bad),
            *map(str, good),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert "broken.wav" in result.stderr
    with out.open() as fh:
        assert [r["path"] for r in csv.DictReader(fh)] == [str(p) for p in good]


def test_an_interrupt_while_scoring_ends_in_one_line_exit_130_and_leaves_the_output(
    default_export, synthetic_root, tmp_path
):
    # A real SIGINT, sent by the process to itself once scoring has begun. Python's own handler is
    # put back first: a shell starts background jobs (`nohup ... &`) with SIGINT ignored.
    interrupting = (
        "import os, signal, sys\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from sqa.scoring import scorer\n"
        "real = scorer.Scorer.score_files\n"
        "def interrupted(self, *args, **kwargs):\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    yield from real(self, *args, **kwargs)\n"
        "scorer.Scorer.score_files = interrupted\n"
        "from sqa.scoring.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = tmp_path / "s.csv"
    out.write_text("path,score\nearlier.wav,3.0\n")
    clips = sorted((synthetic_root / "wav").iterdir())[:2]
    args = ["--checkpoint", str(default_export), "--output", str(out), "--overwrite", *map(str, clips)]
    result = subprocess.run(
        [sys.executable, "-c", interrupting, *args],
        cwd=REPO,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 130
    assert "Traceback" not in result.stderr and "KeyboardInterrupt" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "sqa-score: stopped by SIGINT; no output is left half-written (each is written whole, or not at all)"
    )
    assert out.read_text() == "path,score\nearlier.wav,3.0\n"
    assert [p.name for p in tmp_path.iterdir()] == ["s.csv"]


def living(marker: str) -> list[int]:
    """PIDs of the processes whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if marker.encode() in fh.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="lists processes through /proc")
def test_sigterm_while_scoring_with_workers_exits_143_and_leaves_no_worker(
    default_export, synthetic_root, tmp_path
):
    # SIGTERM, as a scheduler sends it, once the two decoding workers have delivered a first clip.
    terminating = (
        "import os, signal, sys\n"
        "from sqa.scoring import scorer\n"
        "real = scorer.Scorer.score_files\n"
        "def terminated(self, *args, **kwargs):\n"
        "    for n, result in enumerate(real(self, *args, **kwargs)):\n"
        "        if n == 0:\n"
        "            os.kill(os.getpid(), signal.SIGTERM)\n"
        "        yield result\n"
        "scorer.Scorer.score_files = terminated\n"
        "from sqa.scoring.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    out = tmp_path / "scores.csv"
    clips = sorted((synthetic_root / "wav").iterdir())[:40]
    args = ["--checkpoint", str(default_export), "--output", str(out), "--num-workers", "2", *map(str, clips)]
    # stderr into a file, not a pipe: a leaked worker holding the pipe open would keep run() waiting.
    log = tmp_path / "stderr.txt"
    with log.open("w") as fh:
        result = subprocess.run(
            [sys.executable, "-c", terminating, *args],
            cwd=REPO,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=subprocess.DEVNULL,
            stderr=fh,
            timeout=300,
        )
    stderr = log.read_text()
    assert result.returncode == 143, stderr[-2000:]
    assert stderr.strip().splitlines()[-1].startswith("sqa-score: stopped by SIGTERM; no output")
    assert not out.exists()
    # Forked workers carry the command line of their parent, the output's path included.
    leaked = living(str(out))
    for pid in leaked:
        os.kill(pid, signal.SIGKILL)
    assert leaked == []
