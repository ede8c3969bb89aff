"""Property: whatever a folder holds, no sqa command with overwrite or resume loses or changes a user's file.

Hypothesis draws a history of one folder: the user's files and folders (some named like sqa's
outputs, or `.sqa-previous`), sqa commands (new, resumed or started over) stopped by a signal
at any of their file-system calls (renames, removals, folder creations, closes; the last ones,
after the final output write and while the claim ends, included) or left to finish, records
forged or copied from another folder, set-aside folders and lock files forged with tokens of
their own, and the user's own outputs of `sqa-table --csv`, `sqa-compare --json` and
`sqa-bench` written through `write_output` (killed or not) into the run folder or a folder of
theirs, by its path, a symbolic link, a hard link or a linked folder, with or without
overwrite, over the user's files and over the command's inputs. Then one more command runs
with `overwrite=true` or `resume=true`. Each command runs in a forked process as train.py,
eval.py and sqa-baseline claim their folders (`claimed`, then `discard_previous` once under
way, under `stop_on_signals`), writing sqa's outputs whether or not the names exist, folders
whole through `atomic_dir` as an export is. The signal is SIGKILL, or SIGTERM or SIGINT (which
end the command through every `finally`), perhaps followed after a few more calls by the
SIGKILL a scheduler sends when its grace time is up.

After every step each file the user made is still there with the bytes it had; an output is
refused exactly where the path is an input (by any name), a folder, or a file and overwrite
was not given. In a folder that has only ever held what sqa wrote, every `resume=true` or
`overwrite=true` command is accepted after commands that finished, were stopped by SIGTERM or
SIGINT anywhere, or were killed by SIGKILL between their steps (after their final write
included). A SIGKILL at any of the file-system calls leaves nothing the next claim refuses, except an empty
folder made by a plain mkdir before sqa noted it (`unproven_empty_folders`): sqa cannot prove an
empty folder its own. The five gaps a SIGKILL between an entry and its record left before sqa
noted entries first are `CLOSED_GAPS`, one test each.

The user writes only names that are free at the top level (a file inside a folder of sqa's goes
with that folder, as documented), also between a kill and the next command, while a killed
command's set-aside waits to be put back under names the user may have taken meanwhile. The
name `.lock` is sqa's in any folder it writes. A record the user forges or copies in is theirs,
kept byte for byte: while it is there every command is refused.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sqa.core import ownership
from sqa.core.atomic import atomic_dir, atomic_write_text, write_output
from sqa.core.run_folder import RunDirError, claimed, discard_previous
from sqa.core.set_aside import LOCK_NAME, PREVIOUS, is_set_aside
from sqa.core.signals import stop_on_signals

FORGED_TOKEN, OTHER_TOKEN = "a" * 32, "c" * 32
# Names a user may give their files: their own, and sqa's.
USER_NAMES = [
    "thesis.tex",
    "notes",
    "config.yaml",
    "metrics.json",
    "checkpoints",
    "wandb",
    "mapped",
    "tensorboard",
    "evaluation.log",
    PREVIOUS,
]
# What the commands write: files and folders every run writes again, whether or not they exist.
SQA_WRITES = [
    "config.yaml",
    "metrics.json",
    "predictions.csv",
    "checkpoints",
    "plots",
    "wandb",
    "export",
    "mapped",
]
# Folders a run writes whole (`atomic_dir`), as it writes its export; other names without a dot
# are folders it makes and writes a file into.
WHOLE_FOLDERS = ("export",)
# New names a user gives `sqa-table --csv`, `sqa-compare --json` or `sqa-bench`'s outputs: their
# own, and sqa's.
OUTPUT_NAMES = ["table.csv", "compare.json", "bench.csv", "metrics.json", "predictions.csv"]
# How the output path reaches its file: by itself, a symbolic link to it, a hard link to it, or
# through a symbolic link to its folder.
OUTPUT_ROUTES = ("path", "symlink", "hard link", "linked folder")
FORGED_ASIDES = [PREVIOUS, f"{PREVIOUS}-{FORGED_TOKEN}", f".sqa-discarded-{FORGED_TOKEN}"]
# The file-system calls at which a command may be stopped: `close` holds the last ones of a claim
# (its record read again, its lock released).
KILL_POINTS = ("rename", "replace", "unlink", "rmdir", "mkdir", "link", "close")
# More calls than the longest drawn command makes (`test_the_kill_points_reach_past_a_commands_last_call`).
CALLS = 160
SIGNALS = {"KILL": signal.SIGKILL, "TERM": signal.SIGTERM, "INT": signal.SIGINT}
# Exit statuses of the forked command: it finished, was refused, or failed otherwise.
DONE, REFUSED, FAILED = 0, 3, 4

# A signal before one of a command's file-system calls, and where it is SIGTERM or SIGINT, the
# number of calls after which the SIGKILL of a scheduler's grace time follows (None: none does).
at_call = st.tuples(
    st.just("call"), st.sampled_from(list(SIGNALS)), st.integers(0, CALLS), st.none() | st.integers(0, 8)
)
# A signal between a run's steps: before one of its writes or its discard, or after its last
# write, before its claim ends.
at_step = st.tuples(st.just("step"), st.sampled_from(list(SIGNALS)), st.integers(0, 5), st.none())
kill = at_call | at_step
user_step = st.tuples(st.just("user"), st.sampled_from(USER_NAMES), st.booleans())
sqa_step = st.tuples(
    st.just("sqa"),
    st.sampled_from(["new", "overwrite", "resume"]),
    st.lists(st.sampled_from(SQA_WRITES), unique=True, max_size=4),
    st.none() | kill,
)
record_step = st.tuples(
    st.just("record"),
    st.sampled_from(["copied", "other_folder", "no_folder", "not_json"]),
    st.lists(st.sampled_from(USER_NAMES + SQA_WRITES), unique=True, max_size=4),
)
aside_step = st.tuples(
    st.just("aside"),
    st.sampled_from(FORGED_ASIDES),
    st.lists(
        st.sampled_from([*USER_NAMES, ".lock", ownership.MANIFEST]), unique=True, min_size=1, max_size=3
    ),
)
# A lock naming the forged set-aside's token for another folder, or another token for this one.
lock_step = st.tuples(st.just("lock"), st.sampled_from([(FORGED_TOKEN, False), (OTHER_TOKEN, True)]))
# A run started over, stopped at one of its calls, then a user's file under a name the previous
# run had, made before the next command.
window_step = st.tuples(
    st.just("window"),
    st.lists(st.sampled_from(SQA_WRITES), unique=True, max_size=4),
    kill,
    st.sampled_from(USER_NAMES),
    st.booleans(),
)
# A user's output: aimed at one of the command's inputs, at another existing file (the index
# picks one of the files in the run folder and the user's folder) or at a new name in either
# folder; its route, overwrite flag, and the call before which it is killed (None: it finishes).
output_step = st.tuples(
    st.just("output"),
    st.sampled_from(["input", "file", "run", "own"]),
    st.integers(0, 15),
    st.sampled_from(OUTPUT_ROUTES),
    st.booleans(),
    st.none() | st.integers(0, 6),
)
steps = st.lists(
    st.one_of(user_step, sqa_step, record_step, aside_step, lock_step, window_step, output_step), max_size=8
)


@st.composite
def stopped_between_steps(draw: st.DrawFn) -> tuple:
    """A command stopped (or not) between two of its steps, the last after its final write included."""
    writes = draw(st.lists(st.sampled_from(SQA_WRITES), unique=True, max_size=4))
    how = draw(st.none() | st.sampled_from(list(SIGNALS)))
    kill_at = None if how is None else ("step", how, draw(st.integers(0, len(writes) + 1)), None)
    return ("sqa", draw(st.sampled_from(["new", "overwrite", "resume"])), writes, kill_at)


# Histories of sqa's commands alone, stopped between their steps: every resumed or started-over
# one must be accepted.
sqa_only = st.lists(stopped_between_steps(), max_size=4)
histories = steps | sqa_only
final_step = st.tuples(
    st.just("sqa"),
    st.sampled_from(["overwrite", "resume"]),
    st.lists(st.sampled_from(SQA_WRITES), unique=True, max_size=4),
    st.none(),
)


@dataclass
class Folders:
    """The run folder, a folder of another run, the user's own folder, and what the user made there.

    `made` maps each user file (relative to `root`) to its bytes. `sqa_only`: the run folder has
    only ever held what sqa wrote; `cut`: a command was killed there by SIGKILL at one of its
    file-system calls and left an empty folder it had not noted (the one gap left). Where the folder
    is `sqa_only` and not `cut`, a command resumed or started over is never refused.
    """

    root: Path
    made: dict[str, bytes] = field(default_factory=dict)
    sqa_only: bool = True
    cut: bool = False

    @property
    def run_dir(self) -> Path:
        """The run folder the commands claim."""
        return self.root / "run"

    @property
    def elsewhere(self) -> Path:
        """Another run's folder, whose record a user copies in."""
        return self.root / "elsewhere"

    @property
    def own(self) -> Path:
        """The user's own folder, where their links and outputs go."""
        return self.root / "own"


