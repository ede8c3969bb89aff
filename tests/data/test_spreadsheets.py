"""Tables as spreadsheets export them: semicolons, decimal commas, a column per rater; fixes that work.

The scenario: a vocal teacher's 80 takes of 8 singers (WAV, FLAC and MP3 at mixed rates, some
stereo), rated by 3 listeners, in three forms: one row per rating with semicolons and decimal
commas, one row per take with a column per rater, one row per rating with the docs' columns.
"""

from __future__ import annotations

import json
import logging
import math
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
from sqa.training.builder import read_corpus
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
    # Read by ',', the header is one column and a decimal comma's row two fields: the separator is named.
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(semicolons, delimiter=",")
    assert str(err.value).startswith(
        f"{semicolons} line 2: 2 field(s) where the header has 1; the header holds ';' between its names: "
        "is the table read with the wrong separator? set data.corpus.delimiter=';' or leave it unset (null)"
    )
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


# Issue 57, item 2: tables are read strictly. A row of another width than the header, a number
# with a thousands separator: neither is guessed at. Excel's `sep=` first line names the separator.
def written(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


DECIMAL_COMMA_HINT = (
    '; a decimal comma must be quoted ("4,5") or written with a point (4.5), or the table written with '
    "';' between its fields"
)


def test_the_reported_unquoted_decimal_comma_row_is_an_error_naming_its_line(tmp_path):
    # Read as score 4 and system '5', the last field dropped, it trained on wrong labels with rc 0.
    manifest = written(tmp_path / "m.csv", "wav_path,score,system_id\ntake.wav,4,5,sys1\n")
    with pytest.raises(CorpusError) as err:
        read_corpus(compose_train(["data=csv", f"data.corpus.path={manifest}"]))  # as train.py reads it
    assert str(err.value) == f"{manifest} line 2: 4 field(s) where the header has 3{DECIMAL_COMMA_HINT}"
    # Both fixes the hint names read the intended row.
    for fixed in (
        'wav_path,score,system_id\ntake.wav,"4,5",sys1\n',
        "wav_path;score;system_id\ntake.wav;4,5;sys1\n",
    ):
        (clip,) = read_csv_manifest(written(tmp_path / "fixed.csv", fixed)).clips
        assert (clip.sample_id, clip.mos, clip.system_id, clip.problems) == ("take", 4.5, "sys1", ())


def test_a_short_row_is_an_error_naming_its_line_without_the_decimal_comma_hint(tmp_path):
    # Once read with system '' (its missing cells filled in empty).
    manifest = written(
        tmp_path / "m.csv", "wav_path,score,system_id\na.wav,3,s1\nb.wav,4\nc.wav,2,s2\nd.wav\n"
    )
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest)
    assert (
        str(err.value)
        == f"{manifest} line 3: 2 field(s) where the header has 3 (2 such rows, the next at line 5)"
    )


@pytest.mark.parametrize(
    ("row", "count"),
    [
        ("b.wav,4,s1", None),  # the header's count: read
        ("b.wav,4", 2),  # one fewer
        ("b.wav,4,s1,", 4),  # one more, if only an empty one
        ("b.wav,4,5,s1", 4),
    ],
)
def test_a_row_reads_only_with_exactly_the_headers_count_of_fields(tmp_path, row, count):
    for delimiter in (",", ";", "\t"):
        text = f"wav_path,score,system_id\na.wav,3,s1\n{row}\n".replace(",", delimiter)
        manifest = written(tmp_path / "m.csv", text)
        if count is None:
            assert [(c.sample_id, c.mos, c.system_id) for c in read_csv_manifest(manifest).clips] == [
                ("a", 3.0, "s1"),
                ("b", 4.0, "s1"),
            ]
            continue
        with pytest.raises(CorpusError) as err:
            read_csv_manifest(manifest)
        hint = (
            DECIMAL_COMMA_HINT if delimiter == "," else f"; a {delimiter!r} inside a cell must be quoted"
        ) * (count > 3)
        assert str(err.value) == f"{manifest} line 3: {count} field(s) where the header has 3{hint}"


def test_blank_lines_are_no_rows_and_a_quoted_cell_over_lines_counts_each(tmp_path):
    # Blank lines before the header, between rows and after them (spaces only, CRLF too).
    text = '\r\nwav_path,score,system_id\r\na.wav,3,"s\r\n1"\r\n\r\nb.wav,4,s2\r\n   \r\n\r\n'
    manifest = written(tmp_path / "m.csv", text)
    assert [(c.sample_id, c.system_id) for c in read_csv_manifest(manifest).clips] == [
        ("a", "s\r\n1"),
        ("b", "s2"),
    ]
    # A bad row's line counts every line before it: the blank ones and each line of a quoted cell.
    written(manifest, text.replace("b.wav,4,s2", "b.wav,4,5,s2"))
    with pytest.raises(
        CorpusError, match=r"m\.csv line 6: 4 field\(s\) where the header has 3; a decimal comma"
    ):
        read_csv_manifest(manifest)


THOUSANDS_ADVICE = "a thousands separator is never guessed; write {}, without a thousands separator"


