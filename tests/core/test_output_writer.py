"""The one writer of a command's output files (`sqa.core.atomic.write_output`), and who else writes.

`write_output` writes atomically, never over an input of the command (by path, symbolic link or
hard link, even with overwrite), and over an existing file only with the command's overwrite
setting, which its one-line refusal names. The last test lists every other plain write in sqa's
source, so that a new `open(path, "w")` beside it fails here until it is justified.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from sqa.core import atomic
from sqa.core.atomic import output_refusal, write_output
from tests.conftest import REPO


def test_an_existing_file_is_kept_byte_for_byte_without_overwrite_and_replaced_with_it(tmp_path):
    out = tmp_path / "my_results.csv"
    out.write_bytes(b"the user's table\r\n\x00")
    with pytest.raises(FileExistsError) as refused:
        write_output(out, "new", overwrite=False, inputs=[], setting="--overwrite")
    assert str(refused.value) == f"{out}: already exists; pass --overwrite to replace it"
    assert out.read_bytes() == b"the user's table\r\n\x00"
    write_output(out, "new", overwrite=True, inputs=[], setting="--overwrite")
    assert out.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_results.csv"]


def test_the_refusal_names_the_setting_as_the_command_spells_it(tmp_path):
    (tmp_path / "t.csv").write_text("x")
    message = output_refusal(tmp_path / "t.csv", overwrite=False, inputs=[], setting="overwrite=true")
    assert message == f"{tmp_path / 't.csv'}: already exists; pass overwrite=true to replace it"
    assert "\n" not in message


def test_a_fresh_path_is_written_whole_with_its_folder_and_no_temporary_left(tmp_path):
    out = tmp_path / "new" / "table.csv"
    write_output(out, "a,b\n-0.5,=x\n", overwrite=False, inputs=[tmp_path / "other.json"])
    assert out.read_text() == "a,b\n-0.5,=x\n"
    assert [p.name for p in out.parent.iterdir()] == ["table.csv"]
    assert output_refusal(tmp_path / "fresh.csv", overwrite=False, inputs=[out]) is None


@pytest.mark.parametrize("how", ["same", "relative", "symlink", "symlinked folder", "hard link"])
def test_an_input_is_refused_even_with_overwrite_by_any_name(tmp_path, monkeypatch, how):
    run = tmp_path / "run"
    run.mkdir()
    metrics = run / "metrics.json"
    metrics.write_text('{"test1": {}}')
    target = metrics
    if how == "relative":
        monkeypatch.chdir(run)
        target = Path("../run/metrics.json")
    elif how == "symlink":
        target = tmp_path / "link.csv"
        target.symlink_to(metrics)
    elif how == "symlinked folder":
        (tmp_path / "alias").symlink_to(run)
        target = tmp_path / "alias" / "metrics.json"
    elif how == "hard link":
        target = tmp_path / "hard.csv"
        os.link(metrics, target)
    with pytest.raises(FileExistsError) as refused:
        write_output(target, "table", overwrite=True, inputs=[metrics], setting="--overwrite")
    assert str(refused.value) == (
        f"{target}: is one of the inputs of this command ({metrics}); sqa never writes over an input, "
        "even with --overwrite: write the output elsewhere"
    )
    assert metrics.read_text() == '{"test1": {}}' and os.path.lexists(target)
    assert target.is_symlink() == (how == "symlink")


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(FileExistsError, match="is a folder"):
        write_output(tmp_path, "x", overwrite=True, inputs=[])


def test_a_file_that_appears_while_the_command_runs_is_kept_without_overwrite(tmp_path, monkeypatch):
    out = tmp_path / "t.csv"
    real = atomic.atomic_write_text

    def racing(path, text, exclusive=False):
        out.write_text("the other writer's")
        real(path, text, exclusive)

    monkeypatch.setattr(atomic, "atomic_write_text", racing)
    with pytest.raises(FileExistsError, match=r"t\.csv: already exists; pass --overwrite to replace it"):
        write_output(out, "mine", overwrite=False, inputs=[])
    assert out.read_text() == "the other writer's"
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]


def test_the_benchs_files_go_through_the_writer_with_its_overwrite_setting(tmp_path):
    from sqa.baselines.bench_outputs import write_outputs

    out = tmp_path / "out"
    out.mkdir()
    config = SimpleNamespace(path=out / "run_info.json", bootstrap=10, seed=0, corpora=[])
    config.path.write_text("corpora: []\n")
    (out / "bench.csv").write_bytes(b"the user's\n")
    with pytest.raises(FileExistsError, match=r"bench\.csv: already exists; pass --overwrite to replace it"):
        write_outputs(out, config, [], 1.0, inputs=[config.path], overwrite=False, setting="--overwrite")
    assert (out / "bench.csv").read_bytes() == b"the user's\n"
    # run_info.json is replaced whatever the setting, but never where it is an input (the config).
    with pytest.raises(FileExistsError, match=r"run_info\.json: is one of the inputs"):
        write_outputs(out, config, [], 1.0, inputs=[config.path], overwrite=True, setting="--overwrite")
    assert config.path.read_text() == "corpora: []\n"
    assert (out / "bench.csv").read_text().startswith("corpus,predictor,kind,clips,systems,")


# -- Who writes files: every plain write in sqa's source, each with why it is safe. ------------

# Calls that write a file whatever their arguments (dotted as written, or by method name).
WRITING_NAMES = {"torch.save", "np.save", "numpy.save", "sf.write", "soundfile.write", "shutil.copy"}
WRITING_NAMES |= {"shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move"}
WRITING_METHODS = {"write_text", "write_bytes", "to_csv", "savez", "savez_compressed", "savefig"}
WRITING_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}

# (file, enclosing function, call) -> why that write is safe. An entry no write matches fails too.
ALLOWED = {
    ("sqa/core/atomic.py", "atomic_write", "os.open"): (
        "the atomic writer itself: a new file of a random name beside the target (O_EXCL, no link "
        "followed), renamed or hard-linked into place"
    ),
    ("sqa/core/atomic.py", "atomic_write", "os.fdopen"): ("the same file, opened by the os.open above"),
    ("sqa/core/run_lock.py", "open_no_follow", "os.open"): (
        "the run's lock file and log, in a directory the command has claimed; O_NOFOLLOW refuses a link"
    ),
    ("sqa/training/run_dir.py", "NoFollowFileHandler._open", "os.fdopen"): (
        "train.log appended in the claimed run directory, opened by open_no_follow (no link followed)"
    ),
    ("sqa/scoring/outputs.py", "_save_in_temp", "os.fdopen"): (
        "sqa-score's fallback when its output cannot be written: a new mkstemp file in the system's "
        "temporary folder, never an existing one"
    ),
    ("sqa/training/checkpoint_io.py", "AtomicCheckpointIO.save_checkpoint.save", "torch.save"): (
        "writes into the temporary file atomic_write hands it"
    ),
    ("sqa/data/pitch.py", "F0Extractor.__call__", "np.save"): (
        "an f0 cache entry written into the temporary file atomic_write hands it"
    ),
    ("sqa/scoring/timeline.py", "plot_timeline", "savefig"): "into the temporary file atomic_write hands it",
    ("sqa/reports/plots.py", "save", "savefig"): "into the temporary file atomic_write hands it",
    ("sqa/exports/format.py", "_write_export", "torch.save"): (
        "inside the temporary folder of atomic_dir, renamed into place whole"
    ),
    ("sqa/exports/format.py", "_write_export", "write_text"): "inside the temporary folder of atomic_dir",
    ("sqa/exports/format.py", "_write_export", "shutil.copyfile"): (
        "an export's data files, inside the temporary folder of atomic_dir"
    ),
    ("sqa/data/synthetic/mos.py", "_write", "write_text"): (
        "the synthetic corpus, inside the temporary folder of generate's atomic_dir"
    ),
    ("sqa/data/synthetic/mos.py", "_write", "sf.write"): (
        "the synthetic corpus's audio, inside the temporary folder of generate's atomic_dir"
    ),
    ("sqa/data/small_table.py", "generate", "sf.write"): (
        "the small table's audio, inside the temporary folder of its atomic_dir"
    ),
}


def _dotted(node: ast.expr) -> str:
    """`a.b.c` of a name or attribute chain; '' for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    return ""


