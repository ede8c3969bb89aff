"""Run directories: one run at a time, no silent reuse, overwrite replaces only what sqa wrote."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.utilities import rank_zero_only

from sqa.core import ownership, run_lock
from sqa.core.run_folder import (
    LINK_REFUSED,
    LOCK_NAME,
    LOG_NAME,
    PREVIOUS,
    RunDirError,
    discard_previous,
    lock,
    prepare,
    previous_outputs,
)
from sqa.core.run_lock import _owner
from sqa.training.run import run
from sqa.training.run_dir import LIGHTNING_NOISE, RANK_ZERO_LOGGERS, ClaimRunDirectory, NoFollowFileHandler
from tests.conftest import REPO

HOLD = """
import sys, time
from sqa.core.run_lock import lock
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


@pytest.fixture
def other_run():
    """Lock directories as another run does: its own open of `.lock`, flocked, its owner written.

    flock locks belong to an open file description, so this process is refused exactly as a second
    process would be (without the seconds a second Python process takes to start).
    """
    fds: list[int] = []

    # Kept by hand: another process's lock (`lock` is shared within this one) and owner line.
    def hold(run_dir: Path, owner: str = "PID 4242 on host-b\n") -> None:
        run_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(run_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, owner.encode())
        fds.append(fd)

    yield hold
    for fd in fds:
        os.close(fd)


def is_free(run_dir: Path) -> bool:
    """Whether another run could lock `run_dir` now (a fresh open of its `.lock`, or none there)."""
    if not (run_dir / LOCK_NAME).exists():
        return True
    fd = os.open(run_dir / LOCK_NAME, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@pytest.fixture
def claim(monkeypatch):
    """`claim(run_dir, *overrides)`: ClaimRunDirectory.on_run_start as Hydra calls it; returns the callback.

    The config is train.yaml composed with its `hydra` node and `hydra.run.dir=run_dir`; the
    callbacks are ended and Hydra's global config cleared afterwards.
    """
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    callbacks: list[ClaimRunDirectory] = []

    def start(run_dir: Path | str, *overrides: str) -> ClaimRunDirectory:
        with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
            config = compose(
                "train", overrides=[f"hydra.run.dir={run_dir}", *overrides], return_hydra_config=True
            )
        callback = ClaimRunDirectory()
        callbacks.append(callback)
        callback.on_run_start(config=config, config_name="train")
        return callback

    yield start
    for callback in callbacks:
        callback.on_run_end()
    HydraConfig.instance().cfg = None


def compose_train(overrides: list[str]):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides=overrides)


# What a start that failed before training leaves (not a previous run), and what a finished run adds.
# Kept by hand: placeholder contents under a run's names; the checks read names and sqa's record only.
FAILED_START = {
    "config.yaml": "seed: 0\n",
    "run_info.json": "{}",
    "data_problems.txt": "1 clip unreadable\n",
    "train.log": "old log\n",
    "checkpoints/": None,
}
FINISHED = {
    **FAILED_START,
    "checkpoints/best-step=25.ckpt": "old",
    "plots/curves.png": "old",
    "metrics.json": "{}",
}
# Its outputs as the refusal and the overwrite line name them (sorted).
FINISHED_OUTPUTS = "checkpoints, metrics.json, plots"


def write_tree(run_dir: Path, files: dict[str, str | None], owned: bool = True) -> None:
    """Write `files` (relative path: text; a path ending in / with None: an empty folder) into `run_dir`.

    `owned`: record the top-level names as sqa's, as the run that wrote them would have.
    """
    for name, text in files.items():
        path = run_dir / name
        if text is None:
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    if owned:
        ownership.record_created(run_dir, before=[])


def tree(run_dir: Path) -> list[str]:
    """The files and folders under `run_dir` but the lock, sqa's record and the set-aside run (sorted)."""
    hidden = (LOCK_NAME, ownership.MANIFEST)
    return sorted(
        str(p.relative_to(run_dir))
        for p in run_dir.rglob("*")
        if p.relative_to(run_dir).parts[0] not in hidden
        and not p.relative_to(run_dir).parts[0].startswith(PREVIOUS)
    )