@pytest.mark.parametrize("scale", [(1.0, 5.0), (0.0, 100.0), (0.0, 10000.0)])
def test_a_thousands_separator_is_refused_on_every_scale_saying_how_to_write_the_number(tmp_path, scale):
    text = (
        "wav_path,score,system_id,score_lyrics\n"
        'a.wav,"4,500",s1,3\n'
        'b.wav,"1,234.5",s1,3\n'
        'c.wav,3,s1,"1,000"\n'
        'd.wav,"4,5",s1,"0,125"\n'  # decimal commas, read as ever
        "e.wav,4_500,s1,3\n"  # Python's digit grouping, which float() reads as 4500
    )
    corpus = read_csv_manifest(written(tmp_path / "m.csv", text), score_range=scale)
    problems = {c.sample_id: c.problems for c in corpus.clips}
    assert problems == {
        "a": (f"line 2 of m.csv: score '4,500': {THOUSANDS_ADVICE.format('4500 or 4.5')}",),
        "b": (f"line 3 of m.csv: score '1,234.5': {THOUSANDS_ADVICE.format('1234.5')}",),
        "c": (f"line 4 of m.csv: score_lyrics '1,000': {THOUSANDS_ADVICE.format('1000 or 1')}",),
        "d": (),
        "e": ("line 6 of m.csv: score is not a number ('4_500')",),
    }
    assert [math.isnan(c.mos) for c in corpus.clips] == [True, True, False, False, True]
    assert (corpus.clips[3].mos, corpus.clips[3].extra_scores) == (4.5, {"lyrics": 0.125})


def test_a_semicolon_tables_thousands_separator_is_refused_and_its_decimal_commas_read(tmp_path):
    rows = ["a.wav;4,5", "b.wav;4,50", "c.wav;4,500", "d.wav;1.234,5", "e.wav;4.5"]
    text = "wav_path;score;system_id\n" + "".join(f"{row};s1\n" for row in rows)
    corpus = read_csv_manifest(written(tmp_path / "m.csv", text))
    assert [c.mos for c in corpus.clips if not c.problems] == [4.5, 4.5, 4.5]
    assert [c.problems for c in corpus.clips if c.problems] == [
        (f"line 4 of m.csv: score '4,500': {THOUSANDS_ADVICE.format('4500 or 4.5')}",),
        (f"line 5 of m.csv: score '1.234,5': {THOUSANDS_ADVICE.format('1234.5')}",),
    ]


def test_excels_sep_line_names_the_separator_and_is_no_row(tmp_path):
    # The header holds more commas than semicolons: without the sep= line it would split by ','.
    body = (
        "wav_path;score;system_id;pitch, breath, tone, diction, notes\r\n"
        "a.wav;4,5;Anna, soprano;flat, breathy, ok, fine, -\r\n"
        "b.wav;3;Ben, alto;ok, ok, ok, ok, late\r\n"
    )
    assert detect_delimiter(body) == ","
    assert detect_delimiter("sep=;\r\n" + body) == ";"
    manifest = written(tmp_path / "m.csv", "sep=;\r\n" + body)
    for corpus in (
        read_csv_manifest(manifest),
        read_with(manifest),
        read_csv_manifest(manifest, delimiter=";"),
    ):
        assert [(c.sample_id, c.mos, c.system_id, c.problems) for c in corpus.clips] == [
            ("a", 4.5, "Anna, soprano", ()),
            ("b", 3.0, "Ben, alto", ()),
        ]
    # `sep=,` and a tab's `sep=` too, in either case.
    for line, separator in (("sep=,", ","), ("SEP=\t", "\t")):
        text = f"{line}\n" + "wav_path,score,system_id\na.wav,3,s1\n".replace(",", separator)
        (clip,) = read_csv_manifest(written(tmp_path / "s.csv", text)).clips
        assert (clip.sample_id, clip.mos, clip.system_id) == ("a", 3.0, "s1")
    # A separator set otherwise, or one sqa does not read, is refused at line 1.
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest, delimiter=",")
    assert str(err.value) == (
        f"{manifest} line 1: the table's sep= line names ';' as its separator, but it is read with ','; "
        "set data.corpus.delimiter to ';' or leave it unset (null)"
    )
    with pytest.raises(
        CorpusError, match=r"line 1: the table's sep= line names '\|' as its separator, which sqa"
    ):
        read_csv_manifest(written(tmp_path / "p.csv", "sep=|\nwav_path|score|system_id\na.wav|3|s1\n"))


def test_a_sep_line_counts_in_the_line_numbers_of_errors_and_problems(tmp_path):
    text = "sep=;\nwav_path;score;system_id\na.wav;3;s1\nb.wav;4,500;s1\nc.wav;4;s1;x\n"
    manifest = written(tmp_path / "m.csv", text)
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest)
    assert (
        str(err.value)
        == f"{manifest} line 5: 4 field(s) where the header has 3; a ';' inside a cell must be quoted"
    )
    corpus = read_csv_manifest(written(manifest, text.replace(";x", "")))
    assert [c.problems for c in corpus.clips] == [
        (),
        (f"line 4 of m.csv: score '4,500': {THOUSANDS_ADVICE.format('4500 or 4.5')}",),
        (),
    ]