def patch_calls(on_call: Callable[[str, tuple], None]) -> None:
    """In this process: call `on_call(name, args)` before each file-system call of `KILL_POINTS`."""
    for name in KILL_POINTS:
        real = getattr(os, name)

        def calling(*args: object, _real=real, _name=name, **kwargs: object) -> object:
            on_call(_name, args)
            return _real(*args, **kwargs)

        setattr(os, name, calling)


def _signals(how: str, after: int, then: int | None) -> Callable[[], None]:
    """A counter that sends `how` to this process at its call after the first `after`.

    A SIGTERM or SIGINT is followed by a SIGKILL `then` calls later (None: by none).
    """
    calls = [0]

    def count() -> None:
        calls[0] += 1
        if calls[0] == after + 1:
            os.kill(os.getpid(), SIGNALS[how])
        elif then is not None and calls[0] == after + 2 + then:
            os.kill(os.getpid(), signal.SIGKILL)

    return count


def _record_beside(folder: Path) -> None:
    """Record a temporary folder of `atomic_dir` beside its target, as an export does."""
    ownership.record_where_recorded(folder.parent, [folder.name])


def _write_output(run_dir: Path, name: str) -> None:
    """Write sqa's output `name` as a run does: a file replaced whole, a folder whole or a file in one."""
    if name in WHOLE_FOLDERS:
        with atomic_dir(run_dir / name, replace=True, made=_record_beside) as tmp:
            (tmp / "model.pt").write_bytes(b"sqa weights")
    elif "." in name:
        atomic_write_text(run_dir / name, f"sqa {name}\n")
    else:
        (run_dir / name).mkdir(exist_ok=True)
        atomic_write_text(run_dir / name / "last", "sqa\n")


