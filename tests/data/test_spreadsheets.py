"""Tables as spreadsheets export them: semicolons, decimal commas, a column per rater; fixes that work.

The scenario: a vocal teacher's 80 takes of 8 singers (WAV, FLAC and MP3 at mixed rates, some
stereo), rated by 3 listeners, in three forms: one row per rating with semicolons and decimal
commas, one row per take with a column per rater, one row per rating with the docs' columns.
"""

from __future__ import annotations

import json
import logging
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.data.corpus import CorpusError
from sqa.data.readers import read_csv_manifest
from sqa.data.readers.columns import detect_delimiter
from sqa.data.validate import CorpusProblems, validate_corpus
from sqa.training.datamodule import skip_hint
from sqa.training.run import run
from tests.data.test_columns import read_with
from tests.training.test_selection import compose_train

SINGERS = [f"singer{i}" for i in range(8)]
RATERS = ["anna", "ben", "cleo"]
FORMATS = [(".wav", 16000, 1), (".flac", 44100, 2), (".mp3", 22050, 1), (".wav", 24000, 2)]


def write_takes(root: Path) -> list[tuple[str, str, list[float]]]:
    """80 takes (10 per singer) whose noise falls with the singer's skill; (file, singer, 3 ratings)."""
    rng = np.random.default_rng(0)
    takes = []
    for s, singer in enumerate(SINGERS):
        skill = 1.5 + 3.0 * s / (len(SINGERS) - 1)
        for k in range(10):
            suffix, rate, channels = FORMATS[(s + k) % len(FORMATS)]
            seconds = 0.4 + 0.05 * k
            t = np.arange(int(seconds * rate)) / rate
            voice = 0.3 * np.sin(2 * np.pi * rng.uniform(180, 400) * t * (1 + 0.01 * np.sin(6 * t)))
            noise = rng.normal(0, 0.25 * (5.0 - skill) / 3.5, t.size)
            wave = np.stack([voice + noise] * channels, axis=1).astype(np.float32)
            name = f"{singer}_take{k:02d}{suffix}"
            sf.write(root / name, wave, rate)
            # Half-point ratings about the singer's skill, each rater with a bias of their own.
            ratings = [
                float(np.clip(np.round(2 * (skill + b + rng.normal(0, 0.4))) / 2, 1, 5))
                for b in (-0.3, 0, 0.3)
            ]
            takes.append((name, singer, ratings))
    return takes


def decimal(value: float) -> str:
    """A rating as a spreadsheet with a decimal comma exports it: 4.5 -> "4,5", 4.0 -> "4"."""
    return f"{value:g}".replace(".", ",")


