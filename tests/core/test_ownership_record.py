"""sqa's record of what it wrote (`.sqa-owned.json`): what it trusts, what it records, what it refuses."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from sqa.core import ownership
from sqa.core.ownership import MANIFEST, MAX_MANIFEST_BYTES, OwnershipError
from tests.conftest import REPO


def test_only_names_sqa_has_created_are_recorded(tmp_path):
    folder = tmp_path / "a"
    folder.mkdir()
    (folder / "config.yaml").write_text("mine: true\n")
    # Names sqa might write, but has not: none of them is recorded.
    ownership.record(folder, ["metrics.json", "wandb"])
    assert ownership.owned(folder) == set() and not ownership.has_record(folder)
    (folder / "metrics.json").write_text("{}")
    ownership.record(folder, ["metrics.json", "wandb"])
    assert ownership.owned(folder) == {"metrics.json"}
    # Created since sqa began: recorded; the user's file of then: not.
    (folder / "plots").mkdir()
    ownership.record_created(folder, before={"config.yaml"})
    assert ownership.owned(folder) == {"metrics.json", "plots"}


def test_a_name_whose_entry_is_gone_is_dropped_before_the_user_can_take_it(tmp_path):
    (tmp_path / "wandb").mkdir()
    ownership.record(tmp_path, ["wandb"])
    (tmp_path / "wandb").rmdir()
    ownership.record_created(tmp_path, before=ownership.entries(tmp_path))
    (tmp_path / "wandb").mkdir()  # the user's, made later
    assert ownership.owned(tmp_path) == set()


def test_the_record_is_sorted_json_naming_who_wrote_it_and_the_folder(tmp_path):
    for name in ("b", "a"):
        (tmp_path / name).write_text("")
    ownership.record(tmp_path, ["b", "a", "b"])
    text = (tmp_path / MANIFEST).read_text(encoding="utf-8")
    folder = ownership.folder_id(tmp_path)
    assert text == json.dumps({"written_by": "sqa", "folder": folder, "entries": ["a", "b"]}, indent=1) + "\n"


def test_a_record_copied_into_another_folder_proves_nothing_there(tmp_path):
    mine = tmp_path / "export"
    mine.mkdir()
    (mine / "notes.md").write_text("sqa's\n")
    ownership.record(mine, ["notes.md"])
    copy = tmp_path / "download"
    copy.mkdir()
    (copy / MANIFEST).write_bytes((mine / MANIFEST).read_bytes())
    (copy / "notes.md").write_text("the user's\n")
    assert ownership.owned(mine) == {"notes.md"}
    assert ownership.owned(copy) == set() and not ownership.has_record(copy)
    # A folder renamed or moved keeps its identity, and its record holds.
    moved = tmp_path / "moved"
    mine.rename(moved)
    assert ownership.owned(moved) == {"notes.md"}


def test_a_record_restored_into_a_new_folder_that_took_the_old_ones_inode_proves_nothing(tmp_path):
    if ownership.born_ns(tmp_path) is None:
        pytest.skip("this file system keeps no creation times: the inode is all a record can name")
    run = tmp_path / "run"
    run.mkdir()
    ownership.record_all(run)
    backup, inode = (run / MANIFEST).read_bytes(), os.stat(run).st_ino
    (run / MANIFEST).unlink()
    run.rmdir()
    # The user's new folders; ext4 hands one of them the deleted folder's inode at once, and it is
    # named as the old one was.
    made = [tmp_path / f"new{i}" for i in range(20)]
    for folder in made:
        folder.mkdir()
    same = [f for f in made if os.stat(f).st_ino == inode]
    if not same:
        pytest.skip("this file system gave no new folder the deleted one's inode: the case cannot be built")
    same[0].rename(run)
    (run / "metrics.json").write_text("the user's\n")
    (run / MANIFEST).write_bytes(backup)
    assert ownership.owned(run) == set() and not ownership.has_record(run)
    with pytest.raises(ownership.OwnershipError, match="holds .sqa-owned.json, which is not a record"):
        ownership.check_replaceable(run, "overwrite=true")


@pytest.mark.parametrize("identity", ["inode", "inode-0", "bare number"])
def test_a_record_naming_the_inode_without_the_creation_time_proves_nothing(identity, tmp_path):
    if ownership.born_ns(tmp_path) is None:
        pytest.skip("this file system keeps no creation times: the inode is all a record can name")
    inode = os.stat(tmp_path).st_ino
    written_for = {"inode": str(inode), "inode-0": f"{inode}-0", "bare number": inode}[identity]
    (tmp_path / MANIFEST).write_text(record_text(tmp_path, ["a"], written_for))
    assert ownership.owned(tmp_path) == set()


def record_text(folder: Path, entries: object, written_for: object = None) -> str:
    """A record of `entries` written for `folder` (or for `written_for` where given)."""
    identity = ownership.folder_id(folder) if written_for is None else written_for
    return json.dumps({"written_by": "sqa", "folder": identity, "entries": entries})


@pytest.mark.parametrize(
    ("entries", "written_for", "names"),
    [
        ("abc", None, set()),  # not a list: no names, not its characters
        ({"a": 1}, None, set()),
        ([1, None, "a", "", ".", "..", "x/y"], None, {"a"}),
        (["a"], True, set()),  # bool is no folder identity
        (["a"], "ino", set()),
        (["a"], 0, set()),
    ],
)
def test_a_record_that_is_not_a_list_of_names_for_this_folder_proves_nothing_beyond_them(
    entries, written_for, names, tmp_path
):
    (tmp_path / MANIFEST).write_text(record_text(tmp_path, entries, written_for))
    assert ownership.owned(tmp_path) == names


@pytest.mark.parametrize("content", ['["a"]', '{"other": ["a"]}', "not json", '{"entries": ["a"]}'])
def test_a_record_without_entries_and_folder_proves_nothing(content, tmp_path):
    (tmp_path / MANIFEST).write_text(content)
    assert ownership.owned(tmp_path) == set() and not ownership.has_record(tmp_path)


def test_a_record_up_to_the_limit_is_read_whole_and_one_past_it_is_not_trusted(tmp_path):
    head = record_text(tmp_path, ["a"])
    at_limit = head[:-1] + " " * (MAX_MANIFEST_BYTES - len(head)) + "}"
    assert len(at_limit.encode()) == MAX_MANIFEST_BYTES
    (tmp_path / MANIFEST).write_text(at_limit)
    assert ownership.owned(tmp_path) == {"a"}
    (tmp_path / MANIFEST).write_text(at_limit[:-1] + " }")
    assert ownership.owned(tmp_path) == set()


def test_a_record_that_is_a_link_a_folder_or_a_fifo_is_not_trusted_and_never_blocks(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    linked = tmp_path / "linked"
    linked.mkdir()
    elsewhere.write_text(record_text(linked, ["thesis.tex"]))
    (linked / MANIFEST).symlink_to(elsewhere)
    assert ownership.owned(linked) == set()
    folder = tmp_path / "folder"
    (folder / MANIFEST).mkdir(parents=True)
    assert ownership.owned(folder) == set()
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / MANIFEST)

    class Hung(Exception):
        """Not an OSError, which the reader would take for an unreadable record."""

    def hung(signum: int, frame: object) -> None:
        raise Hung("opening the record waited for a writer")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(5)
    try:
        assert ownership.owned(fifo) == set()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_entries_of_a_missing_folder_are_none(tmp_path):
    assert ownership.entries(tmp_path / "missing") == set()


@pytest.mark.parametrize(("count", "tail"), [(1, ""), (2, " (and 1 more)"), (3, " (and 2 more)")])
def test_the_refusal_names_the_first_foreign_entry_and_counts_the_rest(count, tail, tmp_path):
    for name in ("a.txt", "b.txt", "c.txt")[:count]:
        (tmp_path / name).write_text("mine")
    with pytest.raises(OwnershipError) as err:
        ownership.check_replaceable(tmp_path, "--overwrite")
    assert str(err.value) == (
        f"{tmp_path}: holds a.txt, which sqa did not write{tail}; --overwrite replaces only what sqa "
        f"wrote there ({MANIFEST} records it); --overwrite refused, nothing was removed"
    )


def test_a_protected_folder_is_refused_for_that_reason_even_beside_a_foreign_file(tmp_path, monkeypatch):
    (tmp_path / "thesis.tex").write_text("mine")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(OwnershipError) as err:
        ownership.check_replaceable(tmp_path, "overwrite=true")
    assert str(err.value) == (
        f"{tmp_path}: is the working directory or one of its parents; overwrite=true refused, "
        "nothing was removed"
    )
    clone = tmp_path / "clone"
    (clone / ".git").mkdir(parents=True)
    ownership.record_all(clone)
    monkeypatch.chdir(tmp_path.parent)
    assert ownership.protected(clone) == "is a repository root"


@pytest.mark.skipif(not (REPO / ".git").exists(), reason="sqa runs from an installed copy, not a clone")
def test_a_folder_above_sqas_own_clone_is_never_cleared(tmp_path, monkeypatch):
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert ownership.protected(REPO.parent) == f"holds the repository {REPO}"
    assert ownership.protected(Path(tmp_path / "x")) is None


def copied_record(tmp_path: Path, into: Path) -> bytes:
    """A record sqa wrote for another folder (listing a.txt), copied into `into`; its bytes."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.txt").write_text("sqa's\n")
    ownership.record(other, ["a.txt"])
    data = (other / MANIFEST).read_bytes()
    (into / MANIFEST).write_bytes(data)
    return data


