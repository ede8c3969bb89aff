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


def test_a_name_a_user_already_has_is_never_recorded_and_new_names_are(tmp_path):
    folder = tmp_path / "a" / "b"  # made with its parents
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text("mine: true\n")
    ownership.claim(folder, ["config.yaml", "metrics.json"])
    assert ownership.owned(folder) == {"metrics.json"}
    # Claimed again once sqa has written it: still sqa's; the user's file still not.
    (folder / "metrics.json").write_text("{}")
    ownership.claim(folder, ["config.yaml", "metrics.json"])
    assert ownership.owned(folder) == {"metrics.json"}
    ownership.claim(tmp_path / "new" / "deeper", ["x"])
    assert ownership.owned(tmp_path / "new" / "deeper") == {"x"}


def test_the_record_is_sorted_json_that_says_who_wrote_it(tmp_path):
    ownership.claim(tmp_path, ["b", "a", "b"])
    text = (tmp_path / MANIFEST).read_text(encoding="utf-8")
    assert text == json.dumps({"written_by": "sqa", "entries": ["a", "b"]}, indent=1) + "\n"


@pytest.mark.parametrize(
    "content",
    [
        '{"entries": "abc"}',  # not a list: no names, not its characters
        '{"entries": {"a": 1}}',
        '["a"]',
        '{"other": ["a"]}',
        "not json",
        '{"entries": [1, null, "a"]}',
    ],
)
def test_a_record_that_is_not_a_list_of_names_proves_nothing_beyond_its_names(content, tmp_path):
    (tmp_path / MANIFEST).write_text(content)
    assert ownership.owned(tmp_path) == ({"a"} if content.startswith('{"entries": [1') else set())


def test_a_record_up_to_the_limit_is_read_whole_and_one_past_it_is_not_trusted(tmp_path):
    head = json.dumps({"written_by": "sqa", "entries": ["a"]})
    at_limit = head[:-1] + " " * (MAX_MANIFEST_BYTES - len(head)) + "}"
    assert len(at_limit.encode()) == MAX_MANIFEST_BYTES
    (tmp_path / MANIFEST).write_text(at_limit)
    assert ownership.owned(tmp_path) == {"a"}
    (tmp_path / MANIFEST).write_text(at_limit[:-1] + " }")
    assert ownership.owned(tmp_path) == set()


def test_a_record_that_is_a_link_a_folder_or_a_fifo_is_not_trusted_and_never_blocks(tmp_path):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"entries": ["thesis.tex"]}))
    linked = tmp_path / "linked"
    linked.mkdir()
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
