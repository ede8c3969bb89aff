import ctypes
import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from sqa.core import atomic
from sqa.core.atomic import _exchange, atomic_dir, atomic_write, atomic_write_text, default_mode, leftovers
from tests.conftest import REPO


def test_interrupted_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "metrics.json"
    atomic_write_text(target, "old")

    def crash_midway(fh):
        fh.write(b"new but incomp")
        raise KeyboardInterrupt  # as a kill between two writes would

    with pytest.raises(KeyboardInterrupt):
        atomic_write(target, crash_midway)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]
    atomic_write_text(target, "new")
    assert target.read_text() == "new"


def test_written_files_get_the_mode_of_a_plain_open(tmp_path):
    old = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o640
        assert default_mode(directory=True) == 0o750
    finally:
        os.umask(old)
    atomic_write_text(tmp_path / "b.txt", "x")
    assert stat.S_IMODE((tmp_path / "b.txt").stat().st_mode) == 0o666 & ~old


def test_a_folder_appears_whole_with_the_mode_of_a_plain_mkdir(tmp_path):
    target = tmp_path / "sub" / "export"
    old = os.umask(0o027)
    try:
        with atomic_dir(target) as tmp:
            (tmp / "a.txt").write_text("a")
            assert not target.exists()
    finally:
        os.umask(old)
    assert (target / "a.txt").read_text() == "a"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert [p.name for p in target.parent.iterdir()] == ["export"]


