"""Run directories: one run at a time, no silent reuse, overwrite removes the old outputs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from lightning.pytorch.utilities import rank_zero_only

from sqa.training.run import run
from sqa.training.run_dir import ClaimRunDirectory, RunDirError, lock, prepare, previous_outputs
from tests.conftest import REPO

HOLD = """
import sys, time
from sqa.training.run_dir import lock
with lock(sys.argv[1]):
    print("locked", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def held(tmp_path):
    """A run directory locked by another process; yields (directory, that process)."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "locked"
    yield run_dir, proc
    proc.kill()
    proc.wait()


def compose_train(overrides: list[str]):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


def make_previous_run(run_dir):
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "best-step=25.ckpt").write_bytes(b"old")
    (run_dir / "plots").mkdir()
    (run_dir / "plots" / "curves.png").write_bytes(b"old")
    (run_dir / "metrics.json").write_text("{}")
    (run_dir / "config.yaml").write_text("seed: 0\n")
    (run_dir / "notes.txt").write_text("mine")


def test_a_second_run_into_a_locked_directory_stops_naming_it_and_the_owner(held, synthetic_root):
    run_dir, proc = held
    cfg = compose_train([f"data.corpus.root={synthetic_root}"])
    with pytest.raises(RunDirError) as err:
        run(cfg, run_dir)
    assert str(run_dir) in str(err.value) and f"PID {proc.pid}" in str(err.value)
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]


def test_a_killed_owner_leaves_no_stale_lock(held):
    run_dir, proc = held
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with lock(run_dir):
        assert (run_dir / ".lock").read_text().startswith(f"PID {os.getpid()} ")


def test_nested_claims_in_one_process_share_the_lock(tmp_path):
    with lock(tmp_path), lock(tmp_path):
        pass
    # Released after the outer block: another lock on a fresh descriptor succeeds.
    with lock(tmp_path):
        pass


def test_only_the_first_ddp_rank_claims_the_directory(held, monkeypatch):
    run_dir, _ = held
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        config = compose("train", overrides=[f"hydra.run.dir={run_dir}"], return_hydra_config=True)
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    ClaimRunDirectory().on_run_start(config=config)
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    with pytest.raises(SystemExit, match="in use by another run"):
        ClaimRunDirectory().on_run_start(config=config)


def test_a_previous_run_is_refused_with_both_ways_out(tmp_path, synthetic_root):
    make_previous_run(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    cfg = compose_train([f"data.corpus.root={synthetic_root}"])
    with pytest.raises(RunDirError, match="resume=true.*overwrite=true") as err:
        run(cfg, tmp_path)
    assert "checkpoints" in str(err.value) and "metrics.json" in str(err.value)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.name != ".lock") == before


def test_overwrite_removes_the_previous_runs_outputs_only(tmp_path):
    make_previous_run(tmp_path)
    prepare(tmp_path, resume=False, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert previous_outputs(tmp_path) == []


def test_resume_keeps_everything_and_contradicting_flags_are_refused(tmp_path):
    make_previous_run(tmp_path)
    prepare(tmp_path, resume=True, overwrite=False)
    assert (tmp_path / "checkpoints" / "best-step=25.ckpt").read_bytes() == b"old"
    with pytest.raises(RunDirError, match="contradict"):
        prepare(tmp_path, resume=True, overwrite=True)


def test_files_a_failed_start_leaves_are_not_a_previous_run(tmp_path):
    (tmp_path / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "run_info.json").write_text("{}")
    (tmp_path / "checkpoints").mkdir()
    prepare(tmp_path, resume=False, overwrite=False)


def test_train_py_refuses_a_directory_in_use_before_hydra_writes_into_it(held):
    run_dir, proc = held
    result = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={run_dir}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1
    assert f"PID {proc.pid}" in result.stderr and "in use by another run" in result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in run_dir.iterdir()) == [".lock"]


def test_the_lock_is_the_directorys_whatever_path_names_it(held, tmp_path, monkeypatch):
    run_dir, proc = held
    (tmp_path / "link").symlink_to(run_dir)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    # The directory the other process holds, named relatively from another directory, through a
    # symlink and with `..` in it: refused each time, naming the owner.
    for name in ("../run", tmp_path / "link", tmp_path / "elsewhere" / ".." / "run"):
        with pytest.raises(RunDirError, match=f"PID {proc.pid}"), lock(name):
            pass
    # Nested claims in one process by different names of one directory share its lock.
    mine = tmp_path / "mine"
    (tmp_path / "mine-link").symlink_to(mine, target_is_directory=True)
    with lock(mine), lock("../mine"), lock(tmp_path / "mine-link"):
        assert (mine / ".lock").read_text().startswith(f"PID {os.getpid()} ")
    with lock("../mine-link"):
        pass
