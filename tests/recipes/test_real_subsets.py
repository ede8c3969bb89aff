"""recipes/real/subsets.py: small studies of a real manifest, seeded, tested on the same songs."""

from __future__ import annotations

import csv
import importlib.util

import pytest

from tests.conftest import REPO

SPEC = importlib.util.spec_from_file_location("real_subsets", REPO / "recipes" / "real" / "subsets.py")
subsets = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(subsets)


def manifest(path, songs=12, test_songs=3, stimuli=4):
    """A manifest of `songs` songs of `stimuli` clips each, the first `test_songs` in the test split."""
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, ["wav_path", "score", "song_id", "split"], lineterminator="\n")
        writer.writeheader()
        for s in range(songs):
            for i in range(stimuli):
                split = "test" if s < test_songs else "train"
                writer.writerow(
                    {"wav_path": f"s{s}/{i}.wav", "score": str(10 * i), "song_id": f"s{s}", "split": split}
                )
    return path


def read(path):
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_each_draw_has_its_songs_two_for_validation_and_every_test_row(tmp_path):
    source = manifest(tmp_path / "m.csv")
    assert (
        subsets.main([str(source), "--output-dir", str(tmp_path / "small"), "--draws", "3", "--songs", "5"])
        == 0
    )
    full = read(source)
    drawn = []
    for k in range(3):
        rows = read(tmp_path / "small" / f"m-small-{k}.csv")
        by_split = {s: {r["song_id"] for r in rows if r["split"] == s} for s in ("train", "valid", "test")}
        assert len(by_split["valid"]) == 2 and len(by_split["train"]) == 3
        assert not by_split["valid"] & by_split["train"]
        # The test rows are the manifest's, untouched; every chosen song comes whole.
        assert [r for r in rows if r["split"] == "test"] == [r for r in full if r["split"] == "test"]
        assert len(rows) == (3 + 5) * 4
        drawn.append((by_split["train"], by_split["valid"]))
    assert len({(frozenset(t), frozenset(v)) for t, v in drawn}) == 3


def test_the_same_seed_gives_the_same_subsets_and_another_seed_others(tmp_path):
    source = manifest(tmp_path / "m.csv")
    texts = {}
    for run, seed in (("a", 0), ("b", 0), ("c", 1)):
        subsets.main(
            [
                str(source),
                "--output-dir",
                str(tmp_path / run),
                "--draws",
                "2",
                "--songs",
                "5",
                "--seed",
                str(seed),
            ]
        )
        texts[run] = [(tmp_path / run / f"m-small-{k}.csv").read_text() for k in range(2)]
    assert texts["a"] == texts["b"] and texts["a"] != texts["c"]


@pytest.mark.parametrize(
    ("songs", "valid", "ok"), [(9, 2, True), (10, 2, False), (5, 0, False), (5, 5, False)]
)
def test_songs_must_fit_the_training_songs_on_both_sides(songs, valid, ok, tmp_path, capsys):
    source = manifest(tmp_path / "m.csv")  # 9 training songs
    args = [
        str(source),
        "--output-dir",
        str(tmp_path / "o"),
        "--draws",
        "1",
        "--songs",
        str(songs),
        "--valid-songs",
        str(valid),
    ]
    assert subsets.main(args) == (0 if ok else 2)
    if not ok:
        assert "cannot draw" in capsys.readouterr().err


def test_an_existing_subset_is_kept_without_overwrite(tmp_path, capsys):
    source = manifest(tmp_path / "m.csv")
    (tmp_path / "o").mkdir()
    mine = tmp_path / "o" / "m-small-0.csv"
    mine.write_text("the user's\n")
    assert (
        subsets.main([str(source), "--output-dir", str(tmp_path / "o"), "--draws", "1", "--songs", "5"]) == 2
    )
    assert mine.read_text() == "the user's\n" and "--overwrite" in capsys.readouterr().err