def _go_on() -> None:
    """A run's step that goes on."""


def run_claim(run_dir: Path, mode: str, writes: list[str], step: Callable[[], None] = _go_on) -> None:
    """Claim `run_dir` as a run does and write `writes`, half before `discard_previous`, half after.

    `step` is called before each write and the discard, and once the last write is done.
    """
    with claimed(run_dir, resume=mode == "resume", overwrite=mode == "overwrite"):
        half = len(writes) // 2
        for name in writes[:half]:
            step()
            _write_output(run_dir, name)
        step()
        discard_previous(run_dir)
        for name in writes[half:]:
            step()
            _write_output(run_dir, name)
        step()


def _forked(body: Callable[[], int]) -> tuple[int, str]:
    """Run `body` in a forked process; its wait status and the refusal or error it reported."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        # The line a stopped command ends with would only crowd the test's output.
        sys.stderr = io.StringIO()
        code = FAILED
        try:
            code = body()
        except RunDirError as err:
            os.write(write_end, str(err).encode())
            code = REFUSED
        except SystemExit as stopped:
            code = stopped.code if isinstance(stopped.code, int) else FAILED
        except BaseException as err:
            os.write(write_end, repr(err).encode())
        os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as fh:
        said = fh.read().decode()
    return os.waitpid(pid, 0)[1], said


def run_command(run_dir: Path, mode: str, writes: list[str], kill_at: tuple | None) -> tuple[int, str]:
    """One sqa command into `run_dir` in a forked process, under `stop_on_signals`, stopped at `kill_at`.

    Returns its wait status and its refusal.
    """

    def command() -> int:
        step = _go_on
        if kill_at is not None and kill_at[0] == "call":
            count = _signals(*kill_at[1:])
            patch_calls(lambda name, args: count())
        elif kill_at is not None:
            step = _signals(*kill_at[1:])
        with stop_on_signals("sqa"):
            run_claim(run_dir, mode, writes, step)
        return DONE

    return _forked(command)


def user_files(folder: Path, base: Path, name: str, as_folder: bool, made: dict[str, bytes]) -> None:
    """The user makes `name` in `folder` (a file, or a folder holding one); `made` records them."""
    path = folder / name
    if as_folder:
        path.mkdir()
        path = path / "own.txt"
    content = f"the user's {path.relative_to(base)} #{len(made)}\n".encode()
    path.write_bytes(content)
    made[str(path.relative_to(base))] = content


def pending_set_aside(run_dir: Path) -> bool:
    """Whether a set-aside of sqa's own (not one the user forged) waits in `run_dir`."""
    forged = f"{PREVIOUS}-{FORGED_TOKEN}"
    return any(p.name.startswith(f"{PREVIOUS}-") and p.name != forged for p in run_dir.iterdir())


