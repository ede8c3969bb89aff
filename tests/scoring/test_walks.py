"""Folder walks and glob patterns (sqa.scoring.walks): link loops, vanished folders, FIFOs, the bound.

Each walk runs in a thread given a few seconds: a walk that loops or opens a FIFO fails the test
instead of hanging it.
"""

from __future__ import annotations

import csv
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sqa.scoring import cli as score_cli
from sqa.scoring import walks
from sqa.scoring.inputs import expand_inputs
from sqa.scoring.walks import SkippedInputWarning, audio_listing, listed_audio
from tests.scoring.test_api_inputs import write

# Far more than any of these walks needs; a looping walk never ends within it.
SECONDS = 20.0


def within(call: Callable[[], Any], seconds: float = SECONDS) -> Any:
    """`call()`, failing the test if it has not returned within `seconds`."""
    done: dict[str, Any] = {}

    def run() -> None:
        try:
            done["value"] = call()
        except BaseException as err:  # handed to the test's thread
            done["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    if "error" in done:
        raise done["error"]
    return done["value"]


def touch(*paths: Path) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


@pytest.fixture
def loops(tmp_path: Path) -> Path:
    """A folder with files at depths 0 to 2 and two links back up: x/a -> .., x/y/b -> ../.."""
    folder = tmp_path / "D"
    touch(folder / "one.wav", folder / "x" / "two.wav", folder / "x" / "y" / "three.wav")
    (folder / "x" / "a").symlink_to("..")
    (folder / "x" / "y" / "b").symlink_to("../..")
    return folder


def test_a_folder_with_two_link_loops_lists_each_file_once(loops):
    expected = [loops / "one.wav", loops / "x" / "two.wav", loops / "x" / "y" / "three.wav"]
    assert within(lambda: listed_audio(loops)) == (expected, None)
    assert within(lambda: expand_inputs([str(loops)])).paths == [str(p) for p in expected]


def test_a_double_star_pattern_over_two_link_loops_lists_each_file_once(loops):
    expected = [loops / "one.wav", loops / "x" / "two.wav", loops / "x" / "y" / "three.wav"]
    assert within(lambda: listed_audio(f"{loops}/**/*.wav")) == (expected, None)
    assert within(lambda: listed_audio(f"{loops}/**")) == (expected, None)
    inputs = within(lambda: expand_inputs([f"{loops}/**/*.wav"]))
    assert inputs.paths == [str(p) for p in expected] and inputs.problems == []


def test_sqa_score_of_a_pattern_over_link_loops_scores_each_file_once(default_export, tmp_path, capsys):
    folder = tmp_path / "D"
    (folder / "x").mkdir(parents=True)
    write(folder / "one.wav", 0.6, seed=1)
    write(folder / "x" / "two.wav", 0.6, seed=2)
    (folder / "x" / "a").symlink_to("..")
    (folder / "x" / "b").symlink_to("../..")
    out = tmp_path / "scores.csv"
    argv = ["--checkpoint", str(default_export), "--output", str(out), f"{folder}/**/*.wav"]
    assert within(lambda: score_cli.main(argv), 120) == 0
    with out.open(encoding="utf-8") as fh:
        paths = [row["path"] for row in csv.DictReader(fh)]
    assert paths == [str(folder / "one.wav"), str(folder / "x" / "two.wav")]


def test_a_linked_file_or_folder_is_followed_and_each_file_listed_once_by_its_first_path(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    touch(elsewhere / "far.wav")
    folder = tmp_path / "D"
    touch(folder / "b.wav", folder / "c" / "d.flac")
    (folder / "a.wav").symlink_to(folder / "b.wav")  # before b.wav in sorted order: the one kept
    (folder / "e").symlink_to(elsewhere)  # a linked folder is walked
    (folder / "f").symlink_to(folder / "c")  # a second path to c: walked once, as c
    listed = within(lambda: listed_audio(folder))
    assert listed == ([folder / "a.wav", folder / "c" / "d.flac", folder / "e" / "far.wav"], None)


def test_files_come_in_the_order_of_sorting_their_paths(tmp_path):
    names = ["a.wav", "a/z.wav", "a b.wav", "a-b/y.wav", "a.b/x.wav", "B.wav", "a/.h.wav", "_/w.wav"]
    touch(*(tmp_path / "D" / name for name in names))
    found, problem = within(lambda: listed_audio(tmp_path / "D"))
    assert problem is None and found == sorted(tmp_path / "D" / name for name in names)


def vanishing(monkeypatch, doomed: Path) -> None:
    """Remove `doomed` just after its parent folder is read, as another process might."""
    real = os.scandir

    class Listed(list):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def scandir(path=os.curdir):
        if isinstance(path, int) or Path(path) != doomed.parent:  # rmtree reads by descriptor
            return real(path)
        with real(path) as found:
            entries = Listed(found)
        shutil.rmtree(doomed)
        return entries

    monkeypatch.setattr(os, "scandir", scandir)


def test_a_folder_removed_during_the_walk_is_skipped_and_reported(tmp_path, monkeypatch):
    folder = tmp_path / "D"
    touch(folder / "a.wav", folder / "gone" / "b.wav", folder / "z.wav")
    vanishing(monkeypatch, folder / "gone")
    inputs = within(lambda: expand_inputs([str(folder)]))
    assert inputs.paths == [str(folder / "a.wav"), str(folder / "z.wav")]
    assert inputs.problems == [
        f"{folder / 'gone'}: folder skipped, it could not be read (No such file or directory)"
    ]


def test_a_folder_that_cannot_be_read_is_skipped_with_a_warning_in_the_python_api(tmp_path, monkeypatch):
    folder = tmp_path / "D"
    touch(folder / "a.wav", folder / "locked" / "b.wav")
    real = os.scandir

    def scandir(path=os.curdir):
        if not isinstance(path, int) and Path(path) == folder / "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    # Monkeypatched: as root (where tests may run) a folder's permissions deny nothing.
    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.warns(SkippedInputWarning, match="locked: folder skipped, it could not be read"):
        assert listed_audio(f"{folder}/**/*.wav") == ([folder / "a.wav"], None)


def test_sqa_score_prints_a_vanished_folder_in_one_line_and_scores_the_rest(
    default_export, tmp_path, monkeypatch, capsys
):
    folder = tmp_path / "D"
    (folder / "gone").mkdir(parents=True)
    write(folder / "a.wav", 0.6, seed=1)
    write(folder / "gone" / "b.wav", 0.6, seed=2)
    vanishing(monkeypatch, folder / "gone")
    out = tmp_path / "scores.csv"
    argv = ["--checkpoint", str(default_export), "--output", str(out), str(folder)]
    assert within(lambda: score_cli.main(argv), 120) == 1
    err = capsys.readouterr().err
    assert f"sqa-score: {folder / 'gone'}: folder skipped, it could not be read" in err
    assert "Traceback" not in err
    with out.open(encoding="utf-8") as fh:
        assert [row["path"] for row in csv.DictReader(fh)] == [str(folder / "a.wav")]


def test_a_fifo_among_a_folders_files_is_reported_and_never_opened(tmp_path):
    folder = tmp_path / "D"
    touch(folder / "a.wav")
    os.mkfifo(folder / "pipe.wav")
    os.mkfifo(folder / "pipe.txt")  # no audio: not one the walk would list, so not reported
    refused = f"{folder / 'pipe.wav'}: not a regular file (a FIFO, device or socket); refusing to open it"
    inputs = within(lambda: expand_inputs([str(folder)]))
    assert inputs.paths == [str(folder / "a.wav")] and inputs.problems == [refused]
    pattern = within(lambda: expand_inputs([f"{folder}/pipe.*"]))
    assert pattern.paths == [] and pattern.problems == [
        refused.replace("pipe.wav", "pipe.txt"),  # a pattern names it, audio or not
        refused,
        f"{folder}/pipe.*: no file matches this pattern",
    ]
    with pytest.warns(SkippedInputWarning, match="pipe.wav: not a regular file"):
        assert within(lambda: listed_audio(folder)) == ([folder / "a.wav"], None)


def test_a_dangling_link_is_reported_not_dropped(tmp_path):
    folder = tmp_path / "D"
    touch(folder / "a.wav")
    (folder / "lost.wav").symlink_to(tmp_path / "nowhere.wav")
    listing = within(lambda: audio_listing(folder))
    assert listing.files == [folder / "a.wav"]
    assert listing.skipped == [
        f"{folder / 'lost.wav'}: skipped, it could not be read (No such file or directory)"
    ]


@pytest.mark.parametrize("kind", ["folder", "pattern"])
def test_a_walk_looks_at_no_more_entries_than_its_bound(tmp_path, monkeypatch, kind):
    folder = tmp_path / "D"
    touch(*(folder / f"{i}.wav" for i in range(4)), folder / "notes.txt")  # 5 entries
    item = str(folder) if kind == "folder" else f"{folder}/**/*.wav"
    monkeypatch.setattr(walks, "MAX_WALK_ENTRIES", 5)
    assert len(listed_audio(item)[0]) == 4  # the bound itself is walked
    touch(folder / "more.txt")  # 6: one past it, the whole folder refused
    problem = (
        f"{item}: holds more than 5 files and folders, the most a folder's or pattern's walk looks at; "
        "name a smaller folder or a narrower pattern"
    )
    assert listed_audio(item) == ([], problem)
    inputs = expand_inputs([item, str(folder / "0.wav")])
    assert inputs.paths == [str(folder / "0.wav")] and inputs.problems == [problem]