def aside(run_dir: Path) -> list[str]:
    """What `overwrite=true` set aside in `run_dir` (sorted relative paths), until it is discarded."""
    folders = sorted(run_dir.glob(f"{PREVIOUS}-*"))
    assert len(folders) <= 1
    return tree(folders[0]) if folders else []


def make_previous_run(run_dir):
    write_tree(run_dir, FINISHED)


def previous_outputs_message(run_dir: Path) -> str:
    return (
        f"{run_dir} holds a previous run's outputs ({FINISHED_OUTPUTS}); continue that run with "
        "resume=true, start it over with overwrite=true (replaces what sqa wrote there), or choose "
        "another hydra.run.dir"
    )


CONTRADICTION = "resume=true and overwrite=true contradict each other; choose one"


def in_use_message(run_dir: Path, owner: str) -> str:
    return (
        f"{run_dir.resolve()} is in use by another run ({owner}); wait for it to finish or choose "
        "another run directory (hydra.run.dir=...)"
    )


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


@pytest.mark.parametrize(
    ("written", "owner"),
    [
        ("PID 4242 on host-b\n", "PID 4242 on host-b"),
        # Locked, its PID not written yet (or only blanks).
        ("", "a process that has not written its PID yet"),
        (" \n", "a process that has not written its PID yet"),
    ],
)
def test_a_locked_directory_is_refused_naming_its_owner(written, owner, tmp_path, other_run):
    run_dir = tmp_path / "run"
    other_run(run_dir, written)
    with pytest.raises(RunDirError) as err, lock(run_dir):
        pass
    assert str(err.value) == in_use_message(run_dir, owner)
    # The owner's record is left as it was.
    assert (run_dir / LOCK_NAME).read_text() == written


def test_a_lock_file_gone_before_it_is_read_has_an_unknown_owner(tmp_path):
    # Between a refused flock and the read, the file may be removed or replaced by a folder.
    assert _owner(tmp_path / "gone") == "a process that has not written its PID yet"
    assert _owner(tmp_path) == "a process that has not written its PID yet"
    # Bytes that are not UTF-8 (another tool's file) still name an owner, never a traceback.
    (tmp_path / "odd").write_bytes(b"PID 7 on h\xff\n")
    assert _owner(tmp_path / "odd") == "PID 7 on h\ufffd"


def test_a_run_records_itself_as_the_owner(tmp_path):
    with lock(tmp_path):
        assert (tmp_path / LOCK_NAME).read_text().splitlines()[
            0
        ] == f"PID {os.getpid()} on {socket.gethostname()}"


def test_nested_claims_in_one_process_share_the_lock_until_the_outer_one_ends(tmp_path):
    with lock(tmp_path):
        with lock(tmp_path):
            assert not is_free(tmp_path)
        # The inner block's end leaves the outer block's claim.
        assert not is_free(tmp_path)
    assert is_free(tmp_path)
    with lock(tmp_path):
        assert not is_free(tmp_path)
    assert is_free(tmp_path)


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_the_lock_and_log_are_created_as_the_umask_says_and_not_executable(umask, tmp_path):
    old = os.umask(umask)
    try:
        with lock(tmp_path):
            pass
        NoFollowFileHandler(tmp_path / LOG_NAME).close()
    finally:
        os.umask(old)
    for name in (LOCK_NAME, LOG_NAME):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask


