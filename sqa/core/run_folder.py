"""A run folder: one run at a time, and a previous run's outputs resumed or started over.

A run holds an exclusive `flock` on `<run_dir>/.lock` while it runs. The kernel releases it when
the process ends, however it ends, so a killed run leaves no stale lock behind; a refused claim
removes the lock file it made. A directory that
holds a previous run's outputs is resumed (`resume=true`) or started over (`overwrite=true`);
anything else is refused before a file is written. A run records the names it writes
(`sqa.core.ownership`), and `overwrite=true` refuses a directory holding anything else. Starting
over moves the previous run's outputs into `.sqa-previous/` and removes them only once the new
run has checked its configuration whole (`discard_previous`); a run that stops before puts them
back (`restore_previous`), and so does the next claim of the directory after a kill. Training,
`eval.py` and `sqa-baseline` claim their directories here (`claimed`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from sqa.core import ownership

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
LINK_REFUSED = "is a symbolic link; sqa writes only its own files in a run directory"
# What a run writes besides config.yaml, run_info.json, data_problems.txt and train.log (which
# a run that failed before training leaves, and which the next run rewrites). Logger folders use
# the names of sqa's logger configs.
OUTPUTS = (
    "checkpoints",
    "export",
    "plots",
    "logs",
    "tensorboard",
    "wandb",
    "predictions.csv",
    "metrics*.json",
    "mapped",
    "eval_info.json",
    # Of a predictor with a spread (sqa.reports.calibration), of clips naming songs (preferences).
    "calibration.json",
    "preferences.json",
)
REWRITTEN = ("config.yaml", "run_info.json", "data_problems.txt", "valid_split.csv", "test_split.csv")
LOG_NAME = "train.log"
# Where a run started over keeps the previous run's outputs until its configuration is built.
PREVIOUS = ".sqa-previous"
# Every name a run, eval.py or sqa-baseline may create directly in its directory; metrics_<dim>.json
# are recorded when written (`sqa.core.artefacts.write_metrics`).
RUN_NAMES = (
    *(name for name in OUTPUTS if "*" not in name),
    *REWRITTEN,
    "metrics.json",
    LOG_NAME,
    "eval.log",
    ".hydra",
    LOCK_NAME,
    PREVIOUS,
)


class Options(NamedTuple):
    """How the command that claims a run directory names its settings, for the messages."""

    directory: str
    resume: str | None
    overwrite: str


HYDRA = Options("hydra.run.dir", "resume=true", "overwrite=true")

# Locks this process holds, by resolved run directory: (open lock file, nesting count).
_held: dict[Path, list[Any]] = {}


class RunDirError(RuntimeError):
    """A run directory is owned by another run or holds a previous run's outputs."""


def _owner(lock_path: Path) -> str:
    """The owner recorded in a lock file ("PID 123 on host"), or a note that it is unknown."""
    try:
        # A lock file is written by sqa, but any bytes in it must still give the "in use" message.
        text = lock_path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    return text or "a process that has not written its PID yet"


def open_no_follow(path: Path, flags: int) -> int:
    """`os.open(path, flags | O_CREAT)` that refuses a symbolic link (its target is never touched)."""
    try:
        return os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError:
        if path.is_symlink():
            raise RunDirError(f"{path}: {LINK_REFUSED}") from None
        raise


