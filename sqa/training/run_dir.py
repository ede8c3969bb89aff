"""Run directories: owned by one run at a time, never silently reused.

A run holds an exclusive `flock` on `<run_dir>/.lock` while it runs. The kernel releases it when
the process ends, however it ends, so a killed run leaves no stale lock behind. A directory that
holds a previous run's outputs is resumed (`resume=true`) or started over (`overwrite=true`,
which removes those outputs first); anything else is refused before a file is written.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

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
)
REWRITTEN = ("config.yaml", "run_info.json", "data_problems.txt")

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


class NoFollowFileHandler(logging.FileHandler):
    """A `logging.FileHandler` appending to its file, refusing a symbolic link in its place."""

    def _open(self) -> Any:
        fd = open_no_follow(Path(self.baseFilename), os.O_WRONLY | os.O_APPEND)
        return os.fdopen(fd, "a", encoding=self.encoding, errors=self.errors)


@contextmanager
def lock(run_dir: str | Path) -> Iterator[None]:
    """Hold `<run_dir>/.lock` for the block; a directory locked by another process is an error.

    Nested use in one process (the Hydra callback, then `run`) shares one lock.
    """
    run_dir = Path(run_dir).resolve()
    if run_dir in _held:
        _held[run_dir][1] += 1
        try:
            yield
        finally:
            _release(run_dir)
        return
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    fd = open_no_follow(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RunDirError(
            f"{run_dir} is in use by another run ({_owner(path)}); wait for it to finish or choose "
            "another run directory (hydra.run.dir=...)"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"PID {os.getpid()} on {socket.gethostname()}\n".encode())
    _held[run_dir] = [fd, 1]
    try:
        yield
    finally:
        _release(run_dir)


def _release(run_dir: Path) -> None:
    entry = _held[run_dir]
    entry[1] -= 1
    if entry[1] == 0:
        del _held[run_dir]
        # Closing the descriptor drops the flock; the file stays (removing it would race with a
        # process that has opened it and waits to lock it).
        os.close(entry[0])


def previous_outputs(run_dir: str | Path) -> list[Path]:
    """The outputs of an earlier run found in `run_dir` (an empty checkpoints/ folder counts not)."""
    run_dir = Path(run_dir)
    found = sorted({p for pattern in OUTPUTS for p in run_dir.glob(pattern)})
    return [p for p in found if not (p.is_dir() and not any(p.iterdir()))]


def prepare(run_dir: str | Path, resume: bool, overwrite: bool, remove_log: bool = False) -> None:
    """Check that a run may write into `run_dir`; with `overwrite`, remove a previous run's outputs.

    A resumed run keeps everything. A new run into a directory with a previous run's outputs is
    an error naming them, unless `overwrite` is set; then they are removed before the run writes
    anything, so no file of the old run stays beside the new ones. `remove_log` also removes
    train.log (only before the logging has opened it).
    """
    if resume and overwrite:
        raise RunDirError("resume=true and overwrite=true contradict each other; choose one")
    run_dir = Path(run_dir)
    found = previous_outputs(run_dir)
    if resume or not found:
        return
    names = ", ".join(p.name for p in found)
    if not overwrite:
        raise RunDirError(
            f"{run_dir} holds a previous run's outputs ({names}); continue that run with resume=true, "
            "start it over with overwrite=true (removes them), or choose another hydra.run.dir"
        )
    extra = [run_dir / name for name in (*REWRITTEN, *(["train.log"] if remove_log else []))]
    for path in [*found, *(p for p in extra if p.exists())]:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    log.info("overwrite=true: removed the previous run's %s from %s", names, run_dir)


LOG_NAME = "train.log"
LOG_FORMAT = "[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"


@contextmanager
def log_to_file(run_dir: str | Path) -> Iterator[None]:
    """For the block, copy what the console shows (logging, Lightning, warnings) into train.log.

    Under train.py, Hydra's job logging already writes the root logger to `<run_dir>/train.log`;
    otherwise a file handler is added for the block, plus a console handler where the root logger
    has none. Lightning's loggers, which do not propagate when Lightning was imported before
    logging was configured, get the file handler too; warnings go through logging.
    """
    # The folder is resolved, not the file: a linked train.log must be refused, never followed.
    path = Path(run_dir).resolve() / LOG_NAME
    root = logging.getLogger()
    added: list[tuple[logging.Logger, logging.Handler]] = []
    handler = next(
        (
            h
            for h in root.handlers
            if isinstance(h, logging.FileHandler)
            and Path(h.baseFilename).parent.resolve() / Path(h.baseFilename).name == path
        ),
        None,
    )
    own_file = handler is None
    if handler is None:
        handler = NoFollowFileHandler(path, encoding="utf-8")
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
        if not root.handlers:
            added.append((root, logging.StreamHandler()))
        added.append((root, handler))
    for name in ("lightning.pytorch", "lightning.fabric"):
        if not logging.getLogger(name).propagate:
            added.append((logging.getLogger(name), handler))
    sqa_logger = logging.getLogger("sqa")
    level = sqa_logger.level
    if sqa_logger.getEffectiveLevel() > logging.INFO:
        sqa_logger.setLevel(logging.INFO)
    for logger, h in added:
        logger.addHandler(h)
    logging.captureWarnings(True)
    try:
        yield
    finally:
        logging.captureWarnings(False)
        for logger, h in added:
            logger.removeHandler(h)
        sqa_logger.setLevel(level)
        if own_file:
            handler.close()


def is_leader() -> bool:
    """Whether this process is the first DDP rank (the only one that owns the run directory)."""
    # Imported here: `lock` and `prepare` stay free of torch and Lightning (seconds to import).
    from lightning.pytorch.utilities import rank_zero_only

    return rank_zero_only.rank == 0


class ClaimRunDirectory(Callback):
    """Hydra callback: lock and check the run directory before Hydra writes `.hydra/` and train.log.

    Without it, a second run into a directory in use would replace the first run's `.hydra/`
    copies before `sqa.training.run.run` could refuse it. The lock is held until the run ends. A
    refused directory ends the process (exit status 1) with the message on stderr.
    """

    def __init__(self) -> None:
        self._claims: list[Any] = []

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """Claim `hydra.run.dir` (first DDP rank only; other ranks share the leader's directory)."""
        if not is_leader():
            return
        HydraConfig.instance().set_config(config)
        run_dir = Path(str(config.hydra.run.dir))
        claim = lock(run_dir)
        try:
            claim.__enter__()
            self._claims.append(claim)
            prepare(run_dir, bool(config.get("resume")), bool(config.get("overwrite")), remove_log=True)
            if (run_dir / LOG_NAME).is_symlink():
                # Hydra's job logging, configured next, would append to the link's target.
                raise RunDirError(f"{run_dir / LOG_NAME}: {LINK_REFUSED}")
        except RunDirError as err:
            self.on_run_end()
            # Hydra turns a callback's exceptions into warnings and runs the job anyway; only an
            # exit stops it before it writes into the directory.
            raise SystemExit(f"Error: {err}") from None

    def on_run_end(self, **kwargs: Any) -> None:
        """Release the lock taken in `on_run_start`."""
        while self._claims:
            self._claims.pop().__exit__(None, None, None)