@pytest.mark.parametrize("dangling", [False, True], ids=["to_a_file", "dangling"])
@pytest.mark.parametrize("name", [LOCK_NAME, LOG_NAME])
def test_a_link_in_place_of_the_lock_or_log_is_refused_and_its_target_untouched(name, dangling, tmp_path):
    target = tmp_path / "precious.txt"
    if not dangling:
        target.write_text("keep me\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / name).symlink_to(target)
    with pytest.raises(RunDirError) as err:
        if name == LOCK_NAME:
            with lock(run_dir):
                pass
        else:
            NoFollowFileHandler(run_dir / name)
    assert str(err.value) == f"{run_dir.resolve() / name}: {LINK_REFUSED}"
    # A dangling link's target is not created either.
    assert target.read_text() == "keep me\n" if not dangling else not target.exists()


def test_the_log_handler_appends_in_its_encoding(tmp_path):
    path = tmp_path / LOG_NAME
    path.write_bytes(b"earlier run\n")
    handler = NoFollowFileHandler(path, encoding="latin-1")
    handler.handle(logging.makeLogRecord({"msg": "café"}))
    handler.close()
    assert path.read_bytes() == b"earlier run\ncaf\xe9\n"


def test_the_log_handler_replaces_what_its_encoding_cannot_write_when_told_to(tmp_path):
    path = tmp_path / LOG_NAME
    handler = NoFollowFileHandler(path, encoding="ascii", errors="replace")
    handler.handle(logging.makeLogRecord({"msg": "note ♪"}))
    handler.close()
    assert path.read_bytes() == b"note ?\n"


def test_only_the_first_ddp_rank_claims_the_directory(tmp_path, other_run, claim, monkeypatch):
    run_dir = tmp_path / "run"
    other_run(run_dir)
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    claim(run_dir)
    monkeypatch.setattr(rank_zero_only, "rank", 0)
    with pytest.raises(SystemExit, match="in use by another run"):
        claim(run_dir)


def test_the_callback_holds_the_directory_from_run_start_to_run_end(tmp_path, claim):
    run_dir = tmp_path / "run"
    callback = claim(run_dir)
    assert (run_dir / LOCK_NAME).read_text().splitlines()[0] == f"PID {os.getpid()} on {socket.gethostname()}"
    assert not is_free(run_dir)
    callback.on_run_end(config=None, config_name="train", job_return=None)
    assert is_free(run_dir)


@pytest.mark.parametrize(
    ("overrides", "left"),
    [
        (["resume=true"], [*FINISHED, "plots"]),
        # train.log too: Hydra's job logging opens it next.
        (["overwrite=true"], []),
    ],
)
def test_the_callback_resumes_or_starts_over_as_the_command_line_says(overrides, left, tmp_path, claim):
    run_dir = tmp_path / "run"
    write_tree(run_dir, FINISHED)
    before = tree(run_dir)
    callback = claim(run_dir, *overrides)
    assert tree(run_dir) == sorted(name.rstrip("/") for name in left)
    # Started over: the previous run is set aside whole until the new one starts training.
    assert aside(run_dir) == ([] if left else before)
    assert not is_free(run_dir)
    callback.on_run_end()
    assert is_free(run_dir)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [([], previous_outputs_message), (["resume=true", "overwrite=true"], lambda _: CONTRADICTION)],
    ids=["neither", "both"],
)
def test_the_callback_refuses_a_previous_run_unless_told_and_releases_the_directory(
    overrides, message, tmp_path, claim
):
    run_dir = tmp_path / "run"
    write_tree(run_dir, FINISHED)
    before = tree(run_dir)
    with pytest.raises(SystemExit) as err:
        claim(run_dir, *overrides)
    assert err.value.code == f"Error: {message(run_dir)}"
    assert tree(run_dir) == before and is_free(run_dir)


def test_the_callback_refuses_a_linked_train_log_before_hydra_logs_into_it(tmp_path, claim):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LOG_NAME).symlink_to(target)
    with pytest.raises(SystemExit) as err:
        claim(run_dir)
    assert err.value.code == f"Error: {run_dir / LOG_NAME}: {LINK_REFUSED}"
    assert target.read_text() == "keep me\n" and is_free(run_dir)


