"""A run folder: one run at a time, and a previous run's outputs resumed or started over.

A run holds the directory's lock while it runs (`sqa.core.run_lock`). A directory that holds a
previous run's outputs is resumed (`resume=true`) or started over (`overwrite=true`); anything
else is refused before a file is written. A run records the names it writes
(`sqa.core.ownership`), and `overwrite=true` refuses a directory holding anything else. Starting
over sets the previous run's outputs aside until the new run gets going (`sqa.core.set_aside`).
Training, `eval.py`, `sqa-baseline` and `sqa-bench` claim their directories here (`claimed`).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import shutil
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sqa.core import ownership
from sqa.core.run_lock import (
    HYDRA,
    LINK_REFUSED,
    LOCK_NAME,
    Options,
    RunDirError,
    discard_previous,
    lock,
    open_no_follow,
    record_point,
    restore_previous,
    set_previous_aside,
)
from sqa.core.set_aside import PREVIOUS, is_set_aside

# The names of the lock and the set-aside run stay importable from here, where they began.
__all__ = [
    "HYDRA",
    "LINK_REFUSED",
    "LOCK_NAME",
    "LOG_NAME",
    "OUTPUTS",
    "PREVIOUS",
    "REWRITTEN",
    "RUN_NAMES",
    "Options",
    "RunDirError",
    "claimed",
    "discard_previous",
    "lock",
    "missing_folders",
    "open_no_follow",
    "prepare",
    "previous_outputs",
    "record_point",
    "remove_unused",
    "restore_previous",
]

log = logging.getLogger(__name__)

# What a run writes besides config.yaml, run_info.json, data_problems.txt and train.log (which
# a run that failed before training leaves, and which the next run rewrites). Logger folders use
# the names of sqa's logger configs.
OUTPUTS = (
    "checkpoints",
    "export",
    # One run folder per candidate model (sqa.training.candidates).
    "candidates",
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
    # Of sqa-bench (sqa.baselines.bench).
    "bench.json",
    "bench.csv",
    "bench_predictions.csv",
)
REWRITTEN = ("config.yaml", "run_info.json", "data_problems.txt", "valid_split.csv", "test_split.csv")
LOG_NAME = "train.log"
# What a run writes into a folder before it trains (a candidate's folder: its configuration, record
# and splits), all of which the next run writes again; data_problems.txt, a report, is not.
PREPARED = ("config.yaml", "run_info.json", "valid_split.csv", "test_split.csv", LOG_NAME)
# Every name a run, eval.py or sqa-baseline may create directly in its directory: what a run
# directory written before sqa kept records may hold of sqa's.
RUN_NAMES = (
    *(name for name in OUTPUTS if "*" not in name),
    *REWRITTEN,
    "metrics.json",
    LOG_NAME,
    "eval.log",
    "evaluation.log",
    ".hydra",
    LOCK_NAME,
)


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
    (none of it is one of the command's `inputs`); then all of it moves into `.sqa-previous-<token>/`
    before the run writes anything, so no file of the old run stays beside the new ones, but for
    train.log, which `remove_log` moves too (only before the logging has opened it). What the run
    then creates is recorded as its own by the claim (`sqa.core.run_lock`). A run directory
    written before sqa kept records (no `.sqa-owned.json` of its own, but a run's run_info.json)
    counts as sqa's where its entries have the names a run writes.
    """
    if resume and overwrite:
        raise RunDirError(f"{options.resume} and {options.overwrite} contradict each other; choose one")
    run_dir = Path(run_dir)
    found = previous_outputs(run_dir)
    legacy = ownership.unrecorded_names(run_dir, (*RUN_NAMES, *OUTPUTS)) if _reads_as_run(run_dir) else []
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
        try:
            ownership.check_replaceable(run_dir, options.overwrite, inputs, also_mine=(LOCK_NAME, *legacy))
        except ownership.OwnershipError as err:
            raise RunDirError(str(err)) from None
        # Everything sqa wrote there goes (the check above leaves nothing else): the outputs, the
        # files every run rewrites, a score table written beside them.
        keep = {LOCK_NAME, ownership.MANIFEST, *([] if remove_log else [LOG_NAME])}
        moved = [n for n in ownership.entries(run_dir) - keep if not is_set_aside(n)]
        set_previous_aside(run_dir, moved)
        log.info("%s: set the previous run's %s in %s aside", options.overwrite, names, run_dir)
    else:
        # A run rewrites these names: resumed, new or with nothing to start over, it never
        # writes over a file of the user's.
        mine = {*ownership.owned(run_dir), *legacy}
        patterns = (*REWRITTEN, *OUTPUTS)
        taken = sorted(
            name
            for name in ownership.entries(run_dir) - mine
            if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)
        )
        if taken:
            more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
            raise RunDirError(
                f"{run_dir}: holds {taken[0]}, which sqa did not write{more}, under a name a run writes; "
                f"sqa never writes over it: choose another {options.directory}"
            )


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
    nothing into them (`remove_unused`), and so are the output folders that a block which fails
    makes and fills with `PREPARED` files only (`remove_prepared`). `options` names the command's
    settings in the messages.
    """
    made = missing_folders(run_dir)
    with lock(run_dir, options):
        prepare(run_dir, resume, overwrite, inputs=inputs, options=options)
        before = ownership.entries(run_dir)
        try:
            yield
        except BaseException:
            remove_prepared(run_dir, before)
            raise
        finally:
            restore_previous(run_dir)
            # A command that wrote nothing leaves no folder it made only to claim it.
            remove_unused(made, (LOCK_NAME, ownership.MANIFEST))


def remove_prepared(run_dir: str | Path, before: Collection[str]) -> None:
    """Remove the output folders of `run_dir` not in `before` that hold only `PREPARED` files, at any depth.

    A run of candidates that fails before it trains leaves `candidates/<name>/` with a configuration
    and a record each: an output folder, which would make the corrected command refuse the
    directory as a previous run's. A folder holding anything else (a checkpoint, a logger's files,
    a file of the user's, a link) is kept whole.
    """
    run_dir = Path(run_dir)
    for name in sorted(ownership.entries(run_dir) - set(before)):
        path = run_dir / name
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in OUTPUTS) and _holds_only(path, PREPARED):
            shutil.rmtree(path)


def _holds_only(folder: Path, names: Collection[str]) -> bool:
    """Whether `folder` is a folder, not a link, holding only files of `names`, records and such folders."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    for entry in folder.iterdir():
        if entry.is_symlink():
            return False
        if entry.is_dir():
            if not _holds_only(entry, names):
                return False
        elif entry.name not in (*names, LOCK_NAME, ownership.MANIFEST):
            return False
    return True


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
