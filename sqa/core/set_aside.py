"""A previous run's outputs set aside by `overwrite=true`: put back if the new run stops early, else removed.

Starting over moves the previous run's outputs into `.sqa-previous-<claim>/` and removes them
only once the new run has checked its configuration whole (`discard`); a run that stops
before puts them back (`restore`), and so does the next claim of the directory after a kill
(`recover`). `<claim>` is the random token of the claim that set them aside, which that
claim alone keeps in the directory's lock file (`sqa.core.run_lock`): sqa acts only on a set-aside
folder whose token is its own claim's, or that of the claim before it, which the lock file proves.
Any other folder of that name (one the user made, copied or unpacked) is left alone and named in
one line. Discarding first renames the folder to `.sqa-discarded-<claim>/` in one step, so that a
kill while its files are deleted never puts a half-deleted run back over the new one.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Collection
from pathlib import Path

from sqa.core import ownership

log = logging.getLogger(__name__)

# The lock file of a run directory (`sqa.core.run_lock`), never set aside nor put back.
LOCK_NAME = ".lock"
# Where a run started over keeps the previous run's outputs until its configuration is built
# (followed by `-<claim token>`).
PREVIOUS = ".sqa-previous"
# A set-aside run being deleted (followed by `-<claim token>`).
DISCARDED = ".sqa-discarded"


def aside_folder(run_dir: str | Path, token: str) -> Path:
    """The folder in which the claim holding `token` sets a previous run aside."""
    return Path(run_dir) / f"{PREVIOUS}-{token}"


def is_set_aside(name: str) -> bool:
    """Whether the entry `name` is named like a set-aside or discarded run (whoever made it)."""
    return name.startswith((PREVIOUS, DISCARDED))


def set_aside(run_dir: str | Path, token: str, names: Collection[str]) -> None:
    """Move the entries `names` of `run_dir` into the set-aside folder of the claim holding `token`.

    Before its entry moves, each name stays sqa's by that entry's identity alone
    (`ownership.intend`): killed before the move, the entry is still provably sqa's; after it,
    a file made under the name by anyone else is another entry, never taken for the new run's
    and replaced when the previous run is put back.
    """
    aside = aside_folder(run_dir, token)
    aside.mkdir()
    for name in sorted(names):
        ownership.intend(run_dir, name, ownership.entry_id(Path(run_dir) / name))
        os.rename(Path(run_dir) / name, aside / name)


def restore(run_dir: str | Path, token: str | None) -> bool:
    """Put back the outputs that the claim holding `token` set aside, replacing what it recorded since.

    An entry of `run_dir` under a set-aside name that the record does not list (made after the
    set-aside by someone else, or by the claim after its last record) is kept, and the set-aside
    entry stays in the set-aside folder, named in one line. The names put back are recorded as
    sqa's again. Returns whether there was a set-aside.
    """
    aside = aside_folder(run_dir, token) if token else None
    if aside is None or aside.is_symlink() or not aside.is_dir():
        return False
    run_dir = Path(run_dir)
    mine = ownership.owned(run_dir)
    # Only names a claim sets aside come back: a lock, a record or a set-aside inside it never do.
    names = sorted(p.name for p in aside.iterdir() if not _reserved(p.name))
    kept = [name for name in names if os.path.lexists(run_dir / name) and name not in mine]
    back = [name for name in names if name not in kept]
    for name in back:
        target = run_dir / name
        _remove(target)
        # Noted before the move, by the entry's identity: killed after it, the entry is provably sqa's.
        ownership.intend(run_dir, name, ownership.entry_id(aside / name))
        os.rename(aside / name, target)
    ownership.record(run_dir, back)
    if kept:
        log.warning(
            "%s: kept %s there: %s holds %s now, which sqa cannot prove it wrote, and never replaces",
            aside,
            ", ".join(kept),
            run_dir,
            "an entry of that name" if len(kept) == 1 else "entries of those names",
        )
    left = sorted(p.name for p in aside.iterdir() if p.name not in kept)
    if left:
        log.warning("%s: left %s there; sqa puts back only a run's outputs", aside, ", ".join(left))
    if not kept and not left:
        aside.rmdir()
    log.info("put the previous run's outputs back in %s", run_dir)
    return True


def discard(run_dir: str | Path, token: str | None) -> None:
    """Remove the previous run's outputs that the claim holding `token` set aside: the new run has started."""
    aside = aside_folder(run_dir, token) if token else None
    if aside is None or aside.is_symlink() or not aside.is_dir():
        return
    discarded = Path(run_dir) / f"{DISCARDED}-{token}"
    # One rename first: killed while deleting, what is left can never be put back.
    os.rename(aside, discarded)
    shutil.rmtree(discarded)
    log.info("removed the previous run's outputs from %s", run_dir)


def recover(run_dir: str | Path, token: str | None) -> list[str]:
    """Finish what the killed claim holding `token` left: its set-aside put back, its discard done.

    Returns the names put back. Every other entry named like a set-aside is left alone and named
    in one line.
    """
    run_dir = Path(run_dir)
    before = ownership.entries(run_dir)
    if token:
        discarded = run_dir / f"{DISCARDED}-{token}"
        if discarded.is_dir() and not discarded.is_symlink():
            shutil.rmtree(discarded)
        restore(run_dir, token)
    restored = sorted(ownership.entries(run_dir) - before)
    # Its own set-aside, where it kept entries (`restore`), has been named already.
    own = {aside_folder(run_dir, token).name} if token else set()
    strangers = sorted(name for name in ownership.entries(run_dir) - own if is_set_aside(name))
    if strangers:
        log.warning(
            "%s: left %s alone; sqa cannot prove that it set %s aside here",
            run_dir,
            ", ".join(strangers),
            "it" if len(strangers) == 1 else "them",
        )
    return restored


def _reserved(name: str) -> bool:
    """Whether `name` is one a claim never sets aside: the lock, the record, a set-aside."""
    return name in (LOCK_NAME, ownership.MANIFEST) or is_set_aside(name)


def _remove(path: Path) -> None:
    """Remove `path` if present: a folder with its contents, a link as a link (never its target)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