def _route(folders: Folders, target: Path, route: str, n: int) -> Path:
    """The path by which an output reaches `target` along `route` (links made in the user's folder)."""
    if route == "symlink":
        link = folders.own / f"link{n}"
        link.symlink_to(target)
        return link
    if route == "hard link" and target.is_file() and not target.is_symlink():
        link = folders.own / f"hard{n}"
        os.link(target, link)
        # A second name of the file: the user's, with the bytes it has now.
        folders.made[str(link.relative_to(folders.root))] = link.read_bytes()
        return link
    if route == "linked folder":
        alias = folders.own / f"alias{n}"
        alias.symlink_to(target.parent, target_is_directory=True)
        return alias / target.name
    return target


def _is_input(path: Path, inputs: list[Path]) -> bool:
    """Whether `path` is one of `inputs`: the same file, by whatever name."""
    for item in inputs:
        if os.path.exists(path) and os.path.exists(item) and os.path.samefile(path, item):
            return True
        if os.path.realpath(path) == os.path.realpath(item):
            return True
    return False


def _aim(step: tuple, folders: Folders) -> tuple[Path, list[Path]]:
    """The file an output step aims at and the command's inputs."""
    _, aim, index = step[:3]
    files = sorted(
        p
        for folder in (folders.run_dir, folders.own)
        for p in folder.iterdir()
        if p.is_file() and not p.is_symlink() and p.name not in (LOCK_NAME, ownership.MANIFEST)
    )
    if aim in ("input", "file") and files:
        target = files[index % len(files)]
        # A command reads one file or two: the target itself, or another.
        other = [files[(index + 1) % len(files)]] if len(files) > 1 else []
        return target, [target, *other] if aim == "input" else [p for p in other if p != target]
    base = folders.run_dir if aim == "run" else folders.own
    free = [name for name in OUTPUT_NAMES if not os.path.lexists(base / name)] or OUTPUT_NAMES
    return base / free[index % len(free)], files[:1]


def user_output(step: tuple, folders: Folders) -> None:
    """A user writes a command's output as `write_output` does; refused exactly where it must be."""
    *_, route, overwrite, kill_after = step
    target, inputs = _aim(step, folders)
    path = _route(folders, target, route, len(list(folders.own.iterdir())))
    must_refuse = _is_input(path, inputs) or path.is_dir() or (os.path.lexists(path) and not overwrite)
    # The entry the write replaces: the path itself, a link included, in the folder it names.
    entry = Path(os.path.realpath(path.parent)) / path.name
    before = {
        key: (folders.root / key).read_bytes() for key in folders.made if (folders.root / key).is_file()
    }
    if entry.parent == folders.run_dir:
        # The user's command writes into the run folder, outside any claim: its file, or what a
        # killed write leaves, is theirs.
        folders.sqa_only = False
    text = f"the user's output at {target.name} through {route}\n"

    def write() -> int:
        try:
            write_output(path, text, overwrite=overwrite, inputs=inputs)
        except FileExistsError:
            return REFUSED
        return DONE

    def killed_write() -> int:
        if kill_after is not None:
            count = _signals("KILL", kill_after, None)
            patch_calls(lambda name, args: count())
        return write()

    status, said = _forked(killed_write)
    finished = os.WIFEXITED(status)
    assert not finished or os.WEXITSTATUS(status) in (DONE, REFUSED), said
    if finished:
        assert (os.WEXITSTATUS(status) == REFUSED) == must_refuse, (step, must_refuse, said)
    key = str(entry.relative_to(folders.root)) if folders.root in entry.parents else None
    for item, content in before.items():
        if item != key or must_refuse:
            assert (folders.root / item).read_bytes() == content, (step, item)
    if must_refuse or key is None or not entry.is_file() or entry.is_symlink():
        return
    if entry.parent == folders.run_dir and entry.name in ownership.owned(folders.run_dir):
        # The user replaced a file sqa wrote and recorded: the name stays sqa's.
        folders.made.pop(key, None)
    else:
        folders.made[key] = entry.read_bytes()