@pytest.mark.parametrize("how", ["copied", "not_json", "link", "dangling_link"])
def test_a_stray_record_is_never_replaced_by_sqas_own(how, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "a.txt").write_text("new\n")
    if how == "copied":
        planted = copied_record(tmp_path, folder)
    elif how == "not_json":
        planted = b"the user's notes\n"
        (folder / MANIFEST).write_bytes(planted)
    else:
        if how == "link":
            (tmp_path / "target.json").write_text(record_text(folder, ["a.txt"]))
        (folder / MANIFEST).symlink_to(tmp_path / "target.json")
    assert ownership.stray_record(folder).startswith(f"holds {MANIFEST}, which is not a record sqa wrote")
    for write in (
        lambda: ownership.record(folder, ["a.txt"]),
        lambda: ownership.record_created(folder, before=set()),
        lambda: ownership.record_all(folder),
    ):
        with pytest.raises(OwnershipError, match=f"^{folder}: holds {MANIFEST}, which is not a record"):
            write()
    if how.endswith("link"):
        assert (folder / MANIFEST).is_symlink()
    else:
        assert (folder / MANIFEST).read_bytes() == planted
    with pytest.raises(OwnershipError, match=f"holds {MANIFEST}, which is not a record sqa wrote"):
        ownership.check_replaceable(folder, "--overwrite")


