"""`sqa-score --by-system` and `sqa.scoring.systems`: systems ranked with bootstrap intervals, adjacent
pairs compared (paired by item where the systems share items), a folder per system, the check before
scoring, and the manifest's `path`/`system` spellings.
"""

from __future__ import annotations

import csv
import json
import shutil
import zlib
from pathlib import Path

import numpy as np
import pytest

import sqa
from sqa.core import resampling
from sqa.data.readers.columns import COLUMN_SPELLINGS
from sqa.scoring import cli as score_cli
from sqa.scoring.inputs import ITEM_COLUMNS, PATH_COLUMNS, SYSTEM_COLUMNS, expand_inputs
from sqa.scoring.scorer import FolderScores, Scorer
from sqa.scoring.systems import clip_layout, rank_systems

# Three systems singing the same four excerpts, as a listening test lays out its stimuli.
SYSTEMS = ("sysA", "sysB", "sysC")
SONGS = ("ballad_1", "ballad_2", "anthem_1", "anthem_2")


def bootstrap(values: list[float], key: list[int], resamples: int) -> np.ndarray:
    """The resampled means of `values` that numpy draws from the generator of `key`."""
    rng = np.random.default_rng(key)
    return np.asarray(values)[rng.integers(0, len(values), size=(resamples, len(values)))].mean(axis=1)


def crc(name: str) -> int:
    return zlib.crc32(name.encode())