def unproven_empty_folders(run_dir: Path) -> list[str]:
    """Empty folders of `run_dir` made by a plain mkdir that sqa was killed before noting: the gap left.

    A set-aside folder is not one: the next claim recovers it.
    """
    mine = ownership.owned(run_dir)
    return [
        p.name
        for p in run_dir.iterdir()
        if p.is_dir()
        and not p.is_symlink()
        and not any(p.iterdir())
        and p.name not in mine
        and not is_set_aside(p.name)
    ]


def apply(step: tuple, folders: Folders) -> None:
    """Apply one drawn `step` to the folders."""
    run_dir, elsewhere, made = folders.run_dir, folders.elsewhere, folders.made
    kind = step[0]
    if kind == "window":
        _, writes, kill_at, name, as_folder = step
        apply(("sqa", "overwrite", writes, kill_at), folders)
        apply(("user", name, as_folder), folders)
    elif kind == "sqa":
        _, mode, _, kill_at = step
        accepted = mode != "new" and folders.sqa_only and not folders.cut
        status, said = run_command(run_dir, *step[1:])
        stopped = kill_at is not None and kill_at[1] != "KILL"
        statuses = (DONE, REFUSED, *((128 + SIGNALS[kill_at[1]],) if stopped else ()))
        assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) in statuses, (status, said)
        assert not (accepted and os.WIFEXITED(status) and os.WEXITSTATUS(status) == REFUSED), said
        if os.WIFSIGNALED(status) and kill_at is not None and kill_at[0] == "call":
            folders.cut |= bool(unproven_empty_folders(run_dir))
    elif kind == "output":
        user_output(step, folders)
    elif kind == "user":
        _, name, as_folder = step
        if not os.path.lexists(run_dir / name):
            user_files(run_dir, folders.root, name, as_folder, made)
            folders.sqa_only = False
    elif kind == "record":
        _, how, names = step
        if how == "copied":
            # A record sqa wrote for another folder listing these names, copied in.
            for name in names:
                (elsewhere / name).touch(exist_ok=True)
            ownership.record(elsewhere, names)
            text = (elsewhere / ownership.MANIFEST).read_text() if names else "{}"
        elif how == "not_json":
            text = "entries: " + ", ".join(names)
        else:
            record = {"written_by": "sqa", "entries": names}
            if how == "other_folder":
                record["folder"] = os.stat(elsewhere).st_ino
            text = json.dumps(record)
        (run_dir / ownership.MANIFEST).write_text(text)
        made[f"run/{ownership.MANIFEST}"] = text.encode()
        folders.sqa_only = False
    elif kind == "aside":
        _, folder_name, names = step
        folder = run_dir / folder_name
        if os.path.lexists(folder) or pending_set_aside(run_dir):
            return
        folder.mkdir()
        for name in names:
            user_files(folder, folders.root, name, as_folder=False, made=made)
        folders.sqa_only = False
    else:
        token, this_folder = step[1]
        identity = os.stat(run_dir if this_folder else elsewhere).st_ino
        (run_dir / ".lock").write_text(f"PID 1 on elsewhere\nclaim {token} folder {identity}\n")
        folders.sqa_only = False


def unchanged(root: Path, made: dict[str, bytes]) -> list[str]:
    """The user's files that are gone or changed."""
    return [
        name
        for name, content in made.items()
        if not (root / name).is_file() or (root / name).read_bytes() != content
    ]


def check_history(history: list[tuple], final: tuple) -> None:
    """Apply `history`, then `final`, to a new folder; after each step every user file is as it was."""
    with tempfile.TemporaryDirectory() as tmp:
        folders = Folders(Path(tmp))
        for folder in (folders.run_dir, folders.elsewhere, folders.own):
            folder.mkdir()
        for step in [*history, final]:
            apply(step, folders)
            assert unchanged(folders.root, folders.made) == [], (step, sorted(os.listdir(folders.run_dir)))


def with_known_histories(test):
    """`test` also run, whatever is drawn, on a finished run started over and killed with SIGKILL
    at each of its first calls, a user's file made under an old run's name, then a resumed
    command; on it killed at each of its steps, the last (after its final write) included, then
    resumed in a folder of sqa's only; and on an output over an input by each route."""
    finished = ("sqa", "new", ["config.yaml", "metrics.json", "plots"], None)
    resumed = ("sqa", "resume", [], None)
    for kill_after in range(15):
        window = ("window", ["export"], ("call", "KILL", kill_after, None), "metrics.json", False)
        test = example(history=[finished, window], final=resumed)(test)
    for step in range(4):
        killed = ("sqa", "overwrite", ["metrics.json", "export"], ("step", "KILL", step, None))
        test = example(history=[finished, killed], final=resumed)(test)
    for route in OUTPUT_ROUTES:
        over_input = ("output", "input", 0, route, True, None)
        test = example(history=[("user", "thesis.tex", False), over_input], final=resumed)(test)
    return test


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories, final=final_step)
@with_known_histories
def test_no_command_with_overwrite_or_resume_loses_or_changes_a_users_file(history, final):
    check_history(history, final)


