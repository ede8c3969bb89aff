"""A run records each file as it writes it: killed at any point, its folder resumes or starts over."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sqa.core import ownership
from sqa.core.atomic import atomic_dir, atomic_write_json, atomic_write_text
from sqa.core.run_folder import claimed, discard_previous

# What a run writes at its end, in order: files, then a folder written whole (its export).
OUTPUTS = ["config.yaml", "metrics.json", "predictions.csv", "run_info.json", "export"]


def write(run_dir: Path, name: str) -> None:
    """Write sqa's output `name` into `run_dir` as a run does."""
    if name == "export":
        with atomic_dir(run_dir / name) as tmp:
            (tmp / "model.pt").write_bytes(b"weights")
    elif name.endswith(".json"):
        atomic_write_json(run_dir / name, {"name": name})
    else:
        atomic_write_text(run_dir / name, f"sqa {name}\n")


def killed_after(run_dir: Path, writes: int) -> None:
    """A run claims `run_dir`, writes the first `writes` outputs and is killed with SIGKILL."""
    pid = os.fork()
    if pid == 0:
        try:
            with claimed(run_dir, resume=False, overwrite=False):
                discard_previous(run_dir)
                for name in OUTPUTS[:writes]:
                    write(run_dir, name)
                os.kill(os.getpid(), signal.SIGKILL)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize("writes", range(1, len(OUTPUTS) + 1))
@pytest.mark.parametrize("mode", ["resume", "overwrite"])
def test_a_run_killed_after_any_of_its_last_writes_is_resumed_or_started_over(writes, mode, tmp_path):
    run_dir = tmp_path / "run"
    killed_after(run_dir, writes)
    assert set(OUTPUTS[:writes]) <= ownership.owned(run_dir)
    with claimed(run_dir, resume=mode == "resume", overwrite=mode == "overwrite"):
        discard_previous(run_dir)
    # Resumed, the outputs are kept; started over, its results are gone (a config.yaml alone,
    # which the run writes anew, may stay).
    left = {p.name for p in run_dir.iterdir()} & set(OUTPUTS)
    if mode == "resume":
        assert left == set(OUTPUTS[:writes])
    else:
        assert left <= {"config.yaml"}


def test_a_file_written_outside_any_claim_is_recorded_nowhere(tmp_path):
    atomic_write_text(tmp_path / "scores.csv", "path,score\n")
    assert not ownership.has_record(tmp_path)
