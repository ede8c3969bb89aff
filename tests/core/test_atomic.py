import os
import stat

import pytest

from sqa.core.atomic import atomic_dir, atomic_write, atomic_write_text, default_mode


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
