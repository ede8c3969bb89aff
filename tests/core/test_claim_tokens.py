"""sqa acts only on what it wrote, in this folder, in a claim it can prove.

A set-aside run carries the token of the claim that made it, which the lock file keeps; a record
names the folder it was written for; a name is recorded once sqa has created it. Everything else
(a `.sqa-previous/` the user made or copied, a record from another folder, a name sqa only might
have written) is left alone, and said in one line where it matters.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sqa.core import ownership, run_lock, set_aside
from sqa.core.run_folder import PREVIOUS, RunDirError, claimed, discard_previous, lock, prepare, record_point
from sqa.training.checkpoint_io import AtomicCheckpointIO, checkpoint_step
from tests.conftest import REPO

USERS = {"thesis.tex": "\\chapter{Results}\n", "notes/today.txt": "day 2\n"}


def write_files(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def snapshot(folder: Path, hidden: tuple[str, ...] = (".lock",)) -> dict[str, bytes | None]:
    """Every entry under `folder` with its bytes (None: a folder), but the top-level `hidden` names."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() and not p.is_symlink() else None)
        for p in sorted(folder.rglob("*"))
        if p.relative_to(folder).parts[0] not in hidden
    }


def finished_run(run_dir: Path, files: dict[str, str]) -> None:
    """A run that wrote `files` in its claim of `run_dir` (so they are recorded as sqa's)."""
    with claimed(run_dir, resume=False, overwrite=False):
        write_files(run_dir, files)


RUN = {
    "config.yaml": "seed: 0\n",
    "metrics.json": '{"avg": 1}',
    "checkpoints/last.ckpt": "old",
    "predictions.csv": "old\n",
}


@pytest.mark.parametrize("name", [PREVIOUS, f"{PREVIOUS}-{'0' * 32}"])
def test_a_set_aside_folder_sqa_did_not_make_is_never_put_back(name, tmp_path, caplog):
    folder = tmp_path / "thesis"
    write_files(folder, USERS)
    # An older draft in a set-aside folder, with a lock and a record that list the user's files.
    write_files(folder / name, {"thesis.tex": "old draft\n", ".lock": "PID 1 on h\n"})
    (folder / name / ownership.MANIFEST).write_text(
        json.dumps(
            {"written_by": "sqa", "folder": ownership.folder_id(folder), "entries": ["thesis.tex", "notes"]}
        )
    )
    before = snapshot(folder)
    with caplog.at_level(logging.WARNING, logger="sqa.core"), claimed(folder, resume=False, overwrite=False):
        held = os.fstat(run_lock._held[folder.resolve()].fd)
        # The lock held is the lock file in the folder, which a second claim would find taken.
        assert os.path.samestat(held, os.stat(folder / ".lock"))
    assert snapshot(folder) == before
    assert caplog.messages == [
        f"{folder.resolve()}: left {name} alone; sqa cannot prove that it set it aside here"
    ]
    # overwrite=true names it rather than removing anything.
    write_files(folder, {"metrics.json": "{}"})
    with pytest.raises(RunDirError, match=f"holds {name}, which sqa did not write"), lock(folder):
        prepare(folder, resume=False, overwrite=True)
    assert (folder / "thesis.tex").read_text() == USERS["thesis.tex"]


def killed_after_setting_aside(run_dir: Path, writes: bool = True) -> None:
    """`overwrite=true` into `run_dir` in a process killed once it has set the previous run aside.

    With `writes`, it first writes and records config.yaml; else it is killed at once.
    """
    script = (
        "import os, signal, sys\n"
        "from sqa.core.run_folder import lock, prepare, record_point\n"
        "with lock(sys.argv[1]):\n"
        "    prepare(sys.argv[1], resume=False, overwrite=True)\n"
        "    if sys.argv[2] == 'writes':\n"
        "        open(os.path.join(sys.argv[1], 'config.yaml'), 'w').write('new: 1\\n')\n"
        # As a run does once it has written its config.yaml: the claim's own from then on.
        "        record_point(sys.argv[1])\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(run_dir), "writes" if writes else "-"], cwd=REPO, timeout=120
    )
    assert done.returncode == -9


def test_a_lock_and_a_record_planted_in_sqas_own_set_aside_never_come_back(tmp_path):
    run_dir = tmp_path / "run"
    finished_run(run_dir, RUN)
    record = (run_dir / ownership.MANIFEST).read_bytes()
    killed_after_setting_aside(run_dir)
    (aside,) = run_dir.glob(f"{PREVIOUS}-*")
    write_files(aside, {".lock": "PID 1 on h\n", ownership.MANIFEST: '{"entries": ["x"]}'})
    with lock(run_dir):
        held = os.fstat(run_lock._held[run_dir.resolve()].fd)
        assert os.path.samestat(held, os.stat(run_dir / ".lock"))
        assert (run_dir / ownership.MANIFEST).read_bytes() == record
        assert (run_dir / "config.yaml").read_text() == RUN["config.yaml"]
        # What was planted stays where it was, named; nothing else is left there.
        assert sorted(os.listdir(aside)) == [".lock", ownership.MANIFEST]


