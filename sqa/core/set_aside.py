"""A previous run's outputs set aside by `overwrite=true`: put back if the new run stops early, else removed.

Starting over moves the previous run's outputs into `.sqa-previous/` and removes them only once
the new run has checked its configuration whole (`discard_previous`); a run that stops before
puts them back (`restore_previous`), and so does the next claim of the directory after a kill.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger(__name__)

# Where a run started over keeps the previous run's outputs until its configuration is built.
PREVIOUS = ".sqa-previous"


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
