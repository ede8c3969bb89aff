"""recipes/real/build.py on tiny fake clones laid out as the two listening tests' repositories."""

from __future__ import annotations

import csv
import importlib.util
import json
import zlib
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.data.readers import read_csv_manifest

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("real_build", REPO / "recipes" / "real" / "build.py")
build = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(build)

WARD_SOUNDS = ("ref", "Quality", "Interferer", "KAM1", "HUA")
SISEC_SOUNDS = {
    "Ref": "ref_vocals",
    "Anch1": "anchor1_interference",
    "Anch2": "anchor2_quality",
    "JY3": "JY3_vocals",
}


def tone(path: Path, hz: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(4410) / 44100
    sf.write(path, np.stack([0.1 * np.sin(2 * np.pi * hz * t)] * 2, axis=1), 44100, format="FLAC")


def fake_ward(root: Path, pages=("vocals-10-SIR", "vocals-11-SAR", "vocals-12-SAR", "vocals-18-SIR")) -> Path:
    """data/ratings.csv (two experiments and subjects, a replicate) and site/sounds/<page>/<sound>.flac."""
    rows = []
    for p, page in enumerate(pages):
        for s, sound in enumerate(WARD_SOUNDS):
            tone(root / "site" / "sounds" / page / f"{sound}.flac", 200 + 10 * p + s)
            for experiment in ("quality", "interferer"):
                for subject, shift in (("A", 0), ("B", 10)):
                    rating = (
                        100 if sound == "ref" else 10 * s + shift + (5 if experiment == "interferer" else 0)
                    )
                    rows.append([page, sound, rating, subject, experiment, "False"])
    rows.append([pages[0], "KAM1", 0, "A", "quality", "True"])
    (root / "data").mkdir(parents=True)
    with (root / "data" / "ratings.csv").open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["is_replicate", "page", "rating", "sound", "subject", "experiment", "url"])
        writer.writerows([[r[5], r[0], r[2], r[1], r[3], r[4], f"sounds/{r[0]}/{r[1]}.wav"] for r in rows])
    return root


def fake_sisec(root: Path, songs=("Band A - One", "Band B - Two", "Band C - Three", "Band D - Four")) -> Path:
    """_data/results/similarity/<submission>.json (data as JSON text, a name typed) and sounds/<song>/."""
    pages = []
    for i, song in enumerate(songs):
        sounds = []
        for j, (name, stem) in enumerate(SISEC_SOUNDS.items()):
            url = f"sounds/{song}/{stem}.flac"
            tone(root / url, 150 + 10 * i + j)
            sounds.append({"name": name, "url": url, "rating": 100 - 20 * j})
        pages.append({"name": f"Set {i + 1}", "sounds": sounds})
    results = root / "_data" / "results" / "similarity"
    results.mkdir(parents=True)
    for n, typed in enumerate(("Jane Doe", "John Roe")):
        record = {"_id": f"id{n}", "name": typed, "data": json.dumps({"pages": pages})}
        (results / f"submission_{n}.json").write_text(json.dumps(record), encoding="utf-8")
    return root


def test_ward2018_rows_are_one_per_rating_with_roles_songs_and_a_test_split_by_song(tmp_path):
    clone = fake_ward(tmp_path / "ward")
    rows = build.ward2018_rows(clone, "quality", test_songs=["12"])
    assert len(rows) == 4 * 5 * 2 + 1
    assert {r["song_id"] for r in rows} == {"10", "11", "12", "18"}
    roles = {r["system_id"]: r["role"] for r in rows}
    assert roles == {"ref": "reference", "Quality": "anchor", "Interferer": "anchor", "KAM1": "", "HUA": ""}
    assert {r["split"] for r in rows if r["song_id"] == "12"} == {"test"}
    assert {r["split"] for r in rows if r["song_id"] != "12"} == {"train"}
    first = next(r for r in rows if r["sample_id"] == "vocals-10-SIR-HUA" and r["listener_id"] == "B")
    assert first["score"] == str(10 * 4 + 10) and Path(first["wav_path"]).is_absolute()
    assert Path(first["wav_path"]) == (clone / "site/sounds/vocals-10-SIR/HUA.flac").resolve()
    # The other experiment's ratings are its own.
    other = build.ward2018_rows(clone, "interferer", test_songs=["12"])
    assert {r["score"] for r in other if r["system_id"] == "KAM1" and r["listener_id"] == "A"} == {"35"}


def test_a_ward2018_page_not_named_for_a_track_is_its_own_song_and_no_test_songs_hold_none_out(tmp_path):
    # Pages are vocals-<track>-<SIR|SAR>; any other page name is taken whole as the song.
    clone = fake_ward(tmp_path / "ward", pages=("vocals-10-SIR", "vocals-11-SAR", "demo", "vocals-x"))
    rows = build.ward2018_rows(clone, "quality", test_songs=["demo"])
    assert {r["song_id"] for r in rows} == {"10", "11", "demo", "vocals-x"}
    assert {r["split"] for r in rows if r["song_id"] == "demo"} == {"test"}
    # An empty list of test songs (`--test-songs` with no names) holds none out: every row trains.
    assert {r["split"] for r in build.ward2018_rows(clone, "quality", test_songs=[])} == {"train"}
    assert {r["split"] for r in build.ward2018_rows(clone, "quality")} == {"train", "test"}


