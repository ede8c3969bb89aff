"""Splits carved by song: validation (and a carved test) meet songs that training has not heard."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.data.corpus import CorpusError
from sqa.data.readers import read_csv_manifest
from sqa.data.valid_split import carve, carve_test, carve_valid, resolve_split_by
from sqa.training.datamodule import MOSDataModule


def write_songs(root: Path, songs: int, systems: int = 4, unnamed: int = 0, column: str = "song_id") -> Path:
    """`systems` renditions of each of `songs` songs (the song in `column`), plus `unnamed` clips of none."""
    rows = [f"wav_path,score,system_id,sample_id,{column}"]
    t = np.arange(1600) / 16000
    for s in range(songs):
        for k in range(systems):
            name = f"song{s:02d}-sys{k}"
            sf.write(root / f"{name}.wav", 0.1 * np.sin(2 * np.pi * (200 + 20 * s + 7 * k) * t), 16000)
            rows.append(f"{name}.wav,{1 + (s + k) % 5},sys{k},{name},song {s:02d}")
    for u in range(unnamed):
        sf.write(root / f"loose{u}.wav", 0.1 * np.sin(2 * np.pi * 300 * t), 16000)
        rows.append(f"loose{u}.wav,3,sys0,loose{u},")
    (root / "m.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root / "m.csv"


def songs_of(corpus, split: str) -> set[str]:
    return {c.song for c in corpus.split(split)}


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_a_validation_carved_by_song_holds_no_song_of_the_training_split(tmp_path, seed):
    corpus = read_csv_manifest(write_songs(tmp_path, songs=13))
    carved = carve_valid(corpus, 0.1, seed, by="song")
    valid, train = songs_of(carved, "valid"), songs_of(carved, "train")
    assert valid and not valid & train
    # Every clip of a validation song went: 4 renditions each.
    assert len(carved.split("valid")) == 4 * len(valid)
    # round(0.1 x 13) = 1, raised to two songs; 0.3 x 13 = 3.9 rounds to 4.
    assert len(valid) == 2
    assert len(songs_of(carve_valid(corpus, 0.3, seed, by="song"), "valid")) == 4


def test_song_carving_keeps_a_song_in_training_and_needs_two_songs(tmp_path):
    two = read_csv_manifest(write_songs(tmp_path, songs=2))
    assert len(songs_of(carve_valid(two, 0.5, 0, by="song"), "valid")) == 1
    three = read_csv_manifest(write_songs(tmp_path, songs=3))
    carved = carve_valid(three, 0.9, 0, by="song")
    assert len(songs_of(carved, "valid")) == 2 and len(songs_of(carved, "train")) == 1
    one = read_csv_manifest(write_songs(tmp_path, songs=1))
    assert carve(one, 0.5, 0, by="song") == set()


def test_song_draws_are_seeded_and_differ_between_validation_and_test(tmp_path):
    corpus = read_csv_manifest(write_songs(tmp_path, songs=12))
    first = carve(corpus, 0.25, 0, by="song")
    assert first == carve(corpus, 0.25, 0, by="song")
    assert any(carve(corpus, 0.25, s, by="song") != first for s in range(1, 4))
    assert carve(corpus, 0.25, 0, by="song", stream=1) != first


def test_auto_carves_by_song_where_every_clip_names_one_and_by_clip_where_not(tmp_path):
    named = read_csv_manifest(write_songs(tmp_path, songs=6))
    assert resolve_split_by(named, "auto") == "song"
    (tmp_path / "loose").mkdir()
    partly = read_csv_manifest(write_songs(tmp_path / "loose", songs=6, unnamed=1))
    assert resolve_split_by(partly, "auto") == "clip"
    # Given, song and system are kept as they are; clip too, where songs exist.
    assert [resolve_split_by(named, by) for by in ("song", "system", "clip")] == ["song", "system", "clip"]
    with pytest.raises(
        CorpusError, match=r"split_by=song, but training clip 'loose0' \(and 0 more\) names no song"
    ):
        resolve_split_by(partly, "song")


@pytest.mark.parametrize("column", ["song", "item", "item_id"])
def test_a_column_named_song_or_item_is_the_song(tmp_path, column):
    corpus = read_csv_manifest(write_songs(tmp_path, songs=3, column=column))
    assert {c.song for c in corpus.clips} == {"song 00", "song 01", "song 02"}


def test_a_column_the_user_maps_is_the_song(tmp_path):
    corpus = read_csv_manifest(write_songs(tmp_path, songs=3, column="piece"), columns={"song_id": "piece"})
    assert resolve_split_by(corpus, "auto") == "song"


def test_the_data_module_carves_test_and_validation_by_song_by_default(tmp_path, caplog):
    caplog.set_level("INFO", logger="sqa")
    dm = MOSDataModule(read_csv_manifest(write_songs(tmp_path, songs=15)), seed=0)
    test, valid, train = (songs_of(dm.corpus, s) for s in ("test", "valid", "train"))
    assert test and valid and not (test & train or valid & train or test & valid)
    # round(0.2 x 15) = 3 test songs; validation: round(0.1 x 12) = 1, raised to 2.
    assert (len(test), len(valid)) == (3, 2)
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "carved by song: 0.2, split seed 0" in said and "carved by song: 0.1, split seed 0" in said
    clip = MOSDataModule(read_csv_manifest(write_songs(tmp_path, songs=15)), seed=0, split_by="clip")
    assert songs_of(clip.corpus, "valid") & songs_of(clip.corpus, "train")


def test_carve_test_by_song_moves_whole_songs(tmp_path):
    corpus = read_csv_manifest(write_songs(tmp_path, songs=10))
    carved = carve_test(corpus, 0.2, 0, by="song")
    assert len(songs_of(carved, "test")) == 2 and not songs_of(carved, "test") & songs_of(carved, "train")
