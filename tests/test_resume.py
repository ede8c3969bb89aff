"""Interrupted runs: kill -9 during training, resume=true, the same run as an uninterrupted one."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from sqa.data.datamodule import BucketBatchSampler, EpochSampler

from .conftest import REPO

ARGS = [
    "trainer.enable_progress_bar=false",
    "trainer.log_every_n_steps=1",
    "early_stopping_patience=null",
    "bootstrap=0",
]
# The synthetic training split has 58 batches of 8 clips per epoch. By epochs: validation (and
# the resume point) every 20 steps, killed after the first, resumed mid-epoch 1. By steps:
# validation at step 29, at the end of epoch 1 (step 58, as with the paper's once-per-epoch
# validation) and at 87; killed after the epoch-end resume point. Both runs cross an epoch
# boundary after the resume, where an off-by-one batch would shift every later batch.
LIMITS = {
    "max_epochs": (["trainer.max_epochs=2", "trainer.val_check_interval=20"], 1),
    "max_steps": (["trainer.max_epochs=-1", "trainer.max_steps=95", "trainer.val_check_interval=29"], 2),
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
@pytest.mark.parametrize("limit", sorted(LIMITS))
def test_kill_minus_9_then_resume_is_the_uninterrupted_run(limit, synthetic_root, tmp_path):
    extra, saves = LIMITS[limit]
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
    assert len([k for k in expected if k[1] == "train/loss"]) == (116 if limit == "max_epochs" else 95)
    assert got == expected
    assert json.loads((interrupted / "metrics.json").read_text()) == json.loads(
        (reference / "metrics.json").read_text()
    )


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