@pytest.mark.parametrize("name", ["../run", "../link", "{tmp}/link", "{tmp}/elsewhere/../run"])
def test_the_callback_claims_the_directory_whatever_path_names_it(
    name, tmp_path, claim, other_run, monkeypatch
):
    run_dir = tmp_path / "run"
    write_tree(run_dir, FINISHED)
    (tmp_path / "link").symlink_to(run_dir, target_is_directory=True)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    name = name.format(tmp=tmp_path)
    # Started over through that name: the real directory's outputs go, the link stays a link.
    callback = claim(name, "overwrite=true")
    assert tree(run_dir) == [] and (tmp_path / "link").is_symlink()
    assert not is_free(run_dir)
    callback.on_run_end()
    # Held by another run: refused through that name, naming the directory and its owner.
    other_run(run_dir)
    with pytest.raises(SystemExit) as err:
        claim(name)
    assert err.value.code == f"Error: {in_use_message(run_dir, 'PID 4242 on host-b')}"


def test_a_previous_run_is_refused_with_both_ways_out(tmp_path, synthetic_root):
    make_previous_run(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    cfg = compose_train([f"data.corpus.root={synthetic_root}"])
    with pytest.raises(RunDirError, match="resume=true.*overwrite=true") as err:
        run(cfg, tmp_path)
    assert "checkpoints" in str(err.value) and "metrics.json" in str(err.value)
    # Not even a lock file is left behind.
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("had_lock", [False, True], ids=["no_lock_file", "lock_file_of_an_earlier_run"])
@pytest.mark.parametrize("through", ["run", "hydra_callback"])
def test_a_refused_claim_leaves_the_lock_file_as_it_found_it(tmp_path, claim, had_lock, through):
    # A folder of the user's files: no run of sqa's, so every claim of it is refused.
    write_tree(tmp_path, {"notes.txt": "theirs", "metrics.json": "theirs"}, owned=False)
    earlier = "PID 4242 on host-b\n"
    if had_lock:
        (tmp_path / LOCK_NAME).write_text(earlier, encoding="utf-8")
    before = tree(tmp_path)
    if through == "run":
        with pytest.raises(RunDirError, match="which sqa did not write"), lock(tmp_path):
            prepare(tmp_path, resume=False, overwrite=True)
    else:
        with pytest.raises(SystemExit, match="which sqa did not write"):
            claim(tmp_path, "overwrite=true")
    # The lock file this claim made goes with the refusal; one that was there stays (it is not
    # the refused claim's to remove), holding what this claim wrote into it while it held it.
    assert tree(tmp_path) == before
    assert (tmp_path / LOCK_NAME).exists() is had_lock
    assert is_free(tmp_path)


def test_a_refused_claim_whose_lock_file_is_already_gone_still_ends_with_its_refusal(tmp_path):
    # Someone removed .lock while the claim held it: the refusal, not a missing file, is what ends it.
    with pytest.raises(RunDirError, match="refused here"), lock(tmp_path):
        (tmp_path / LOCK_NAME).unlink()
        raise RunDirError("refused here")
    assert not (tmp_path / LOCK_NAME).exists()


def test_a_lock_taken_on_a_removed_lock_file_is_taken_again_on_the_current_one(tmp_path, monkeypatch):
    # Between this claim's open of .lock and its flock, a refused claim removes the file it had
    # made and another run makes a new one: a flock on the removed file would guard nothing.
    opened = []

    def open_then_replaced(path: Path, flags: int) -> int:
        fd = os.open(path, flags | os.O_CREAT)
        if not opened:
            path.unlink()
            path.write_text("", encoding="utf-8")
        opened.append(fd)
        return fd

    monkeypatch.setattr(run_lock, "open_no_follow", open_then_replaced)
    with lock(tmp_path):
        assert len(opened) == 2
        assert not is_free(tmp_path)
    assert is_free(tmp_path)


@pytest.mark.parametrize("finished", [True, False], ids=["finished_run", "failed_start"])
@pytest.mark.parametrize(
    ("resume", "overwrite"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_prepare_for_each_setting_with_and_without_a_previous_run(resume, overwrite, finished, tmp_path):
    write_tree(tmp_path, FINISHED if finished else FAILED_START)
    before = tree(tmp_path)
    if resume and overwrite:
        error = CONTRADICTION
    elif finished and not resume and not overwrite:
        error = previous_outputs_message(tmp_path)
    else:
        error = None
    with lock(tmp_path):
        if error:
            with pytest.raises(RunDirError) as err:
                prepare(tmp_path, resume=resume, overwrite=overwrite)
            assert str(err.value) == error
        else:
            prepare(tmp_path, resume=resume, overwrite=overwrite)
        # Only an overwrite of a finished run sets anything aside: its outputs and the files every
        # run rewrites; train.log stays unless asked (the logging may have opened it). Nothing is
        # lost until the new run discards them.
        removed = finished and overwrite and not resume
        assert tree(tmp_path) == (["train.log"] if removed else before)
        assert sorted(tree(tmp_path) + aside(tmp_path)) == before
        assert (previous_outputs(tmp_path) == []) == (removed or not finished)
        discard_previous(tmp_path)
        assert aside(tmp_path) == [] and tree(tmp_path) == (["train.log"] if removed else before)


@pytest.mark.parametrize(("remove_log", "left"), [(False, ["train.log"]), (True, [])])
def test_an_overwrite_removes_train_log_only_when_asked(remove_log, left, tmp_path):
    write_tree(tmp_path, FINISHED)
    with lock(tmp_path):
        prepare(tmp_path, resume=False, overwrite=True, remove_log=remove_log)
        assert tree(tmp_path) == left


def test_an_overwrite_says_what_it_set_aside_and_removed_and_from_where(tmp_path, caplog):
    write_tree(tmp_path, FINISHED)
    with caplog.at_level(logging.INFO, logger="sqa.core"), lock(tmp_path):
        prepare(tmp_path, resume=False, overwrite=True)
        discard_previous(tmp_path)
    assert [r.getMessage() for r in caplog.records] == [
        f"overwrite=true: set the previous run's {FINISHED_OUTPUTS} in {tmp_path} aside",
        f"removed the previous run's outputs from {tmp_path}",
    ]


def test_an_overwrite_removes_linked_outputs_as_links_never_their_targets(tmp_path):
    outside = tmp_path / "outside"
    write_tree(
        outside, {"plots/curves.png": "theirs", "metrics.json": "theirs", "train.log": "theirs"}, owned=False
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "plots").symlink_to(outside / "plots", target_is_directory=True)
    for name in ("metrics.json", "train.log"):
        (run_dir / name).symlink_to(outside / name)
    ownership.record_created(run_dir, before=[])
    with lock(run_dir):
        prepare(run_dir, resume=False, overwrite=True, remove_log=True)
        discard_previous(run_dir)
        assert tree(run_dir) == [] and aside(run_dir) == []
    assert tree(outside) == ["metrics.json", "plots", "plots/curves.png", "train.log"]
    assert all(p.read_text() == "theirs" for p in outside.rglob("*") if p.is_file())


@pytest.mark.slow  # a second Python process or a training (over 10 s)
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


def test_the_lock_is_the_directorys_whatever_path_names_it(other_run, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    other_run(run_dir)
    (tmp_path / "link").symlink_to(run_dir)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    # The directory another run holds, named relatively from another directory, through a
    # symlink and with `..` in it: refused each time, naming the owner.
    for name in ("../run", tmp_path / "link", tmp_path / "elsewhere" / ".." / "run"):
        with pytest.raises(RunDirError) as err, lock(name):
            pass
        assert str(err.value) == in_use_message(run_dir, "PID 4242 on host-b")
    # Nested claims in one process by different names of one directory share its lock.
    mine = tmp_path / "mine"
    (tmp_path / "mine-link").symlink_to(mine, target_is_directory=True)
    with lock(mine), lock("../mine"), lock(tmp_path / "mine-link"):
        assert (mine / ".lock").read_text().startswith(f"PID {os.getpid()} ")
    assert is_free(mine)
    with lock("../mine-link"):
        assert not is_free(mine)


@pytest.mark.slow  # a second Python process or a training (over 10 s)
def test_a_run_directory_that_is_a_file_is_refused_in_one_line_and_kept(tmp_path, synthetic_root):
    path = tmp_path / "results"
    path.write_text("my results\n")
    result = subprocess.run(
        [sys.executable, "train.py", f"hydra.run.dir={path}", f"data.corpus.root={synthetic_root}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: {path}: is a file, not a folder; choose another run directory (hydra.run.dir=...)"
    )
    assert path.read_text() == "my results\n"


def bad_batch_size(synthetic_root: Path) -> list[str]:
    """A config error found when the data module is built (after the run directory is claimed)."""
    return [f"data.corpus.root={synthetic_root}", "data.batch_size=abc"]


def test_a_run_stopped_by_a_config_error_leaves_no_folder_it_made(tmp_path, synthetic_root, claim):
    # Made by the run itself (the API), parents included.
    run_dir = tmp_path / "outputs" / "2025-01-01" / "12-00-00"
    with pytest.raises(Exception, match="batch_size"):
        run(compose_train(bad_batch_size(synthetic_root)), run_dir)
    assert list(tmp_path.iterdir()) == []
    # Made by the Hydra callback, with what Hydra writes before the job: .hydra/ and train.log.
    (tmp_path / "outputs" / "2025-01-01" / "11-00-00").mkdir(parents=True)
    claim(run_dir)
    (run_dir / ".hydra").mkdir()
    # Kept by hand: Hydra's file, not sqa's.
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 0\n")
    (run_dir / LOG_NAME).write_text("")
    with pytest.raises(Exception, match="batch_size"):
        run(compose_train(bad_batch_size(synthetic_root)), run_dir)
    # The day's folder holds another run: it stays.
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("*")] == [
        Path("outputs"),
        Path("outputs/2025-01-01"),
        Path("outputs/2025-01-01/11-00-00"),
    ]


def test_a_failed_run_keeps_a_folder_it_did_not_make_or_with_a_report(tmp_path, synthetic_root, claim):
    mine = tmp_path / "mine"
    mine.mkdir()
    with pytest.raises(Exception, match="batch_size"):
        run(compose_train(bad_batch_size(synthetic_root)), mine)
    assert "config.yaml" in tree(mine)
    # A folder made for the run but holding something else than a run writes before training.
    run_dir = tmp_path / "new"
    claim(run_dir)
    (run_dir / "notes.txt").write_text("mine\n")
    with pytest.raises(Exception, match="batch_size"):
        run(compose_train(bad_batch_size(synthetic_root)), run_dir)
    assert {"notes.txt", "config.yaml"} <= set(tree(run_dir))


def test_a_refused_claim_leaves_no_folder_it_made(tmp_path, claim):
    with pytest.raises(SystemExit, match="contradict"):
        claim(tmp_path / "a" / "run", "resume=true", "overwrite=true")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # a second Python process or a training (over 10 s)
def test_train_py_stopped_by_a_config_error_leaves_no_outputs_folder(tmp_path, synthetic_root):
    result = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *bad_batch_size(synthetic_root)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1 and "batch_size" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_lightnings_hardware_lines_and_adverts_are_left_out_of_the_log(tmp_path):
    import lightning as L

    from sqa.training.run_dir import log_to_file

    with log_to_file(tmp_path):
        L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False)
        logging.getLogger("lightning.pytorch.utilities.rank_zero").info("💡 Tip: try installing litlogger")
        logging.getLogger("lightning.pytorch.utilities.rank_zero").info("`Trainer.fit` stopped: max_steps=2")
    text = (tmp_path / "train.log").read_text(encoding="utf-8")
    assert "`Trainer.fit` stopped: max_steps=2" in text
    assert "GPU available" not in text and "TPU available" not in text and "litlogger" not in text
    # The filter goes with the block: outside a run, Lightning's lines are Lightning's business.
    assert not logging.getLogger("lightning.pytorch.utilities.rank_zero").filters


def test_a_run_says_its_seed_once_in_its_own_words_and_not_in_lightnings(tmp_path, capfd):
    from tests.training.test_candidates import trained
    from tests.training.test_selection import compose_train, tiny_run_overrides, write_per_system_corpus

    manifest = write_per_system_corpus(tmp_path / "corpus")
    short = ["trainer.max_steps=2", "trainer.val_check_interval=2", "bootstrap=0", "seed=3"]
    run(compose_train([*tiny_run_overrides(manifest), *short]), tmp_path / "plain")
    # A run of candidates seeds each one: still one line.
    run_dir, _ = trained(tmp_path / "candidates", False, "trainer.max_steps=2", "seed=3")
    shown = capfd.readouterr()
    assert "Seed set to" not in shown.out + shown.err
    for log in (tmp_path / "plain" / "train.log", run_dir / "train.log"):
        text = log.read_text(encoding="utf-8")
        assert "Seed set to" not in text
        assert text.count("Seed 3 (initial weights, data order, crops, dropout)") == 1


def test_testing_a_predictor_outside_a_run_leaves_out_lightnings_hardware_lines(tmp_path):
    import lightning as L

    from sqa.data.corpus import Clip, Corpus
    from sqa.models.backbone import LogMelBackbone
    from sqa.models.predictor import MOSPredictor
    from sqa.training.evaluation import tested

    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    # On the loggers themselves: a filter there drops a record before any handler sees it.
    collect = Collect()
    loggers = [logging.getLogger(n) for n in RANK_ZERO_LOGGERS]
    for logger in loggers:
        logger.addHandler(collect)
    try:
        L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_model_summary=False)
        assert any(m.startswith("GPU available") for m in seen)  # what a plain Trainer says
        seen.clear()
        for i in range(3):
            sf.write(tmp_path / f"c{i}.wav", np.sin(np.arange(8000 + 800 * i) / (5.0 + i)) * 0.3, 16000)
        clips = [Clip(f"c{i}", tmp_path / f"c{i}.wav", 1.0 + i, "s", "default", "test") for i in range(3)]
        torch.manual_seed(0)
        predictor = MOSPredictor(LogMelBackbone(channels=8, conv_layers=1)).eval()
        module = tested(predictor, Corpus(clips, ["default"]), {"sample_rate": 16000}, None, 3)
        assert len(module.test_predictions) == 3
    finally:
        for logger in loggers:
            logger.removeHandler(collect)
    assert not [m for m in seen if m.startswith(LIGHTNING_NOISE)]
    assert not any(logger.filters for logger in loggers)


@pytest.mark.parametrize(
    ("content", "sqas"),
    [
        (b"stray\n", False),
        (b"\x00\xff binary", False),
        (b"PI", False),
        (b"", True),
        (b"PID 4242 on host-b\n", True),
    ],
    ids=["text", "binary", "short", "empty", "an_earlier_runs"],
)
def test_a_lock_file_sqa_did_not_write_is_refused_and_left_as_it_is(tmp_path, content, sqas):
    (tmp_path / "thesis.tex").write_text("mine\n", encoding="utf-8")
    (tmp_path / LOCK_NAME).write_bytes(content)
    if sqas:
        # sqa's own shape (or a lock not yet written): the claim takes it and writes its owner.
        with lock(tmp_path):
            assert (tmp_path / LOCK_NAME).read_bytes().startswith(f"PID {os.getpid()} on ".encode())
    else:
        refused = pytest.raises(RunDirError, match=r"\.lock: holds what sqa does not write in a lock file")
        with refused, lock(tmp_path):
            pass
        assert (tmp_path / LOCK_NAME).read_bytes() == content
    assert (tmp_path / "thesis.tex").read_text(encoding="utf-8") == "mine\n"
    assert is_free(tmp_path)