@contextmanager
def lock(run_dir: str | Path, options: Options = HYDRA) -> Iterator[None]:
    """Hold `<run_dir>/.lock` for the block; a directory locked by another process is an error.

    Nested use in one process (the Hydra callback, then `run`) shares one lock. `options` names the
    command's settings in the messages.
    """
    run_dir = Path(run_dir).resolve()
    if run_dir in _held:
        _held[run_dir][1] += 1
        try:
            yield
        finally:
            _release(run_dir)
        return
    if run_dir.exists() and not run_dir.is_dir():
        raise RunDirError(
            f"{run_dir}: is a file, not a folder; choose another run directory ({options.directory}=...)"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    created = not os.path.lexists(path)
    fd = _locked(path, options)
    os.ftruncate(fd, 0)
    os.write(fd, f"PID {os.getpid()} on {socket.gethostname()}\n".encode())
    _held[run_dir] = [fd, 1]
    refused = False
    try:
        # Only the holder of a fresh lock may restore: a run killed after setting the previous
        # run aside and before it started training is undone here.
        restore_previous(run_dir)
        yield
    except RunDirError:
        refused = True
        raise
    finally:
        # A refused claim leaves the folder as it found it: no lock file where there was none.
        _release(run_dir, remove=created and refused)


def _locked(path: Path, options: Options) -> int:
    """A descriptor of the lock file `path` holding its exclusive flock; held elsewhere: RunDirError."""
    while True:
        fd = open_no_follow(path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunDirError(
                f"{path.parent} is in use by another run ({_owner(path)}); wait for it to finish or "
                f"choose another run directory ({options.directory}=...)"
            ) from None
        # A refused claim removes the file it created (`_release`): a lock taken on a file removed
        # between this open and the flock guards nothing, so the path is opened again.
        try:
            if os.path.samestat(os.fstat(fd), os.stat(path, follow_symlinks=False)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


def _release(run_dir: Path, remove: bool = False) -> None:
    """Drop one hold of `run_dir`'s lock; the last closes it, first removing the file if `remove`."""
    entry = _held[run_dir]
    entry[1] -= 1
    if entry[1] == 0:
        del _held[run_dir]
        if remove:
            # Removed while still locked: a process that opened it meanwhile finds it gone once it
            # gets the flock (`_locked`) and opens the path anew.
            with contextlib.suppress(FileNotFoundError):
                (run_dir / LOCK_NAME).unlink()
        # Closing the descriptor drops the flock.
        os.close(entry[0])


def previous_outputs(run_dir: str | Path) -> list[Path]:
    """The outputs of an earlier run found in `run_dir` (an empty checkpoints/ folder counts not)."""
    run_dir = Path(run_dir)
    found = sorted({p for pattern in OUTPUTS for p in run_dir.glob(pattern)})
    return [p for p in found if not (p.is_dir() and not any(p.iterdir()))]


def prepare(
    run_dir: str | Path,
    resume: bool,
    overwrite: bool,
    remove_log: bool = False,
    inputs: Sequence[str | Path] = (),
    options: Options = HYDRA,
) -> None:
    """Check that a run may write into `run_dir`; with `overwrite`, set a previous run's outputs aside.

    A resumed run keeps everything. A new run into a directory with a previous run's outputs is
    an error naming them, unless `overwrite` is set and sqa wrote everything in the directory
    (none of it is one of the command's `inputs`); then all of it moves into `.sqa-previous/`
    before the run writes anything, so no file of the old run stays beside the new ones, but for
    train.log, which `remove_log` moves too (only before the logging has opened it). The names the
    run may write are then recorded as its own. A run directory written before sqa kept records
    (no `.sqa-owned.json`, but a run's run_info.json) counts as sqa's where its entries have the
    names a run writes.
    """
    if resume and overwrite:
        raise RunDirError(f"{options.resume} and {options.overwrite} contradict each other; choose one")
    run_dir = Path(run_dir)
    found = previous_outputs(run_dir)
    if found and not resume:
        names = ", ".join(p.name for p in found)
        reason = ownership.protected(run_dir, inputs)
        if reason is not None:
            raise RunDirError(
                f"{run_dir} {reason} and holds a previous run's outputs ({names}); sqa never starts a "
                f"run over there: choose another {options.directory}"
            )
        if not overwrite:
            ways = [f"continue that run with {options.resume}"] if options.resume else []
            ways.append(f"start it over with {options.overwrite} (replaces what sqa wrote there)")
            raise RunDirError(
                f"{run_dir} holds a previous run's outputs ({names}); {', '.join(ways)}, or choose "
                f"another {options.directory}"
            )
        legacy = ownership.unrecorded_names(run_dir, (*RUN_NAMES, *OUTPUTS)) if _reads_as_run(run_dir) else []
        try:
            ownership.check_replaceable(run_dir, options.overwrite, inputs, also_mine=(LOCK_NAME, *legacy))
        except ownership.OwnershipError as err:
            raise RunDirError(str(err)) from None
        # Everything sqa wrote there goes (the check above leaves nothing else): the outputs, the
        # files every run rewrites, a score table written beside them.
        keep = {LOCK_NAME, ownership.MANIFEST, PREVIOUS, *([] if remove_log else [LOG_NAME])}
        aside = run_dir / PREVIOUS
        aside.mkdir()
        for name in sorted(ownership.entries(run_dir) - keep):
            os.rename(run_dir / name, aside / name)
        log.info("%s: set the previous run's %s in %s aside", options.overwrite, names, run_dir)
    ownership.claim(run_dir, RUN_NAMES)


def _reads_as_run(run_dir: Path) -> bool:
    """Whether `run_dir` holds a run's record: run_info.json with its seed and packages, config.yaml.

    What marks a run directory written before sqa kept records of its files.
    """
    info = run_dir / "run_info.json"
    if info.is_symlink() or not info.is_file() or not (run_dir / "config.yaml").is_file():
        return False
    try:
        record = json.loads(info.read_bytes()[: 1 << 20])
    except (ValueError, RecursionError, OSError):
        return False
    return isinstance(record, dict) and {"seed", "packages"} <= record.keys()


@contextmanager
def claimed(
    run_dir: str | Path,
    resume: bool,
    overwrite: bool,
    inputs: Sequence[str | Path] = (),
    options: Options = HYDRA,
) -> Iterator[None]:
    """Lock and `prepare` `run_dir` for the block; a previous run set aside and not discarded comes back.

    The block calls `discard_previous` once its configuration has been checked whole (a training
    run: when training starts); a block that ends before, however it ends, or a kill and the
    next claim, restores it. The folders the claim created are removed again if the block wrote
    nothing into them (`remove_unused`). `options` names the command's settings in the messages.
    """
    made = missing_folders(run_dir)
    with lock(run_dir, options):
        prepare(run_dir, resume, overwrite, inputs=inputs, options=options)
        try:
            yield
        finally:
            restore_previous(run_dir)
            # A command that wrote nothing leaves no folder it made only to claim it.
            remove_unused(made, (LOCK_NAME, ownership.MANIFEST))


def restore_previous(run_dir: str | Path) -> bool:
    """Put back the outputs a run that did not get going had set aside (replacing what it wrote).

    Returns whether there were any.
    """
    aside = Path(run_dir) / PREVIOUS
    if not aside.is_dir() or aside.is_symlink():
        return False
    for path in sorted(aside.iterdir()):
        target = Path(run_dir) / path.name
        _remove(target)
        os.rename(path, target)
    aside.rmdir()
    log.info("put the previous run's outputs back in %s", run_dir)
    return True


def discard_previous(run_dir: str | Path) -> None:
    """Remove the previous run's outputs set aside by `overwrite=true`: the new run has started."""
    aside = Path(run_dir) / PREVIOUS
    if aside.is_dir() and not aside.is_symlink():
        shutil.rmtree(aside)
        log.info("removed the previous run's outputs from %s", run_dir)


def _remove(path: Path) -> None:
    """Remove `path` if present: a folder with its contents, a link as a link (never its target)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def missing_folders(run_dir: str | Path) -> list[Path]:
    """`run_dir` and each folder above it that does not exist yet, deepest first (before making it)."""
    missing: list[Path] = []
    path = Path(os.path.abspath(run_dir))
    while not os.path.lexists(path) and path != path.parent:
        missing.append(path)
        path = path.parent
    return missing


def remove_unused(folders: Sequence[Path], unused: Collection[str]) -> None:
    """Remove the run directory `folders[0]`, and the `folders` above it left empty, if it holds nothing.

    Nothing of a command's own: only names of `unused` and empty folders. A folder above that holds
    anything else (another run's directory) stays.
    """
    run_dir = folders[0] if folders else None
    if run_dir is None or run_dir.is_symlink() or not run_dir.is_dir():
        return
    entries = list(run_dir.iterdir())
    for entry in entries:
        empty = entry.is_dir() and not entry.is_symlink() and not any(entry.iterdir())
        if entry.name not in unused and not empty:
            return
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return
