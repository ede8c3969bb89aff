"""Interrupted runs: kill -9 during training, resume=true, the same run as an uninterrupted one."""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from sqa.core import ownership
from sqa.data.synthetic import load_synthetic
from sqa.training.datamodule import BucketBatchSampler, EpochSampler
from tests.conftest import REPO

ARGS = [
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1",
    "early_stopping_patience=null",
    "bootstrap=0",
]
BATCH_SIZE = 8  # conf/data/synthetic.yaml


def epoch_batches(synthetic_root) -> int:
    """Training batches per epoch of the default synthetic corpus."""
    return math.ceil(len(load_synthetic(synthetic_root).split("train")) / BATCH_SIZE)


def limits(per_epoch: int) -> dict[str, tuple[list[str], int, int]]:
    """Per stopping rule: (overrides, resume-point writes before the kill, training steps).

    By epochs: validation (and the resume point) every 20 steps, killed after the first, resumed
    mid-epoch 1. By steps: validation every `interval` steps, a divisor of the epoch, so one check
    falls on the end of epoch 1 (as with the paper's once-per-epoch validation); killed after that
    epoch-end resume point. Both runs cross an epoch boundary after the resume, where an
    off-by-one batch would shift every later batch.
    """
    interval = next(d for d in range(per_epoch // 2, 0, -1) if per_epoch % d == 0)
    assert interval >= 5, f"{per_epoch} batches per epoch have no usable divisor for the step test"
    steps = per_epoch + interval + 10
    return {
        "max_epochs": (["trainer.max_epochs=2", "trainer.val_check_interval=20"], 1, 2 * per_epoch),
        "max_steps": (
            ["trainer.max_epochs=-1", f"trainer.max_steps={steps}", f"trainer.val_check_interval={interval}"],
            per_epoch // interval,
            steps,
        ),
    }


def train(run_dir, synthetic_root, *extra):
    return [
        sys.executable,
        "train.py",
        f"data.corpus.root={synthetic_root}",
        f"hydra.run.dir={run_dir}",
        *ARGS,
        *extra,
    ]


def logged(run_dir) -> dict[tuple[int, str], tuple[str, str]]:
    """Every value the CSV logger recorded, by (step, key): (epoch, value), all log versions."""
    values = {}
    for path in sorted((run_dir / "logs").glob("version_*/metrics.csv")):
        with path.open() as fh:
            for row in csv.DictReader(fh):
                for key, value in row.items():
                    if value and key not in ("epoch", "step"):
                        values[(int(row["step"]), key)] = (row["epoch"], value)
    return values


def wait_for_writes(path, count: int, proc, timeout: float = 300) -> None:
    """Wait until `path` has been written `count` times (by its modification stamps)."""
    seen, stamp, deadline = 0, None, time.time() + timeout
    while seen < count and proc.poll() is None and time.time() < deadline:
        if path.exists():
            current = (path.stat().st_mtime_ns, path.stat().st_ino)
            if current != stamp:
                seen, stamp = seen + 1, current
        time.sleep(0.01)


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["max_epochs", "max_steps"])
def test_kill_minus_9_then_resume_is_the_uninterrupted_run(limit, synthetic_root, tmp_path):
    extra, saves, steps = limits(epoch_batches(synthetic_root))[limit]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    reference = tmp_path / "reference"
    subprocess.run(
        train(reference, synthetic_root, *extra),
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )

    interrupted = tmp_path / "interrupted"
    proc = subprocess.Popen(
        train(interrupted, synthetic_root, *extra),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_writes(interrupted / "checkpoints" / "last.ckpt", saves, proc)
    time.sleep(0.2)  # past the resume point, before the next one
    assert proc.poll() is None, "training finished before it could be interrupted"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (interrupted / "metrics.json").exists()

    resumed = subprocess.run(
        train(interrupted, synthetic_root, *extra, "resume=true"),
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "not resumable" not in resumed.stderr
    # Every training loss and validation value at every step, with its epoch, and the test
    # metrics are the uninterrupted run's, exactly.
    expected, got = logged(reference), logged(interrupted)
    assert len([k for k in expected if k[1] == "train/loss"]) == steps
    assert got == expected
    assert json.loads((interrupted / "metrics.json").read_text()) == json.loads(
        (reference / "metrics.json").read_text()
    )


@pytest.mark.slow
def test_sigterm_in_training_exits_143_with_one_line_and_resume_finishes_the_run(synthetic_root, tmp_path):
    # A scheduler's time limit: SIGTERM once the first resume point is written.
    extra, _, _ = limits(epoch_batches(synthetic_root))["max_steps"]
    run_dir = tmp_path / "run"
    log = tmp_path / "stderr.txt"
    with log.open("w") as fh:
        proc = subprocess.Popen(
            train(run_dir, synthetic_root, *extra), cwd=REPO, stdout=subprocess.DEVNULL, stderr=fh
        )
        wait_for_writes(run_dir / "checkpoints" / "last.ckpt", 1, proc)
        assert proc.poll() is None, "training finished before it could be stopped"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=120) == 143
    last = log.read_text().strip().splitlines()[-1]
    assert last.startswith("train.py: stopped by SIGTERM while fitting the model; ")
    assert last.endswith("the same command with resume=true continues from there")
    assert not (run_dir / "metrics.json").exists()
    resumed = subprocess.run(
        train(run_dir, synthetic_root, *extra, "resume=true"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run_dir / "metrics.json").read_text())


@pytest.mark.slow  # a second Python process or a training (over 10 s)
def test_resume_without_a_checkpoint_is_a_clear_error(synthetic_root, tmp_path):
    result = subprocess.run(
        train(tmp_path / "new", synthetic_root, "resume=true"),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "last.ckpt does not exist" in result.stderr


@pytest.mark.slow  # a second Python process or a training (over 10 s)
def test_resume_from_a_tampered_checkpoint_is_one_line_and_changes_nothing(synthetic_root, tmp_path):
    run_dir = tmp_path / "run"
    checkpoints = run_dir / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "last.ckpt").write_bytes(b"PK\x03\x04 not a whole zip archive")
    # sqa's own checkpoint, damaged afterwards: a folder sqa did not record is refused before this.
    ownership.record(run_dir, ["checkpoints"])
    before = sorted(p.name for p in run_dir.rglob("*"))
    result = subprocess.run(
        train(run_dir, synthetic_root, "resume=true"), cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("Error: ")]
    assert line.startswith(f"Error: {checkpoints / 'last.ckpt'}: not a checkpoint this run can resume from (")
    assert line.endswith("nothing was changed: restore the file, or start over with overwrite=true")
    assert (checkpoints / "last.ckpt").read_bytes() == b"PK\x03\x04 not a whole zip archive"
    assert set(before) <= {p.name for p in run_dir.rglob("*")}


# RLIMIT_FSIZE above the run's text files (config, logs) and below a checkpoint of the default model.
FILE_LIMIT = 200_000
WITH_LIMIT = """
import resource, runpy, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG, as a full disk would
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.argv = sys.argv[2:]
runpy.run_path("train.py", run_name="__main__")
"""


# 10-20 s of subprocesses or scoring: with the slow tests, as the default run is at its budget.
@pytest.mark.slow
def test_a_checkpoint_write_past_a_file_size_limit_ends_in_one_line(synthetic_root, tmp_path):
    run_dir = tmp_path / "run"
    command = train(run_dir, synthetic_root, "trainer.max_steps=4", "trainer.val_check_interval=2")
    result = subprocess.run(
        [sys.executable, "-c", WITH_LIMIT, str(FILE_LIMIT), *command[1:]],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("Error: ")]
    assert (
        line.startswith(f"Error: {run_dir}") and ": File too large; what the run wrote before is kept" in line
    )
    # No partial checkpoint is left where a resume would read it.
    assert not (run_dir / "checkpoints" / "last.ckpt").exists()


@pytest.mark.parametrize(
    "make",
    [
        lambda: EpochSampler(23, seed=3),
        lambda: BucketBatchSampler(list(range(100, 123)), batch_size=4, seed=3),
    ],
)
def test_a_resumed_sampler_continues_its_epoch_and_then_runs_whole_epochs(make):
    full = make()
    full.set_epoch(2)
    epoch2 = list(full)
    full.set_epoch(3)
    epoch3 = list(full)
    resumed = make()
    resumed.resume(2, 5)
    assert list(resumed) == epoch2[5:]
    resumed.set_epoch(3)
    assert list(resumed) == epoch3