def test_a_ward2018_manifest_reads_as_a_0_to_100_corpus_with_replicates_averaged_per_listener(tmp_path):
    clone = fake_ward(tmp_path / "ward")
    out = tmp_path / "m" / "ward.csv"
    assert build.main(["ward2018", str(clone), "--test-songs", "12", "--output", str(out)]) == 0
    corpus = read_csv_manifest(out, score_range=[0, 100])
    clips = {c.sample_id: c for c in corpus.clips}
    assert len(clips) == 20
    # Listener A rated KAM1 of song 10 30 and then 0 (a replicate): 15; listener B 40.
    assert clips["vocals-10-SIR-KAM1"].mos == pytest.approx((15 + 40) / 2)
    assert clips["vocals-10-SIR-ref"].role == "reference" and clips["vocals-10-SIR-Quality"].role == "anchor"
    assert clips["vocals-12-SAR-HUA"].split == "test" and clips["vocals-12-SAR-HUA"].song == "12"
    assert set(corpus.test_sets()) == {"anchor", "reference", "test"}


def test_sisec18_rows_name_listeners_by_their_submission_never_by_the_name_they_typed(tmp_path):
    clone = fake_sisec(tmp_path / "sisec")
    rows = build.sisec18_rows(clone, test_songs=["Band B - Two"])
    assert len(rows) == 4 * 4 * 2
    assert {r["listener_id"] for r in rows} == {"submission_0", "submission_1"}
    assert not any("Doe" in v or "Roe" in v for r in rows for v in r.values())
    roles = {r["system_id"]: r["role"] for r in rows}
    assert roles == {"Ref": "reference", "Anch1": "anchor", "Anch2": "anchor", "JY3": ""}
    assert {r["song_id"] for r in rows if r["split"] == "test"} == {"Band B - Two"}
    ref = next(r for r in rows if r["sample_id"] == "Band A - One-Ref")
    assert ref["score"] == "100" and ref["wav_path"].endswith("sounds/Band A - One/ref_vocals.flac")


def test_the_default_test_songs_are_the_first_by_the_crc_of_their_names(tmp_path):
    songs = [f"song {i}" for i in range(9)]
    expected = sorted(songs, key=lambda s: zlib.crc32(s.encode()))[:3]
    assert build.default_test_songs(songs * 2) == expected
    assert build.default_test_songs(songs, 2) == expected[:2]
    rows = build.sisec18_rows(fake_sisec(tmp_path / "sisec"))
    names = sorted({r["song_id"] for r in rows}, key=lambda s: zlib.crc32(s.encode()))
    assert {r["song_id"] for r in rows if r["split"] == "test"} == set(names[:3])


def test_a_clone_that_lacks_what_its_layout_names_is_an_error_naming_the_file(tmp_path, capsys):
    with pytest.raises(
        build.BuildError, match=r"data/ratings.csv: missing; is .* a clone of CVSSP/perceptual"
    ):
        build.ward2018_rows(tmp_path, "quality")
    clone = fake_ward(tmp_path / "ward")
    (clone / "site/sounds/vocals-11-SAR/HUA.flac").unlink()
    with pytest.raises(build.BuildError, match=r"vocals-11-SAR/HUA.flac: missing; is .* a whole clone"):
        build.ward2018_rows(clone, "quality")
    with pytest.raises(build.BuildError, match=r"experiment must be one of \['quality', 'interferer'\]"):
        build.ward2018_rows(clone, "similarity")
    with pytest.raises(
        build.BuildError,
        match=r"_data/results/similarity: no submissions; the ratings are on the gh-pages branch",
    ):
        build.sisec18_rows(tmp_path / "master-branch")
    broken = fake_sisec(tmp_path / "sisec")
    (broken / "_data/results/similarity/submission_1.json").write_text('{"data": 3}', encoding="utf-8")
    with pytest.raises(build.BuildError, match=r"submission_1.json: not a listener's submission"):
        build.sisec18_rows(broken)
    assert (
        build.main(
            [
                "sisec18",
                str(fake_sisec(tmp_path / "ok")),
                "--test-songs",
                "nope",
                "--output",
                str(tmp_path / "o.csv"),
            ]
        )
        == 2
    )
    assert "test songs ['nope'] are not songs of this test" in capsys.readouterr().err


def test_an_existing_manifest_is_replaced_only_when_asked(tmp_path, capsys):
    clone = fake_sisec(tmp_path / "sisec")
    out = tmp_path / "o.csv"
    out.write_text("mine\n", encoding="utf-8")
    assert build.main(["sisec18", str(clone), "--output", str(out)]) == 2
    assert out.read_text(encoding="utf-8") == "mine\n" and "pass --overwrite" in capsys.readouterr().err
    assert build.main(["sisec18", str(clone), "--output", str(out), "--overwrite"]) == 0
    assert out.read_text(encoding="utf-8").startswith("wav_path,score,system_id")