def test_after_a_kill_the_killed_runs_entry_is_replaced_and_a_users_new_file_is_kept(tmp_path, caplog):
    run_dir = tmp_path / "run"
    finished_run(run_dir, RUN)
    killed_after_setting_aside(run_dir)
    (aside,) = run_dir.glob(f"{PREVIOUS}-*")
    # Between the kill and the next command the user makes a file under one of the old run's
    # names, and one under a name of their own.
    write_files(run_dir, {"metrics.json": "the user's\n", "notes.txt": "mine\n"})
    with caplog.at_level(logging.WARNING, logger="sqa.core"), lock(run_dir):
        # config.yaml, which the killed run wrote and recorded, is the old run's again.
        assert (run_dir / "config.yaml").read_text() == RUN["config.yaml"]
        assert (run_dir / "checkpoints" / "last.ckpt").read_text() == "old"
        assert (run_dir / "predictions.csv").read_text() == RUN["predictions.csv"]
        assert (run_dir / "metrics.json").read_text() == "the user's\n"
        assert (run_dir / "notes.txt").read_text() == "mine\n"
        # The old run's metrics.json is kept where it was set aside, and named.
        assert sorted(os.listdir(aside)) == ["metrics.json"]
        assert (aside / "metrics.json").read_text() == RUN["metrics.json"]
    assert caplog.messages == [
        f"{aside.resolve()}: kept metrics.json there: {run_dir.resolve()} holds an entry of that name now, "
        "which sqa cannot prove it wrote, and never replaces"
    ]
    # Neither is sqa's: overwrite=true names the first rather than removing anything.
    assert not {"metrics.json", "notes.txt", aside.name} & ownership.owned(run_dir)
    with pytest.raises(RunDirError, match="which sqa did not write"), lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True)
    assert (aside / "metrics.json").read_text() == RUN["metrics.json"]


def test_a_users_file_made_after_a_kill_before_any_record_is_kept_under_any_old_name(tmp_path, caplog):
    run_dir = tmp_path / "run"
    finished_run(run_dir, RUN)
    killed_after_setting_aside(run_dir, writes=False)
    (aside,) = run_dir.glob(f"{PREVIOUS}-*")
    write_files(run_dir, {"config.yaml": "mine: 1\n", "metrics.json": "the user's\n"})
    with caplog.at_level(logging.WARNING, logger="sqa.core"), lock(run_dir):
        assert (run_dir / "config.yaml").read_text() == "mine: 1\n"
        assert (run_dir / "metrics.json").read_text() == "the user's\n"
        assert (run_dir / "predictions.csv").read_text() == RUN["predictions.csv"]
        assert sorted(os.listdir(aside)) == ["config.yaml", "metrics.json"]
    assert [m.split(": ")[1] for m in caplog.messages] == ["kept config.yaml, metrics.json there"]


def test_a_runs_own_restore_replaces_what_it_wrote_since_it_set_the_old_run_aside(tmp_path, caplog):
    run_dir = tmp_path / "run"
    finished_run(run_dir, RUN)
    with caplog.at_level(logging.WARNING, logger="sqa.core"), lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True)
        write_files(run_dir, {"config.yaml": "new: 1\n", "metrics.json": "{}"})
        assert run_lock.restore_previous(run_dir) is True
    assert {name: (run_dir / name).read_text() for name in ("config.yaml", "metrics.json")} == {
        "config.yaml": RUN["config.yaml"],
        "metrics.json": RUN["metrics.json"],
    }
    assert not list(run_dir.glob(f"{PREVIOUS}-*")) and caplog.messages == []


