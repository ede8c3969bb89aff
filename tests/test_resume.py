"""Interrupted runs: kill -9 during training, resume=true, same metrics as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from .conftest import REPO

ARGS = [
    "trainer.max_epochs=2",
    "trainer.val_check_interval=20",
    "trainer.enable_progress_bar=false",
    "early_stopping_patience=null",
]


def train(run_dir, synthetic_root, *extra):
    return [
        sys.executable,
        "train.py",
        f"data.corpus.root={synthetic_root}",
        f"hydra.run.dir={run_dir}",
        *ARGS,
        *extra,
    ]


def test_kill_minus_9_then_resume_gives_the_same_metrics(synthetic_root, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    reference = tmp_path / "reference"
    subprocess.run(
        train(reference, synthetic_root), cwd=REPO, env=env, check=True, capture_output=True, timeout=600
    )

    interrupted = tmp_path / "interrupted"
    proc = subprocess.Popen(
        train(interrupted, synthetic_root),
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    last = interrupted / "checkpoints" / "last.ckpt"
    deadline = time.time() + 300
    while not last.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # well into the next epoch
    assert proc.poll() is None, "training finished before it could be interrupted"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (interrupted / "metrics.json").exists()

    subprocess.run(
        train(interrupted, synthetic_root, "resume=true"),
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        timeout=600,
    )
    expected = json.loads((reference / "metrics.json").read_text())
    got = json.loads((interrupted / "metrics.json").read_text())
    for name, block in expected.items():
        for level in ("utt", "sys"):
            for key, value in block[level].items():
                assert got[name][level][key] == pytest.approx(value, abs=1e-6), (name, level, key)


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
