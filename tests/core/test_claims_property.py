"""Property: whatever a folder holds, no sqa command with overwrite or resume loses or changes a user's file.

Hypothesis draws a history of one folder: the user's files and folders (some named like sqa's
outputs, or `.sqa-previous`), sqa commands (new, resumed or started over) killed with SIGKILL at
any of their renames, removals or folder creations or left to finish, records forged or copied
from another folder, set-aside folders and lock files forged with tokens of their own. Then one
more command runs with `overwrite=true` or `resume=true`. Each command runs in a forked process
as train.py, eval.py and sqa-baseline claim their folders (`claimed`, then `discard_previous`
once under way), writing sqa's outputs whether or not the names exist. After every step each
file the user made is still there with the bytes it had.

The user writes only names that are free at the top level (a file inside a folder of sqa's goes
with that folder, as documented), also between a kill and the next command, while a killed
command's set-aside waits to be put back under names the user may have taken meanwhile. The
name `.lock` is sqa's in any folder it writes. A record the user forges or copies in is theirs,
kept byte for byte: while it is there every command is refused.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sqa.core import ownership
from sqa.core.atomic import atomic_write_text
from sqa.core.run_folder import RunDirError, claimed, discard_previous
from sqa.core.set_aside import PREVIOUS

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
FORGED_ASIDES = [PREVIOUS, f"{PREVIOUS}-{FORGED_TOKEN}", f".sqa-discarded-{FORGED_TOKEN}"]
# The file-system calls at which a command may be killed.
KILL_POINTS = ("rename", "replace", "unlink", "rmdir", "mkdir", "link")

user_step = st.tuples(st.just("user"), st.sampled_from(USER_NAMES), st.booleans())
sqa_step = st.tuples(
    st.just("sqa"),
    st.sampled_from(["new", "overwrite", "resume"]),
    st.lists(st.sampled_from(SQA_WRITES), unique=True, max_size=4),
    st.none() | st.integers(0, 14),
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
# A run started over, killed at one of its calls, then a user's file under a name the previous
# run had, made before the next command.
window_step = st.tuples(
    st.just("window"),
    st.lists(st.sampled_from(SQA_WRITES), unique=True, max_size=4),
    st.integers(0, 14),
    st.sampled_from(USER_NAMES),
    st.booleans(),
)
steps = st.lists(st.one_of(user_step, sqa_step, record_step, aside_step, lock_step, window_step), max_size=8)
final_step = st.tuples(
    st.just("sqa"),
    st.sampled_from(["overwrite", "resume"]),
    st.lists(st.sampled_from(SQA_WRITES), unique=True, max_size=4),
    st.none(),
)


def _arm(kill_after: int) -> None:
    """In this (forked) process: SIGKILL at the file-system call after the first `kill_after`."""
    calls = [0]
    for name in KILL_POINTS:
        real = getattr(os, name)

        def killing(*args: object, _real=real, **kwargs: object) -> object:
            calls[0] += 1
            if calls[0] > kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(*args, **kwargs)

        setattr(os, name, killing)


def _write_output(run_dir: Path, name: str) -> None:
    """Write sqa's output `name` as a run does: a file replaced whole, or a file in its folder."""
    if "." in name:
        atomic_write_text(run_dir / name, f"sqa {name}\n")
    else:
        (run_dir / name).mkdir(exist_ok=True)
        atomic_write_text(run_dir / name / "last", "sqa\n")


def run_command(run_dir: Path, mode: str, writes: list[str], kill_after: int | None) -> int:
    """One sqa command into `run_dir` in a forked process; its wait status."""
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            if kill_after is not None:
                _arm(kill_after)
            with claimed(run_dir, resume=mode == "resume", overwrite=mode == "overwrite"):
                half = len(writes) // 2
                for name in writes[:half]:
                    _write_output(run_dir, name)
                discard_previous(run_dir)
                for name in writes[half:]:
                    _write_output(run_dir, name)
        except RunDirError:
            code = 3
        except BaseException:
            code = 4
        os._exit(code)
    return os.waitpid(pid, 0)[1]


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


def apply(step: tuple, run_dir: Path, elsewhere: Path, made: dict[str, bytes]) -> None:
    """Apply one drawn `step` to `run_dir`."""
    kind = step[0]
    if kind == "window":
        _, writes, kill_after, name, as_folder = step
        apply(("sqa", "overwrite", writes, kill_after), run_dir, elsewhere, made)
        apply(("user", name, as_folder), run_dir, elsewhere, made)
    elif kind == "sqa":
        status = run_command(run_dir, *step[1:])
        assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) in (0, 3), status
    elif kind == "user":
        _, name, as_folder = step
        if not os.path.lexists(run_dir / name):
            user_files(run_dir, run_dir, name, as_folder, made)
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
        made[ownership.MANIFEST] = text.encode()
    elif kind == "aside":
        _, folder_name, names = step
        folder = run_dir / folder_name
        if os.path.lexists(folder) or pending_set_aside(run_dir):
            return
        folder.mkdir()
        for name in names:
            user_files(folder, run_dir, name, as_folder=False, made=made)
    else:
        token, this_folder = step[1]
        identity = os.stat(run_dir if this_folder else elsewhere).st_ino
        (run_dir / ".lock").write_text(f"PID 1 on elsewhere\nclaim {token} folder {identity}\n")


def unchanged(run_dir: Path, made: dict[str, bytes]) -> list[str]:
    """The user's files that are gone or changed."""
    return [
        name
        for name, content in made.items()
        if not (run_dir / name).is_file() or (run_dir / name).read_bytes() != content
    ]


def with_kills_in_the_window(test):
    """`test` also run, whatever is drawn, on a finished run started over and killed at each of
    its calls in turn, a user's file made under an old run's name, then a resumed command."""
    finished = ("sqa", "new", ["config.yaml", "metrics.json", "plots"], None)
    for kill_after in range(15):
        window = ("window", ["export"], kill_after, "metrics.json", False)
        test = example(history=[finished, window], final=("sqa", "resume", [], None))(test)
    return test


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=steps, final=final_step)
@with_kills_in_the_window
def test_no_command_with_overwrite_or_resume_loses_or_changes_a_users_file(history, final):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir, elsewhere = Path(tmp) / "run", Path(tmp) / "elsewhere"
        run_dir.mkdir()
        elsewhere.mkdir()
        made: dict[str, bytes] = {}
        for step in [*history, final]:
            apply(step, run_dir, elsewhere, made)
            assert unchanged(run_dir, made) == [], (step, sorted(os.listdir(run_dir)))