def test_a_set_aside_is_put_back_only_by_the_claim_after_the_one_that_made_it(tmp_path):
    run_dir = tmp_path / "run"
    finished_run(run_dir, RUN)
    before = snapshot(run_dir, hidden=(".lock", ownership.MANIFEST))
    killed_after_setting_aside(run_dir)
    (aside,) = run_dir.glob(f"{PREVIOUS}-*")
    # The lock file holds the killed claim's token for this folder: a copy of the folder proves
    # nothing, nor does a lock naming another claim.
    copy = tmp_path / "copy"
    shutil.copytree(run_dir, copy, symlinks=True)
    other = tmp_path / "other"
    shutil.copytree(run_dir, other, symlinks=True)
    (other / ".lock").write_text("PID 1 on h\nclaim " + "f" * 32 + f" folder {os.stat(other).st_ino}\n")
    for folder in (copy, other):
        # The copied record is not one written for the copy: refused until the user moves it.
        with pytest.raises(RunDirError, match="not a record sqa wrote for this folder"), lock(folder):
            pass
        (folder / ownership.MANIFEST).unlink()
        with lock(folder):
            assert (folder / aside.name).is_dir() and (folder / "config.yaml").read_text() == "new: 1\n"
    with lock(run_dir):
        assert snapshot(run_dir, hidden=(".lock", ownership.MANIFEST)) == before


def test_names_sqa_might_write_are_never_recorded_and_a_users_later_ones_are_kept(tmp_path):
    run_dir = tmp_path / "run"
    finished_run(run_dir, RUN)
    assert ownership.owned(run_dir) == {
        "checkpoints",
        "config.yaml",
        "metrics.json",
        "predictions.csv",
    }
    # The user adds logger folders and a mapped/ of their own to the finished run.
    write_files(run_dir, {"wandb/run.txt": "mine", "tensorboard/events": "mine", "mapped/scores.csv": "mine"})
    before = snapshot(run_dir)
    with (
        pytest.raises(RunDirError, match=r"holds mapped, which sqa did not write \(and 2 more\)"),
        lock(run_dir),
    ):
        prepare(run_dir, resume=False, overwrite=True)
    assert snapshot(run_dir) == before


def test_what_a_claim_creates_is_recorded_when_it_ends_however_it_ends(tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt), claimed(run_dir, resume=False, overwrite=False):
        # eval.py's Hydra log is named after its module: whatever the name, it is recorded.
        write_files(run_dir, {"evaluation.log": "log\n", "plots/a.png": "png"})
        raise KeyboardInterrupt
    assert ownership.owned(run_dir) == {"evaluation.log", "plots"}
    # Started over, those go; a file the user added since keeps the folder as it is.
    write_files(run_dir, {"metrics.json": "{}"})
    with pytest.raises(RunDirError, match="holds metrics.json, which sqa did not write"), lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True)
    (run_dir / "metrics.json").unlink()
    with claimed(run_dir, resume=False, overwrite=True):
        discard_previous(run_dir)
    assert sorted(os.listdir(run_dir)) == [".lock", ownership.MANIFEST]


KILL_IN_DISCARD = (
    "import os, shutil, signal, sys\n"
    "from pathlib import Path\n"
    "from sqa.core import set_aside\n"
    "from sqa.core.run_folder import lock, prepare, discard_previous, record_point\n"
    "run_dir, after = Path(sys.argv[1]), int(sys.argv[2])\n"
    "removed = []\n"
    "def rmtree(path, *args, **kwargs):\n"
    "    for p in sorted(Path(path).rglob('*'), key=lambda p: -len(p.parts)):\n"
    "        if len(removed) == after:\n"
    "            os.kill(os.getpid(), signal.SIGKILL)\n"
    "        p.rmdir() if p.is_dir() and not p.is_symlink() else p.unlink()\n"
    "        removed.append(p)\n"
    "    os.kill(os.getpid(), signal.SIGKILL)\n"
    "set_aside.shutil.rmtree = rmtree\n"
    "with lock(run_dir):\n"
    "    prepare(run_dir, resume=False, overwrite=True)\n"
    # As a run starts: its config.yaml written and recorded at once (sqa.training.prepare), then
    # the previous run discarded when training starts, before any checkpoint.
    "    (run_dir / 'config.yaml').write_text('new')\n"
    "    record_point(run_dir)\n"
    "    discard_previous(run_dir)\n"
)


@pytest.mark.parametrize("after", range(7))
def test_a_kill_while_discarding_never_puts_the_old_run_back_over_the_new(after, tmp_path):
    run_dir = tmp_path / "run"
    finished_run(run_dir, {**RUN, "plots/a.png": "old", "plots/b.png": "old"})
    done = subprocess.run(
        [sys.executable, "-c", KILL_IN_DISCARD, str(run_dir), str(after)], cwd=REPO, timeout=120
    )
    assert done.returncode == -9
    assert list(run_dir.glob(f"{set_aside.DISCARDED}-*")) and not list(run_dir.glob(f"{PREVIOUS}-*"))
    # resume=true: the new run's config.yaml stays, nothing of the old run comes back, the rest goes.
    with claimed(run_dir, resume=True, overwrite=False):
        assert (run_dir / "config.yaml").read_text() == "new"
        assert sorted(os.listdir(run_dir)) == [".lock", ownership.MANIFEST, "config.yaml"]