@pytest.mark.slow
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories, final=final_step)
def test_no_command_loses_or_changes_a_users_file_in_a_thousand_histories(history, final):
    check_history(history, final)


def test_the_kill_points_reach_past_a_commands_last_call(tmp_path, monkeypatch):
    # The longest drawn command: four outputs, folders among them, over a previous run's, started over.
    calls = []
    run_dir = tmp_path / "run"
    run_claim(run_dir, "new", SQA_WRITES)
    for name in KILL_POINTS:
        monkeypatch.setattr(os, name, getattr(os, name))
    patch_calls(lambda name, args: calls.append(name))
    run_claim(run_dir, "overwrite", ["checkpoints", "export", "mapped", "wandb"])
    # The drawn points reach past its last call: the lock's release, once everything is recorded.
    assert 40 < len(calls) < CALLS and calls[-1] == "close"


def killed_where(run_dir: Path, mode: str, writes: list[str], where: Callable[[str, tuple], bool]) -> None:
    """A command into `run_dir` killed with SIGKILL at the first call for which `where(name, args)` holds."""

    def command() -> int:
        def on_call(name: str, args: tuple) -> None:
            if where(name, tuple(Path(a) if isinstance(a, str | Path) else a for a in args)):
                os.kill(os.getpid(), signal.SIGKILL)

        patch_calls(on_call)
        run_claim(run_dir, mode, writes)
        return DONE

    status, said = _forked(command)
    assert os.WIFSIGNALED(status), said


def _aside(path: Path) -> bool:
    """Whether `path` lies in a set-aside folder."""
    return path.parent.name.startswith(f"{PREVIOUS}-")


def _put_back(name: str, args: tuple) -> bool:
    """Whether the call moves an entry back from a set-aside folder."""
    return name == "rename" and _aside(args[0])


def _replacing(target: str) -> Callable[[str, tuple], bool]:
    """The rename of a written file into place at `target`."""
    return lambda name, args: name == "replace" and args[1].name == target


# Kills at one file-system call that left a folder of sqa's only, which the next claim refused
# before sqa noted each entry before making or moving it (docs/failures.md). Each: the claims it
# refuses, the outputs of the finished runs before, then the commands killed at a call.
CLOSED_GAPS = {
    "an output in place, its record not yet written": (
        ("resume", "overwrite"),
        [],
        [("new", ["metrics.json"], _replacing(ownership.MANIFEST))],
    ),
    "a write's temporary file, not yet renamed": (
        ("overwrite",),
        [["metrics.json"]],
        [("resume", ["predictions.csv"], _replacing("predictions.csv"))],
    ),
    "a folder made, its first file not yet written": (
        ("resume", "overwrite"),
        [["metrics.json"]],
        [("resume", ["plots"], _replacing("last"))],
    ),
    "an entry out of the record, not yet set aside": (
        ("resume", "overwrite"),
        [["config.yaml", "metrics.json"]],
        [("overwrite", [], lambda name, args: name == "rename" and _aside(args[1]))],
    ),
    "an entry put back, not yet recorded": (
        ("resume", "overwrite"),
        [["config.yaml", "metrics.json"]],
        [
            # Killed with its previous run set aside, at its discard; the next claim at its
            # second put-back.
            ("overwrite", [], lambda name, args: name == "rename" and args[0].name.startswith(PREVIOUS)),
            ("resume", [], lambda name, args: _put_back(name, args) and args[1].name == "metrics.json"),
        ],
    ),
}


@pytest.mark.parametrize(
    ("gap", "mode"), [(gap, mode) for gap, (modes, _, _) in sorted(CLOSED_GAPS.items()) for mode in modes]
)
def test_a_kill_between_an_entry_and_its_record_leaves_a_folder_the_next_claim_accepts(gap, mode, tmp_path):
    _, before, killed = CLOSED_GAPS[gap]
    run_dir = tmp_path / "run"
    for outputs in before:
        run_claim(run_dir, "new", outputs)
    for killed_mode, writes, where in killed:
        killed_where(run_dir, killed_mode, writes, where)
    run_claim(run_dir, mode, [])