def run_score(export: Path, *args: object) -> int:
    return score_cli.main(["--checkpoint", str(export), "--num-workers", "0", *map(str, args)])


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def audio(synthetic_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`audio/<system>/<song>.wav`: clips of the synthetic corpus, each system under its own folder."""
    folder = tmp_path_factory.mktemp("mushra") / "audio"
    for s, system in enumerate(SYSTEMS):
        (folder / system).mkdir(parents=True)
        for u, song in enumerate(SONGS):
            clip = synthetic_root / "wav" / f"sys{s + 1:04d}-utt{u + 1:04d}.wav"
            shutil.copy(clip, folder / system / f"{song}.wav")
    return folder


# --- intervals and verdicts ---------------------------------------------------------------------


def test_each_systems_interval_is_the_percentile_interval_of_its_resampled_clip_means():
    a, b = [3.1, 3.9, 3.4, 4.2, 3.6], [2.0, 2.8, 2.2, 2.5]
    ranking = rank_systems([*b, *a, None], ["B"] * 4 + ["A"] * 5 + ["B"], resamples=300, seed=7)
    first, second = ranking.systems
    assert (first.system_id, first.n, second.system_id, second.n) == ("A", 5, "B", 4)  # best first
    assert first.score == pytest.approx(np.mean(a), abs=1e-12)
    for system, values in ((first, a), (second, b)):
        lo, hi = np.percentile(bootstrap(values, [7, crc(system.system_id)], 300), [2.5, 97.5])
        assert (system.lo, system.hi) == pytest.approx((lo, hi), abs=1e-12)
        assert system.lo <= system.score <= system.hi
    # Unpaired (no items): each side's clips drawn on their own, A's first, from the pair's generator.
    rng = np.random.default_rng([7, crc("A"), crc("B")])
    draws = [np.asarray(v)[rng.integers(0, len(v), size=(300, len(v)))].mean(axis=1) for v in (a, b)]
    (comparison,) = ranking.comparisons
    assert comparison.diff == pytest.approx(np.mean(a) - np.mean(b), abs=1e-12)
    lo, hi = np.percentile(draws[0] - draws[1], [2.5, 97.5])
    assert (comparison.lo, comparison.hi) == pytest.approx((lo, hi), abs=1e-12)
    assert comparison.pairing == "unpaired" and comparison.items is None


def test_resamples_drawn_in_blocks_are_those_drawn_at_once(monkeypatch):
    scores, systems = [3.1, 3.9, 3.4, 4.2, 3.6, 2.0, 2.8, 2.2], ["A"] * 5 + ["B"] * 3
    whole = rank_systems(scores, systems, resamples=301)
    monkeypatch.setattr(resampling, "PAIR_BLOCK", 7)  # a block of one resample (5 clips) at a time
    assert rank_systems(scores, systems, resamples=301) == whole


def test_two_equal_clips_give_a_point_interval_and_one_clip_none():
    ranking = rank_systems([2.0, 2.0, 4.0], ["A", "A", "B"])
    best, two = ranking.systems
    assert (best.system_id, best.lo, best.hi) == ("B", None, None)
    assert (two.lo, two.hi) == (2.0, 2.0)
    (comparison,) = ranking.comparisons
    assert comparison.diff == 2.0 and comparison.p is None and not comparison.significant


def test_a_clear_difference_is_significant_and_a_tiny_one_is_not():
    rng = np.random.default_rng(0)
    noise = rng.normal(0, 0.3, size=(3, 30))
    scores = np.concatenate([4.0 + noise[0], 3.0 + noise[1], 2.98 + noise[2]])
    systems = ["good"] * 30 + ["fair"] * 30 + ["close"] * 30
    ranking = rank_systems(list(scores), systems)
    assert [s.system_id for s in ranking.systems][0] == "good"
    clear, tiny = ranking.comparisons
    assert (clear.above, clear.below) == ("good", ranking.systems[1].system_id)
    assert clear.significant and clear.p < 0.01 and clear.lo > 0
    assert not tiny.significant and tiny.p > 0.05 and tiny.lo < 0 < tiny.hi


def test_shared_items_pair_the_comparison_and_narrow_it_where_items_differ_a_lot():
    # Each excerpt's difficulty moves every system's score by up to 3 MOS; B renders each 0.2 worse.
    rng = np.random.default_rng(1)
    difficulty = np.linspace(1.0, 4.0, 12)
    a = difficulty + rng.normal(0, 0.05, 12)
    b = difficulty - 0.2 + rng.normal(0, 0.05, 12)
    items = [f"excerpt_{i}" for i in range(12)]
    systems = ["A"] * 12 + ["B"] * 12
    paired = rank_systems([*a, *b], systems, items * 2).comparisons[0]
    unpaired = rank_systems([*a, *b], systems).comparisons[0]
    assert paired.pairing == "paired by 12 items" and unpaired.pairing == "unpaired"
    assert paired.diff == pytest.approx(unpaired.diff, abs=1e-12)
    assert paired.significant and not unpaired.significant
    assert (paired.hi - paired.lo) * 5 < unpaired.hi - unpaired.lo


def test_only_shared_items_are_paired_and_fewer_than_two_is_unpaired():
    a = [3.0, 3.5, 4.0, 4.5]
    b = [2.0, 2.4, 5.0, 5.0]
    systems = ["A"] * 4 + ["B"] * 4
    some = rank_systems([*a, *b], systems, ["x", "y", "z", "w", "x", "y", "q", "r"]).comparisons[0]
    # B is ranked below A (3.6 < 3.75); only x and y are rendered by both.
    assert (some.above, some.items) == ("A", 2)
    assert some.diff == pytest.approx(((3.0 - 2.0) + (3.5 - 2.4)) / 2)
    one = rank_systems([*a, *b], systems, ["x", "y", "z", "w", "x", "p", "q", "r"]).comparisons[0]
    assert one.pairing == "unpaired" and one.diff == pytest.approx(np.mean(a) - np.mean(b))


def test_a_systems_interval_does_not_depend_on_the_other_systems_and_resamples_are_bounded():
    alone = rank_systems([1.0, 2.0, 4.0], ["A"] * 3).systems[0]
    beside = rank_systems([5.0, 1.0, 2.0, 4.0, 5.5], ["Z", "A", "A", "A", "Z"]).systems[1]
    assert (alone.lo, alone.hi) == (beside.lo, beside.hi)
    with pytest.raises(ValueError, match="resamples must be 1 to 100000, got 100001"):
        rank_systems([1.0], ["A"], resamples=100_001)
    with pytest.raises(ValueError, match="clip 1 has none"):
        rank_systems([1.0, 2.0], ["A", None])


# --- what a clip's system and item are ---------------------------------------------------------


def test_a_manifests_system_beats_the_folder_and_the_folder_beats_the_file_name():
    path = "audio/sysA/sysB-utt1.wav"
    # Manifest system (either spelling), else the folder under the folder given, else the name.
    assert clip_layout([path], ["audio"], [{"system": "X"}]).systems == ["X"]
    assert clip_layout([path], ["audio"], [{"system_id": "Y", "singer": "z"}]).systems == ["Y"]
    assert clip_layout([path], ["audio"], [{"system": " "}]).systems == ["sysA"]
    assert clip_layout([path], ["audio"]).systems == ["sysA"]
    assert clip_layout([path], ["audio/sysA"]).systems == ["sysB"]


def test_clips_named_one_by_one_take_the_folder_under_their_common_folder():
    # The shell's expansion of audio/*/*.wav, or audio/sysA audio/sysB given as folders.
    expanded = ["audio/sysA/song_1.wav", "audio/sysB/song_1.wav", "audio/sysB/song_2.flac"]
    layout = clip_layout(expanded)
    assert layout.systems == ["sysA", "sysB", "sysB"]
    assert layout.items == ["song_1", "song_1", "song_2"]
    assert clip_layout(expanded, ["audio/sysA", "audio/sysB", "audio/sysB"]).systems == layout.systems
    # All in one folder (SingMOS-Pro's flat wav/): the folder says nothing, the names do.
    flat = clip_layout(["wav/sys1-utt1.wav", "wav/sys2-utt1.wav", "wav/take.wav"], ["wav"] * 3)
    assert flat.systems == ["sys1", "sys2", None] and flat.items == [None, None, None]
    # Loose files at different depths are not a folder per system either.
    assert clip_layout(["a/takes/sys1-utt1.wav", "b/take.wav"]).systems == ["sys1", None]


def test_a_folders_scores_in_python_rank_the_folders_under_their_common_folder():
    pd = pytest.importorskip("pandas", reason="pandas comes with the train extra")
    scores = {
        f"audio/{s}/disc1/{song}.wav": 2.0 + i + 0.1 * j
        for i, s in enumerate(SYSTEMS)
        for j, song in enumerate(SONGS)
    }
    frame = FolderScores(scores, ["mos"]).to_pandas(by_system=True)
    assert frame["system_id"].tolist() == ["sysC", "sysB", "sysA"] and frame["n"].tolist() == [4, 4, 4]
    assert frame["next_pairing"].tolist()[:2] == ["paired by 4 items"] * 2
    assert frame["next_diff"].tolist()[:2] == pytest.approx([1.0, 1.0])
    assert frame["next_significant"].tolist() == [True, True, None]
    assert pd.isna(frame["next_p"][2]) and frame["lo"].dtype == "float64"


def test_the_item_is_the_manifests_song_else_the_path_below_the_system_folder():
    paths = ["audio/sysA/disc1/song_1.wav", "audio/sysB/disc1/song_1.wav"]
    assert clip_layout(paths, ["audio"] * 2).items == ["disc1/song_1", "disc1/song_1"]
    songs = clip_layout(paths, ["audio"] * 2, [{"song": "s1"}, {"item_id": "s1"}])
    assert songs.items == ["s1", "s1"] and songs.systems == ["sysA", "sysB"]
    # A system from the manifest pairs by the manifest's item only.
    assert clip_layout(paths, ["audio"] * 2, [{"system": "X"}, {"system": "Y"}]).items == [None, None]


def test_a_glob_patterns_files_keep_the_folder_before_its_wildcard(audio, monkeypatch):
    monkeypatch.chdir(audio.parent)
    for patterns, tops in (
        (["audio/*/*.wav"], {"audio"}),
        # Each pattern's files lie in its fixed part: together, their common folder is audio.
        (["audio/sysA/*.wav", "audio/sysB/*.wav"], {"audio/sysA", "audio/sysB"}),
    ):
        inputs = expand_inputs(patterns)
        assert set(inputs.tops) == tops
        systems = clip_layout(inputs.paths, inputs.tops).systems
        assert systems == [p.split("/")[1] for p in inputs.paths]
    # One system's folder alone says nothing: its clips are not <sys>-<utt> named.
    inputs = expand_inputs(["audio/sysA"])
    assert clip_layout(inputs.paths, inputs.tops).systems == [None] * len(SONGS)


def test_the_manifest_column_spellings_are_the_training_readers():
    assert ("song_id", *COLUMN_SPELLINGS["song_id"]) == ITEM_COLUMNS
    assert PATH_COLUMNS[1] in COLUMN_SPELLINGS["wav_path"]
    assert SYSTEM_COLUMNS[1] in COLUMN_SPELLINGS["system_id"]


# --- manifests: path and system as training reads them ------------------------------------------


def test_a_manifest_may_name_its_columns_path_and_system(tmp_path):
    (tmp_path / "m.csv").write_text(
        "path,system,score\na.wav,X,4\n"
        "wav_path,system_id\n"  # a row as data: the header is the first line only
    )
    (tmp_path / "both.csv").write_text(
        "wav_path,path,system_id,system\n"
        "a.wav,a.wav,X,X\n"  # both spellings, the same values
        "b.wav,c.wav,X,X\n"
        "d.wav,d.wav,X,Y\n"
        "e.wav,,,Z\n"  # an empty cell gives no value
    )
    inputs = expand_inputs([str(tmp_path / "m.csv"), str(tmp_path / "both.csv")])
    assert inputs.paths == [str(tmp_path / n) for n in ("a.wav", "wav_path", "a.wav", "e.wav")]
    assert inputs.columns[0] == {"system": "X", "score": "4"}
    assert inputs.columns[2] == {"system_id": "X", "system": "X"}
    assert inputs.problems == [
        f"{tmp_path / 'both.csv'}, line 3: wav_path 'b.wav' and path 'c.wav' differ; give one of the "
        "columns, or the same value in both",
        f"{tmp_path / 'both.csv'}, line 4: system_id 'X' and system 'Y' differ; give one of the columns, "
        "or the same value in both",
    ]
    assert clip_layout(inputs.paths, inputs.tops, inputs.columns).systems == ["X", "system_id", "X", "Z"]


# --- sqa-score --by-system ----------------------------------------------------------------------


def test_sqa_score_ranks_a_folder_per_system_with_intervals_and_paired_comparisons(
    default_export, audio, tmp_path, capsys
):
    out = tmp_path / "scores.csv"
    assert run_score(default_export, "--by-system", "--resamples", 200, "--output", out, audio) == 0
    clips = read_csv(out)
    assert [r["system_id"] for r in clips] == [p.parent.name for p in sorted(audio.rglob("*.wav"))]
    systems = read_csv(tmp_path / "scores.systems.csv")
    assert list(systems[0]) == [
        "system_id",
        "n",
        "score",
        "lo",
        "hi",
        "next_diff",
        "next_lo",
        "next_hi",
        "next_p",
        "next_significant",
        "next_pairing",
    ]
    assert sorted(r["system_id"] for r in systems) == list(SYSTEMS)
    means = [float(r["score"]) for r in systems]
    assert means == sorted(means, reverse=True) and all(r["n"] == "4" for r in systems)
    for row in systems:
        mine = [float(c["score"]) for c in clips if c["system_id"] == row["system_id"]]
        assert float(row["score"]) == pytest.approx(np.mean(mine), abs=1e-12)
        assert float(row["lo"]) <= float(row["score"]) <= float(row["hi"])
    assert [r["next_pairing"] for r in systems] == ["paired by 4 items", "paired by 4 items", ""]
    assert float(systems[0]["next_diff"]) == pytest.approx(means[0] - means[1], abs=1e-12)
    assert systems[0]["next_significant"] in ("True", "False") and systems[2]["next_significant"] == ""
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "sqa-score: systems by mean score, best first, with 95 % bootstrap intervals over their clips "
        "(200 resamples, seed 0):"
    )
    top = {k: float(systems[0][k]) for k in ("score", "lo", "hi", "next_diff")}
    assert err[2] == (
        f"sqa-score:    1  {systems[0]['system_id']}        4  {top['score']:>7.3f}  "
        f"[{top['lo']:.3f}, {top['hi']:.3f}]"
    )
    assert err[5] == "sqa-score: adjacent systems, upper - lower:"
    pair = f"{systems[0]['system_id']} - {systems[1]['system_id']}"
    assert err[6].startswith(f"sqa-score:   {pair}  {top['next_diff']:+.3f}  [")
    assert err[6].endswith("paired by 4 items") and len(err) == 8

    # Each system's folder given, and the shell's expansion of audio/*/*.wav: the same table.
    for inputs in ([audio / s for s in SYSTEMS], sorted(audio.glob("*/*.wav"))):
        again = tmp_path / "again.csv"
        assert (
            run_score(
                default_export, "--by-system", "--resamples", 200, "--overwrite", "--output", again, *inputs
            )
            == 0
        )
        assert read_csv(tmp_path / "again.systems.csv") == systems

    # The API gives the same table, at the default 1000 resamples.
    pd = pytest.importorskip("pandas", reason="pandas comes with the train extra")
    assert run_score(default_export, "--by-system", "--overwrite", "--output", out, audio) == 0
    written = pd.read_csv(tmp_path / "scores.systems.csv")
    frame = sqa.load(default_export).score(audio).to_pandas(by_system=True)
    pd.testing.assert_frame_equal(
        frame.drop(columns="next_significant"), written.drop(columns="next_significant"), atol=1e-6
    )
    assert frame["next_significant"].tolist()[:2] == written["next_significant"].tolist()[:2]


def test_a_clip_without_a_system_stops_sqa_score_before_anything_is_scored(
    default_export, audio, tmp_path, capsys, monkeypatch
):
    def never(*args, **kwargs):
        raise AssertionError("scored before the systems were checked")

    monkeypatch.setattr(Scorer, "score_files", never)
    monkeypatch.setattr(score_cli, "_load_scorer", never)
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copy(audio / "sysA" / "ballad_1.wav", flat / "take.wav")
    shutil.copy(audio / "sysA" / "ballad_2.wav", flat / "sys1-utt1.wav")
    out = tmp_path / "s.csv"
    assert run_score(default_export, "--by-system", "--output", out, flat, audio) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        f"sqa-score: --by-system: cannot tell the system of 1 clip(s), e.g. {flat / 'take.wav'}; put each "
        "system's clips in a folder of its own (audio/<system>/...) and give the folder above them, name "
        "them <sys>-<utt>, or give a manifest with a system_id column; nothing was scored"
    )
    assert not out.exists()


def test_sqa_score_takes_the_manifests_system_over_the_folder(default_export, audio, tmp_path):
    manifest = tmp_path / "m.csv"
    rows = [
        (audio / s / f"{song}.wav", name) for s, name in (("sysA", "old"), ("sysB", "new")) for song in SONGS
    ]
    manifest.write_text("path,system\n" + "".join(f"{path},{name}\n" for path, name in rows))
    out = tmp_path / "s.json"
    loose = [audio / "sysC" / "ballad_1.wav", audio / "sysB" / "anthem_1.wav"]
    assert run_score(default_export, "--by-system", "--output", out, manifest, *loose) == 0
    clips = json.loads(out.read_text())
    assert [r["system_id"] for r in clips] == ["old"] * 4 + ["new"] * 4 + ["sysC", "sysB"]
    assert "system" not in clips[0]  # read into system_id, not repeated
    systems = json.loads((tmp_path / "s.systems.json").read_text())
    assert sorted((r["system_id"], r["n"]) for r in systems) == [
        ("new", 4),
        ("old", 4),
        ("sysB", 1),
        ("sysC", 1),
    ]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--resamples", "0"], "--resamples must be 1 to 100000, got 0"),
        (["--resamples", "100001"], "--resamples must be 1 to 100000, got 100001"),
        (["--resamples", "10", "--no-by"], "--resamples sets the intervals of --by-system: give --by-system"),
    ],
)
def test_resamples_is_bounded_and_belongs_to_by_system(default_export, tmp_path, capsys, args, message):
    flags = ["--by-system", "--output", tmp_path / "s.csv"] if "--no-by" not in args else []
    given = [a for a in args if a != "--no-by"]
    assert run_score(default_export, *flags, *given, tmp_path / "x.wav") == 2
    assert f"sqa-score: {message}" in capsys.readouterr().err.splitlines()