def _writes_mode(call: ast.Call, position: int) -> bool:
    """Whether an open-like call's mode (argument `position` or `mode=`) may write; unknown modes may."""
    mode = next((k.value for k in call.keywords if k.arg == "mode"), None)
    if mode is None and len(call.args) > position:
        mode = call.args[position]
    if mode is None:
        return False
    if not (isinstance(mode, ast.Constant) and isinstance(mode.value, str)):
        return True
    return any(c in mode.value for c in "wax+")


def writer(call: ast.Call) -> str | None:
    """The name of `call` if it writes a file (as this test counts writes), else None."""
    name = _dotted(call.func)
    method = call.func.attr if isinstance(call.func, ast.Attribute) else name
    if name == "open":
        return name if _writes_mode(call, 1) else None
    if name == "os.fdopen":
        return name if _writes_mode(call, 1) else None
    if name == "os.open":
        flags = (
            {_dotted(n).rsplit(".", 1)[-1] for n in ast.walk(call.args[1])} if len(call.args) > 1 else set()
        )
        return name if flags & WRITING_FLAGS else None
    if method == "open":
        # Path.open(mode), tarfile.open(name, mode), ...: any mode-like string that writes.
        return name if _writes_mode(call, 0) or _writes_mode(call, 1) else None
    if name in WRITING_NAMES:
        return name
    if method in WRITING_METHODS:
        return method
    return None


