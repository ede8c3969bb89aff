import os
import stat

import pytest

from sqa.atomic import atomic_write, atomic_write_text, default_mode


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