@pytest.mark.parametrize(("resume", "overwrite"), [(True, False), (False, True)])
def test_a_run_killed_after_its_first_checkpoint_resumes_or_starts_over(resume, overwrite, tmp_path):
    run_dir = tmp_path / "run"
    with lock(run_dir):
        prepare(run_dir, resume=False, overwrite=False)
        # As a run starts (sqa.training.prepare): config.yaml written and recorded at once.
        write_files(run_dir, {"config.yaml": "seed: 0\n"})
        record_point(run_dir)
        # Lightning's first checkpoint, written by the run's checkpoint I/O.
        AtomicCheckpointIO().save_checkpoint({"global_step": 7}, run_dir / "checkpoints" / "last.ckpt")
        # Killed here: the record stays as it is now, without what the claim's end would add.
        at_the_kill = (run_dir / ownership.MANIFEST).read_bytes()
    (run_dir / ownership.MANIFEST).write_bytes(at_the_kill)
    assert ownership.owned(run_dir) == {"checkpoints", "config.yaml"}
    # Both ways on are accepted: the checkpoint is the run's own.
    with claimed(run_dir, resume=resume, overwrite=overwrite):
        if resume:
            assert checkpoint_step(run_dir / "checkpoints" / "last.ckpt") == 7
        else:
            assert not (run_dir / "checkpoints").exists()
            discard_previous(run_dir)
    assert os.path.exists(run_dir / "checkpoints") == resume


@pytest.mark.parametrize(("resume", "overwrite"), [(True, False), (False, False), (False, True)])
def test_a_run_never_writes_over_a_users_file_named_like_its_outputs(resume, overwrite, tmp_path):
    # Resumed, new, or started over with no previous outputs to set aside.
    folder = tmp_path / "mine"
    write_files(folder, {**USERS, "config.yaml": "mine: true\n"})
    before = snapshot(folder)
    message = "holds config.yaml, which sqa did not write, under a name a run writes"
    with pytest.raises(RunDirError, match=message), lock(folder):
        prepare(folder, resume=resume, overwrite=overwrite)
    assert snapshot(folder) == before
    # The same names written by sqa's own run are resumed.
    run_dir = tmp_path / "run"
    finished_run(run_dir, RUN)
    with lock(run_dir):
        prepare(run_dir, resume=True, overwrite=False)


@pytest.mark.parametrize("pending", [False, True])
def test_a_stray_record_refuses_every_claim_before_anything_moves(pending, tmp_path):
    run_dir = tmp_path / "run"
    finished_run(run_dir, RUN)
    if pending:
        # A killed run's set-aside waits: it stays set aside until the record is moved.
        killed_after_setting_aside(run_dir)
    planted = b'{"written_by": "sqa", "folder": 1, "entries": ["thesis.tex"]}'
    (run_dir / ownership.MANIFEST).write_bytes(planted)
    before = snapshot(run_dir)
    for resume, overwrite in ((False, True), (True, False), (False, False)):
        with pytest.raises(RunDirError) as err, claimed(run_dir, resume=resume, overwrite=overwrite):
            write_files(run_dir, {"metrics.json": "new"})
        reason = f"holds {ownership.MANIFEST}, which is not a record sqa wrote for this folder"
        assert str(err.value).startswith(f"{run_dir.resolve()}: {reason}")
        assert snapshot(run_dir) == before
    # Moved out by the user, the folder can be locked again, and every file is still there.
    (run_dir / ownership.MANIFEST).rename(tmp_path / "kept.json")
    contents = sorted(v for k, v in before.items() if v is not None and k != ownership.MANIFEST)
    with lock(run_dir):
        after = snapshot(run_dir, hidden=(".lock", ownership.MANIFEST))
        assert sorted(v for v in after.values() if v is not None) == contents
    assert (tmp_path / "kept.json").read_bytes() == planted


def test_a_folder_inside_a_claimed_run_directory_belongs_to_that_claim(tmp_path):
    run_dir = tmp_path / "run"
    inside = run_dir / "candidates" / "distillmos"
    assert run_lock.claim_holding(inside) is None
    with lock(run_dir):
        assert run_lock.claim_holding(run_dir) == run_dir.resolve()
        assert run_lock.claim_holding(inside) == run_dir.resolve()
        # A folder beside it, or above it, is no part of it.
        assert run_lock.claim_holding(tmp_path / "runs") is None
        assert run_lock.claim_holding(tmp_path) is None
    assert run_lock.claim_holding(inside) is None