def writes_in(source: str) -> list[tuple[str, str, int]]:
    """(enclosing function's qualified name, call, line) of each write in `source`."""
    found: list[tuple[str, str, int]] = []

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = (*scope, child.name)
            if isinstance(child, ast.Call) and (name := writer(child)) is not None:
                found.append((".".join(scope) or "<module>", name, child.lineno))
            visit(child, inner)

    visit(ast.parse(source), ())
    return found


def test_the_scanner_finds_the_plain_writes_it_is_there_to_catch():
    source = """
import os, shutil
def table(args, rows, p, fh):
    with open(args.csv, "w", encoding="utf-8", newline="") as out:
        pass
    open(args.csv, mode="a")
    open(args.csv, args.mode)
    p.open("wb")
    p.write_text("x")
    frame.to_csv(p)
    os.open(p, os.O_WRONLY | os.O_CREAT)
    shutil.copyfile(p, "q")
    open(p).read()
    open(p, "rb")
    p.open()
    os.open(p, os.O_RDONLY)
    os.fdopen(fh, "rb")
"""
    assert [(scope, name) for scope, name, _ in writes_in(source)] == [
        ("table", "open"),
        ("table", "open"),
        ("table", "open"),
        ("table", "p.open"),
        ("table", "write_text"),
        ("table", "to_csv"),
        ("table", "os.open"),
        ("table", "shutil.copyfile"),
    ]


def test_every_plain_write_in_sqa_is_listed_with_why_it_is_safe():
    # A command's output goes through write_output (or atomic_write*); a plain write must be
    # justified in ALLOWED, e.g. sqa-table's `open(args.csv, "w")` that wrote over metrics.json.
    found: dict[tuple[str, str, str], list[int]] = {}
    for path in sorted((REPO / "sqa").rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        for scope, name, line in writes_in(path.read_text(encoding="utf-8")):
            found.setdefault((rel, scope, name), []).append(line)
    unlisted = [
        f"{rel}:{lines[0]} {name} in {scope}"
        for (rel, scope, name), lines in found.items()
        if (rel, scope, name) not in ALLOWED
    ]
    assert not unlisted, f"plain writes outside write_output, not in ALLOWED: {unlisted}"
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED entries no write matches any more (remove them): {stale}"