def test_an_interrupted_folder_leaves_the_old_one_and_no_temporary(tmp_path):
    target = tmp_path / "export"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt), atomic_dir(target, replace=True) as tmp:
        (tmp / "a.txt").write_text("new")
        raise KeyboardInterrupt
    assert (target / "a.txt").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_a_folder_replaces_the_old_one_only_when_asked(tmp_path):
    target = tmp_path / "export"
    with atomic_dir(target) as tmp:
        (tmp / "a.txt").write_text("old")
    with pytest.raises(OSError), atomic_dir(target) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["a.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["export"]
    with atomic_dir(target, replace=True) as tmp:
        (tmp / "b.txt").write_text("new")
    assert sorted(p.name for p in target.iterdir()) == ["b.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


# Replacements killed at each of their steps. The old and the new export share file names but not
# contents, and the new one has a file more, so any mix of the two is told apart from either.
OLD = {"a.txt": "old", "b.txt": "old", "sub/c.txt": "old"}
NEW = {"a.txt": "new", "b.txt": "new", "sub/c.txt": "new", "d.txt": "new"}
NEWER = {"e.txt": "newer"}

# The child fills the new export, then arms the kill: after (or before) the `nth` call of `step`
# (a function of os, or atomic._exchange) it writes the step to the marker and dies by `sig`, as
# `kill -9` or the OOM killer would kill it (no finally, no atexit). "fill" dies inside the block,
# two files into the new export. "0" as the last argument makes the system seem to have no
# exchange, so that the two-rename fallback runs.
KILL_AT = """
import os, signal, sys
from pathlib import Path
from sqa.core import atomic

path, marker, step, when, nth, sig, exchange = sys.argv[1:]
nth, sig = int(nth), getattr(signal, sig)
NEW = {"a.txt": "new", "b.txt": "new", "sub/c.txt": "new", "d.txt": "new"}

def die():
    Path(marker).write_text(step)
    os.kill(os.getpid(), sig)

def armed(real):
    calls = 0
    def call(*args, **kwargs):
        nonlocal calls
        calls += 1
        if calls == nth and when == "before":
            die()
        result = real(*args, **kwargs)
        if calls == nth and when == "after":
            die()
        return result
    return call

if exchange == "0":
    atomic._exchange = lambda a, b: False
with atomic.atomic_dir(path, replace=True) as tmp:
    for i, (name, text) in enumerate(NEW.items()):
        if step == "fill" and i == 2:
            die()
        (tmp / name).parent.mkdir(exist_ok=True)
        (tmp / name).write_text(text)
    # Armed only now: the calls counted are those that put the filled folder in place.
    if step == "_exchange":
        atomic._exchange = armed(atomic._exchange)
    elif step != "fill":
        setattr(os, step, armed(getattr(os, step)))
sys.exit("not killed")
"""


def write_tree(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def tree(folder: Path) -> dict[str, str]:
    """The files under `folder` (relative names) and their texts."""
    return {p.relative_to(folder).as_posix(): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


def kind(folder: Path, name: str) -> str:
    """What a folder holds: "old", "new", "empty", "part of old", "part of new"; "aside: ..." for the
    fallback's `.<name>.sqa-old-*/<name>` (the old folder moved aside whole)."""
    if os.listdir(folder) == [name] and (folder / name).is_dir():
        return "aside: " + kind(folder / name, name)
    files = tree(folder)
    for label, whole in (("old", OLD), ("new", NEW)):
        if files == whole:
            return label
    if not files:
        return "empty"
    for label, whole in (("old", OLD), ("new", NEW)):
        if files.items() <= whole.items():
            return "part of " + label
    raise AssertionError(f"{folder} mixes the old and the new export: {files}")


def replace_killed(
    path: Path, step: str, when: str = "after", nth: int = 1, sig: str = "SIGKILL", exchange: bool = True
) -> dict[str, str]:
    """Replace the export OLD at `path` by NEW in a child killed at `step`; what it left beside `path`.

    Returns {infix of each leftover ("sqa-new-", "sqa-old-"): its `kind`}.
    """
    write_tree(path, OLD)
    marker = path.parent.parent / "killed-at"
    args = [str(path), str(marker), step, when, str(nth), sig, "1" if exchange else "0"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AT, *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )
    # Killed by the signal at the step asked for, not by an error before it.
    assert proc.returncode == -getattr(signal, sig), proc.stderr
    assert marker.read_text() == step
    left = leftovers(path)
    infixes = [p.name[len(f".{path.name}.") :][: len(atomic.NEW_INFIX)] for p in left]
    assert len(set(infixes)) == len(infixes), left
    return {infix: kind(p, path.name) for infix, p in zip(infixes, left, strict=True)}


def replace_again(path: Path, before: dict[str, str]) -> None:
    """The next replacement: it finds `before` at `path`, then leaves NEWER there and nothing else."""
    with atomic_dir(path, replace=True) as tmp:
        # While the next run fills its folder, `path` holds a whole export, and the leftovers are
        # gone already.
        assert tree(path) == before
        assert leftovers(path) == [tmp]
        assert sorted(path.parent.iterdir()) == sorted([path, tmp])
        write_tree(tmp, NEWER)
    assert leftovers(path) == []
    assert tree(path) == NEWER
    assert [p.name for p in path.parent.iterdir()] == [path.name]


@pytest.mark.parametrize(
    ("step", "at_path", "left"),
    [
        # Filling the new folder: the old export stays; the part-written one is left beside it.
        ("fill", OLD, {"sqa-new-": "part of new"}),
        # Right after the exchange: the new export is in place; its former temporary holds the old.
        ("_exchange", NEW, {"sqa-new-": "old"}),
        # After that is renamed to say what it holds, before its removal starts.
        ("rename", NEW, {"sqa-old-": "old"}),
        # Midway through the removal of the old one (two of its three files deleted).
        ("unlink", NEW, {"sqa-old-": "part of old"}),
    ],
)
def test_a_replacement_killed_at_any_step_leaves_the_old_or_the_new_export(tmp_path, step, at_path, left):
    path = tmp_path / "out" / "export"
    nth = 2 if step == "unlink" else 1
    assert replace_killed(path, step, nth=nth) == left
    assert tree(path) == at_path
    replace_again(path, at_path)


@pytest.mark.parametrize(
    ("step", "when", "nth", "at_path", "left"),
    [
        # Before the old one is moved aside: only its (empty) folder to be moved into exists yet.
        ("replace", "before", 1, OLD, {"sqa-new-": "new", "sqa-old-": "empty"}),
        # Between the two renames: no export at `path`; the old one whole in `.export.sqa-old-*/export`.
        ("replace", "after", 1, None, {"sqa-new-": "new", "sqa-old-": "aside: old"}),
        # After the new one is renamed into place, before the old one's removal starts; then midway.
        ("rename", "after", 1, NEW, {"sqa-old-": "aside: old"}),
        ("unlink", "after", 2, NEW, {"sqa-old-": "aside: part of old"}),
    ],
)
def test_the_fallback_without_exchange_killed_at_any_step(tmp_path, step, when, nth, at_path, left):
    """Where the system cannot exchange two folders, the old one is moved aside and the new one
    renamed into place: killed between the two renames, `path` is missing (until the next call,
    not only for an instant). The next `atomic_dir` call for `path` first puts the old export back
    at `path`, so that it is there while that call fills its folder, then removes every leftover.
    """
    path = tmp_path / "out" / "export"
    assert replace_killed(path, step, when, nth, exchange=False) == left
    if at_path is None:
        assert not os.path.lexists(path)
    else:
        assert tree(path) == at_path
    replace_again(path, OLD if at_path is None else at_path)


def test_a_sigterm_while_filling_leaves_a_temporary_that_the_next_call_removes(tmp_path):
    # SIGTERM's default action ends the process as SIGKILL does: no finally runs, so the
    # part-written folder stays (in the issue, 38 MB of `.export.*`) until the next call.
    path = tmp_path / "out" / "export"
    assert replace_killed(path, "fill", sig="SIGTERM") == {"sqa-new-": "part of new"}
    assert tree(path) == OLD
    replace_again(path, OLD)


def test_a_name_holding_the_new_infix_still_names_its_old_folder_as_its_own(tmp_path):
    # The old folder's name is built from the temporary's prefix: replacing the first "sqa-new-"
    # in `.sqa-new-x.sqa-new-abc` would name it `.sqa-old-x.sqa-new-abc`, a leftover of another path.
    path = tmp_path / "out" / "sqa-new-x"
    assert replace_killed(path, "rename") == {"sqa-old-": "old"}
    replace_again(path, NEW)


@pytest.mark.skipif(sys.platform != "linux", reason="renameat2 is Linux's")
def test_the_exchange_works_here_so_a_path_is_never_missing(tmp_path, monkeypatch):
    # Without it the tests above would run only the fallback: check that this system (kernel and
    # the file system under tmp_path) swaps two folders in one step, and that atomic_dir uses it.
    a, b = tmp_path / "a", tmp_path / "b"
    write_tree(a, OLD)
    write_tree(b, NEW)
    assert _exchange(a, b) is True
    assert (tree(a), tree(b)) == (NEW, OLD)

    results: list[bool] = []

    def spy(x: Path, y: Path) -> bool:
        results.append(_exchange(x, y))
        return results[-1]

    monkeypatch.setattr(atomic, "_exchange", spy)
    with atomic_dir(b, replace=True) as tmp:
        write_tree(tmp, NEWER)
    assert results == [True]
    assert tree(b) == NEWER
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]


def test_a_failed_fallback_rename_puts_the_old_folder_back(tmp_path, monkeypatch):
    path = tmp_path / "export"
    write_tree(path, OLD)
    rename = os.rename

    def refuse_the_new_folder(src: Path, dst: Path) -> None:
        if Path(src).name.startswith(".export.sqa-new-"):
            raise OSError(errno.EIO, "injected")
        rename(src, dst)

    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    monkeypatch.setattr(os, "rename", refuse_the_new_folder)
    with pytest.raises(OSError, match="injected"), atomic_dir(path, replace=True) as tmp:
        write_tree(tmp, NEW)
    assert tree(path) == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_leftovers_are_only_the_folders_of_that_name(tmp_path):
    own = [tmp_path / ".export.sqa-new-abc", tmp_path / ".export.sqa-old-def"]
    others = {
        "exports": tmp_path / ".exports.sqa-new-abc",
        # The temporary of a path named `export.sqa-new-x`, which `.export.sqa-new-` also begins.
        "export.sqa-new-x": tmp_path / ".export.sqa-new-x.sqa-new-abc",
    }
    for folder in [*own, *others.values(), tmp_path / "kept"]:
        folder.mkdir()
        (folder / "f.txt").write_text("x")
    (tmp_path / ".export.sqa-new-file").write_text("a file, not a folder")
    (tmp_path / ".export.sqa-old-link").symlink_to(tmp_path / "kept", target_is_directory=True)

    assert leftovers(tmp_path / "export") == own
    for name, folder in others.items():
        assert leftovers(tmp_path / name) == [folder]
    assert leftovers(tmp_path / "missing" / "export") == []

    with atomic_dir(tmp_path / "export", replace=True) as tmp:
        (tmp / "f.txt").write_text("new")
    assert not any(folder.exists() for folder in own)
    assert all(folder.exists() for folder in others.values())
    assert (tmp_path / ".export.sqa-new-file").is_file()
    assert (tmp_path / ".export.sqa-old-link").is_symlink()
    assert (tmp_path / "kept" / "f.txt").read_text() == "x"


def refusing_libc(code: int, flags: list[int]):
    """A stand-in for `ctypes.CDLL` whose renameat2 fails with errno `code`, recording its flags."""

    def renameat2(*args: object) -> int:
        flags.append(args[-1])
        ctypes.set_errno(code)
        return -1

    return lambda *args, **kwargs: SimpleNamespace(renameat2=renameat2)


# What a file system without the exchange answers: old kernels ENOSYS, the flag unknown to a file
# system (overlayfs, some network mounts) EINVAL, an operation it refuses EOPNOTSUPP.
@pytest.mark.parametrize(
    "code", [errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP], ids=["EINVAL", "ENOSYS", "EOPNOTSUPP"]
)
def test_a_file_system_without_the_exchange_still_gets_its_folder_replaced(tmp_path, monkeypatch, code):
    path = tmp_path / "export"
    write_tree(path, OLD)
    flags: list[int] = []
    monkeypatch.setattr(atomic.ctypes, "CDLL", refusing_libc(code, flags))
    with atomic_dir(path, replace=True) as tmp:
        write_tree(tmp, NEW)
    assert flags == [2]  # RENAME_EXCHANGE was tried, then the two renames replaced the folder
    assert tree(path) == NEW
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_an_export_on_a_file_system_answering_einval_is_replaced(tmp_path, monkeypatch):
    import torch

    from sqa.exports.format import export_predictor
    from sqa.models.backbone import LogMelBackbone
    from sqa.models.predictor import MOSPredictor

    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(channels=16, conv_layers=1), head_dim=8)
    path = export_predictor(model, tmp_path / "export", 16000, ["a"])
    flags: list[int] = []
    monkeypatch.setattr(atomic.ctypes, "CDLL", refusing_libc(errno.EINVAL, flags))
    export_predictor(model, path, 16000, ["b", "c"], overwrite=True)
    assert flags == [2]
    assert "domains:\n- b\n- c\n" in (path / "config.yaml").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["export"]


def test_any_other_failure_of_the_exchange_is_raised_and_leaves_the_old_folder(tmp_path, monkeypatch):
    path = tmp_path / "export"
    write_tree(path, OLD)
    monkeypatch.setattr(atomic.ctypes, "CDLL", refusing_libc(errno.EACCES, []))
    with pytest.raises(PermissionError, match="Permission denied"), atomic_dir(path, replace=True) as tmp:
        write_tree(tmp, NEW)
    assert tree(path) == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["export"]
