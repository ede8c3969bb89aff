import pytest

from sqa.atomic import atomic_write, atomic_write_text


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