def test_sqas_own_record_and_no_record_at_all_are_not_stray(tmp_path):
    assert ownership.stray_record(tmp_path) is None
    (tmp_path / "a.txt").write_text("")
    ownership.record(tmp_path, ["a.txt"])
    assert ownership.stray_record(tmp_path) is None
    (tmp_path / "b.txt").write_text("")
    ownership.record(tmp_path, ["b.txt"])
    assert ownership.owned(tmp_path) == {"a.txt", "b.txt"}
    # The same folder renamed keeps its record; the same record copied elsewhere is stray there.
    moved = tmp_path.parent / f"{tmp_path.name}-moved"
    tmp_path.rename(moved)
    assert ownership.stray_record(moved) is None
    copy = moved.parent / f"{moved.name}-copy"
    copy.mkdir()
    (copy / MANIFEST).write_bytes((moved / MANIFEST).read_bytes())
    assert ownership.stray_record(copy) is not None


def test_a_pending_name_is_sqas_only_while_its_entry_is_the_one_noted(tmp_path):
    # Noted by its identity before it was renamed into place: the same entry is sqa's, another
    # made under the name (after the first was removed) is not, whatever its inode.
    (tmp_path / ".out.json.ab12").write_text("sqa")
    ownership.intend(tmp_path, "out.json", ownership.entry_id(tmp_path / ".out.json.ab12"))
    os.rename(tmp_path / ".out.json.ab12", tmp_path / "out.json")
    assert ownership.owned(tmp_path) == {"out.json"}
    (tmp_path / "out.json").unlink()
    (tmp_path / "out.json").write_text("the user's")
    assert ownership.owned(tmp_path) == set()


@pytest.mark.parametrize("kind", ["file", "folder", "link"])
def test_a_temporary_name_noted_before_it_was_made_proves_a_regular_file_only(kind, tmp_path):
    ownership.intend(tmp_path, ".x.csv.0a1b2c3d4e5f")
    entry = tmp_path / ".x.csv.0a1b2c3d4e5f"
    assert ownership.owned(tmp_path) == set()
    {"file": lambda: entry.write_text("part"), "folder": entry.mkdir, "link": lambda: entry.symlink_to(REPO)}[
        kind
    ]()
    assert ownership.owned(tmp_path) == ({entry.name} if kind == "file" else set())


def test_a_moved_entry_keeps_its_identity_and_the_next_record_resolves_what_is_pending(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "plots").mkdir()
    ownership.record(tmp_path, ["metrics.json", "plots"])
    # metrics.json leaves the plain names, pending by its identity; plots stays recorded.
    ownership.intend(tmp_path, "metrics.json", ownership.entry_id(tmp_path / "metrics.json"))
    record = json.loads((tmp_path / MANIFEST).read_text())
    assert record["entries"] == ["plots"] and list(record["pending"]) == ["metrics.json"]
    assert ownership.owned(tmp_path) == {"metrics.json", "plots"}
    # Resolved: a proven pending name becomes a plain one, one whose entry is gone is dropped.
    ownership.intend(tmp_path, ".gone.0011", None)
    ownership.record_created(tmp_path, before=ownership.entries(tmp_path))
    record = json.loads((tmp_path / MANIFEST).read_text())
    assert record["entries"] == ["metrics.json", "plots"] and "pending" not in record