@pytest.fixture(scope="module")
def spreadsheets(tmp_path_factory) -> dict[str, Path]:
    """The three forms of one table of ratings, beside the audio they rate."""
    root = tmp_path_factory.mktemp("teacher")
    takes = write_takes(root)
    semicolons = ["wav_path;score;system_id;listener_id"]
    semicolons += [
        f"{f};{decimal(r)};{s};{who}" for f, s, rs in takes for who, r in zip(RATERS, rs, strict=True)
    ]
    wide = ["take,singer," + ",".join(f"rater_{who}" for who in RATERS)]
    wide += [f"{f},{s}," + ",".join(f"{r:g}" for r in rs) for f, s, rs in takes]
    long = ["wav_path,score,system_id,listener_id"]
    long += [f"{f},{r:g},{s},rater_{who}" for f, s, rs in takes for who, r in zip(RATERS, rs, strict=True)]
    forms = {"semicolons": semicolons, "wide": wide, "long": long}
    for name, lines in forms.items():
        (root / f"{name}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {name: root / f"{name}.csv" for name in forms}


def clips_of(corpus) -> list[tuple[str, str, float, str]]:
    return [(c.sample_id, c.system_id, round(c.mos, 9), str(c.path)) for c in corpus.clips]


def test_the_three_forms_read_to_the_same_clips(spreadsheets, caplog):
    caplog.set_level(logging.INFO, logger="sqa")
    long = read_csv_manifest(spreadsheets["long"])
    assert len(long.clips) == 80 and len({c.system_id for c in long.clips}) == 8
    semicolons = read_csv_manifest(spreadsheets["semicolons"])
    assert clips_of(semicolons) == clips_of(long)
    # Each clip's mean of its three raters, the decimal commas read as decimals.
    assert all(c.problems == () for c in semicolons.clips)
    first = semicolons.clips[0]
    assert set(first.ratings) == {"anna", "ben", "cleo"}
    assert first.mos == pytest.approx(sum(first.ratings.values()) / 3)
    said = [r.getMessage() for r in caplog.records if str(spreadsheets["semicolons"]) in r.getMessage()]
    assert any("read with ';' as the separator" in m for m in said)
    assert any(
        re.search(r"\d+ number\(s\) with a decimal comma read as decimals \(line \d+: '\d,5'\)", m)
        for m in said
    )
    wide = read_with(spreadsheets["wide"], "data.corpus.rater_columns='rater_*'")
    assert clips_of(wide) == clips_of(long)
    assert [c.ratings for c in wide.clips] == [c.ratings for c in long.clips]


def test_a_wide_table_without_the_option_is_told_the_setting_that_reads_it(spreadsheets):
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(spreadsheets["wide"])
    message = str(err.value)
    assert message == (
        f"{spreadsheets['wide']}: missing column(s) ['score']; found ['take', 'singer', 'rater_anna', "
        "'rater_ben', 'rater_cleo']; add them, or name the table's own: for a column per rater, "
        "\"data.corpus.rater_columns='rater_*'\"; else data.corpus.columns={score:<column>}"
    )
    # The suggestion, as a shell passes it to train.py, reads the table.
    (setting,) = shlex.split(re.search(r'"data\.corpus\.rater_columns=[^"]*"', message).group(0))
    assert len(read_with(spreadsheets["wide"], setting).clips) == 80
    # A list of columns reads it too; a pattern matching nothing, or a score column beside, is refused.
    listed = read_with(spreadsheets["wide"], "data.corpus.rater_columns=[rater_anna,rater_ben]")
    assert all(set(c.ratings) == {"rater_anna", "rater_ben"} for c in listed.clips)
    with pytest.raises(CorpusError, match=r"rater_columns names 'judge_\*', which matches no column"):
        read_csv_manifest(spreadsheets["wide"], rater_columns="judge_*")
    with pytest.raises(CorpusError, match=r"also has 'score' as score; leave rater_columns out"):
        read_csv_manifest(spreadsheets["long"], rater_columns="listener_id")


def test_the_separator_is_the_one_most_often_outside_quotes_in_the_header():
    assert detect_delimiter("a;b;c\n1,5;2;3\n") == ";"
    assert detect_delimiter("\n\na,b;c,d\n") == ","
    assert detect_delimiter('"x;y",b,c\n') == ","
    assert detect_delimiter("a\tb\tc\n") == "\t"
    assert detect_delimiter("wav_path\nx.wav\n") == ","  # one column: a tie, the comma


def test_separators_inside_quoted_column_names_never_outnumber_the_real_ones():
    # More ';' inside the quoted names than ',' between the columns, and the mirror case.
    assert detect_delimiter('"take;singer;voice",score\nx.wav,3\n') == ","
    assert detect_delimiter('"wav;path","mean;score;1-5",system\n') == ","
    assert detect_delimiter('"take,singer,voice";score\nx.wav;3\n') == ";"
    assert detect_delimiter('"wav,path";"mean,score,1-5";system\n') == ";"
    assert detect_delimiter('"a,b,c"\t"d;e;f"\tg\n') == "\t"


def test_an_explicit_separator_overrides_the_detected_one(spreadsheets):
    semicolons = spreadsheets["semicolons"]
    assert len(read_with(semicolons, "data.corpus.delimiter=';'").clips) == 80
    with pytest.raises(CorpusError, match=r"missing column\(s\) \['wav_path', 'score', 'system_id'\]"):
        read_csv_manifest(semicolons, delimiter=",")
    with pytest.raises(ValueError, match=re.escape("delimiter must be one of [',', ';', '\\t'] or null")):
        read_csv_manifest(semicolons, delimiter="|")


def test_a_wide_tables_row_without_any_rating_is_a_problem_named_with_its_line(tmp_path):
    for name in ("a", "b", "c", "d"):
        t = np.arange(8000) / 16000
        sf.write(tmp_path / f"{name}.wav", (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000)
    # Lines 3 and 4: no rating in any rater column (empty, or blanks only).
    table = "take,singer,rater_anna,rater_ben\na.wav,s1,3,4\nb.wav,s1,,\nc.wav,s2, , \nd.wav,s2,,2\n"
    (tmp_path / "wide.csv").write_text(table, encoding="utf-8")
    corpus = read_csv_manifest(tmp_path / "wide.csv", rater_columns="rater_*")
    # Kept, not dropped: each unrated row is its clip's problem, naming its line.
    assert [c.sample_id for c in corpus.clips] == ["a", "b", "c", "d"]
    problems = {c.sample_id: c.problems for c in corpus.clips}
    assert problems["a"] == problems["d"] == ()
    assert [len(problems[k]) for k in "bc"] == [1, 1]
    assert problems["b"][0].startswith("line 3 of wide.csv: ")
    assert problems["c"][0].startswith("line 4 of wide.csv: ")
    # And in the corpus's report, which stops a run before training.
    report = str(CorpusProblems(validate_corpus(corpus, 16000, 400, splits=["train"])))
    assert report.startswith("2 problem(s) in the corpus:")
    assert f"{tmp_path / 'b.wav'} [b]: line 3 of wide.csv: " in report
    assert f"{tmp_path / 'c.wav'} [c]: line 4 of wide.csv: " in report


def test_skipping_is_suggested_only_where_it_leaves_clips_to_train_on(spreadsheets, tmp_path):
    text = spreadsheets["long"].read_text(encoding="utf-8").splitlines()
    # Every score unreadable: skipping would drop every clip, so the fix is the table.
    broken = [text[0], *(re.sub(r",(\d)(\.5)?,", r",\1 pts,", line) for line in text[1:])]
    (tmp_path / "broken.csv").write_text("\n".join(broken) + "\n", encoding="utf-8")
    for take in sorted(spreadsheets["long"].parent.iterdir()):
        if take.suffix in {".wav", ".flac", ".mp3"}:
            (tmp_path / take.name).symlink_to(take)
    corpus = read_csv_manifest(tmp_path / "broken.csv")
    assert all(c.problems for c in corpus.clips)
    cfg = compose_train(["data=csv", f"data.corpus.path={tmp_path / 'broken.csv'}", "trainer.max_steps=1"])
    with pytest.raises(CorpusProblems) as err:
        run(cfg, tmp_path / "run")
    assert str(err.value).endswith(
        "(skipping them, data.on_error=skip, would leave no train or valid or test clips: correct the table)"
    )
    # One bad clip: skipping leaves the others, and says how many.
    good = read_csv_manifest(spreadsheets["long"])
    assert skip_hint(good, {good.clips[0].sample_id}, ["train"]) == (
        "(set data.on_error=skip to drop these 1 clip(s) and train on the other 79)"
    )
    train = [c for c in good.clips if c.split == "train"]
    assert skip_hint(good, {c.sample_id for c in train}, ["train"]).startswith("(skipping them")


# About 4 s each on an idle 2-core machine (15 s under load): not marked slow.
@pytest.mark.parametrize("form", ["semicolons", "wide", "long"])
def test_each_form_trains_with_the_documented_command(spreadsheets, form, tmp_path):
    option = ["data.corpus.rater_columns='rater_*'"] if form == "wide" else []
    # The guide's command for a table (`train.py data=csv data.corpus.path=...`), kept short.
    cfg = compose_train(
        [
            "data=csv",
            f"data.corpus.path={spreadsheets[form]}",
            *option,
            "trainer.max_steps=40",
            "trainer.enable_progress_bar=false",
            "bootstrap=20",
        ]
    )
    run(cfg, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text(encoding="utf-8"))
    assert (tmp_path / "export" / "model.pt").is_file()
    # A fifth of the 80 takes carved for testing, every singer among them.
    assert (metrics["avg"]["utt"]["n"], metrics["avg"]["sys"]["n"]) == (16, 8)


def test_a_choirs_takes_in_voice_folders_read_and_train_with_the_documented_command(tmp_path, caplog):
    # A choir director's export: tab-separated, decimal commas, every voice's takes named alike.
    voices = ["soprano", "alto", "tenor", "bass"]
    rng = np.random.default_rng(1)
    lines = ["Take\tSinger\tRater\tMOS"]
    for v, voice in enumerate(voices):
        for k in range(5):
            (tmp_path / voice).mkdir(exist_ok=True)
            t = np.arange(4000 + 400 * k) / 16000
            noise = rng.normal(0, 0.05 * (v + 1), t.size)
            sf.write(
                tmp_path / voice / f"take{k}.wav", 0.3 * np.sin(2 * np.pi * 220 * (v + 1) * t) + noise, 16000
            )
            lines += [
                f"{voice}/take{k}.wav\t{voice}\t{who}\t{decimal(5 - v - 0.5 * r)}"
                for r, who in enumerate(RATERS)
            ]
    choir = tmp_path / "choir.tsv"
    choir.write_text("\n".join(lines) + "\n", encoding="utf-8")
    caplog.set_level(logging.INFO, logger="sqa")
    corpus = read_csv_manifest(choir)
    assert [c.sample_id for c in corpus.clips[:6]] == [f"soprano/take{k}" for k in range(5)] + ["alto/take0"]
    assert len({c.sample_id for c in corpus.clips}) == 20
    assert (corpus.clips[5].path, corpus.clips[5].mos) == (tmp_path / "alto" / "take0.wav", 3.5)
    assert "the end of its path that tells it apart (e.g. 'alto/take0')" in caplog.text
    # The file column as the ID too: each ID is the path as written, the same file read.
    named = read_with(choir, "data.corpus.columns={sample_id:Take}")
    assert [(c.sample_id, c.path) for c in named.clips[:2]] == [
        ("soprano/take0.wav", tmp_path / "soprano" / "take0.wav"),
        ("soprano/take1.wav", tmp_path / "soprano" / "take1.wav"),
    ]
    cfg = compose_train(
        [
            "data=csv",
            f"data.corpus.path={choir}",
            "trainer.max_steps=10",
            "trainer.enable_progress_bar=false",
            "bootstrap=20",
        ]
    )
    run(cfg, tmp_path / "run")
    tested = (tmp_path / "run" / "test_split.csv").read_text(encoding="utf-8")
    assert re.search(r"(soprano|alto|tenor|bass)/take\d", tested)
