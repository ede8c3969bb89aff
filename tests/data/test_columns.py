"""A user's own table: its column names recognised or mapped, sample IDs derived, bad cells reported."""

from __future__ import annotations

import csv
import json
import logging
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from hydra.utils import instantiate

from sqa.data.corpus import CorpusError
from sqa.data.readers import read_csv_manifest, recorded_corpus
from sqa.data.small_table import MANIFEST, generate
from sqa.data.validate import CorpusProblems
from sqa.training.datamodule import MOSDataModule
from sqa.training.evaluation import evaluate
from sqa.training.run import run
from tests.training.test_eval import compose_eval
from tests.training.test_selection import compose_train


def tone(path: Path, hz: float = 220.0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(3200) / 16000
    sf.write(path, 0.2 * np.sin(2 * np.pi * hz * t), 16000)


def table(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def suggested_columns(message: str, **columns: str) -> str:
    """The `data.corpus.columns=...` setting `message` suggests, as Hydra gets it from a shell.

    Its <placeholders> are filled in from `columns`.
    """
    setting = re.search(r"\"data\.corpus\.columns=[^\"]*\"|data\.corpus\.columns=\S+", message).group(0)
    for name, column in columns.items():
        setting = setting.replace(f"<{name}>", column)
    (word,) = shlex.split(setting)
    return word


def read_with(path: Path, *overrides: str):
    """The corpus `train.py data=csv data.corpus.path=path *overrides` reads."""
    return instantiate(compose_train(["data=csv", f"data.corpus.path={path}", *overrides]).data.corpus)


def test_common_spellings_are_recognised_and_said_in_one_line(tmp_path, caplog):
    for name in ("a", "b"):
        tone(tmp_path / "audio" / f"{name}.wav")
    manifest = table(
        tmp_path / "m.csv",
        "Filename,MOS,model,comment\naudio/a.wav,3,s1,ok\naudio/b.wav,4,s2,\naudio/a.wav,4,s1,\n",
    )
    caplog.set_level(logging.INFO, logger="sqa")
    corpus = read_csv_manifest(manifest)
    # The file's rows are one clip's ratings; its ID is the file's name.
    assert [(c.sample_id, c.mos, c.system_id, c.path) for c in corpus.clips] == [
        ("a", 3.5, "s1", tmp_path / "audio" / "a.wav"),
        ("b", 4.0, "s2", tmp_path / "audio" / "b.wav"),
    ]
    assert [r.getMessage() for r in caplog.records] == [
        f"{manifest}: recognised columns 'Filename' as wav_path, 'MOS' as score, 'model' as system_id; "
        "sample_id derived from each file's name without its extension; columns left unread: 'comment' "
        "(data.corpus.columns names the columns otherwise)"
    ]
    # sqa's own names: nothing is assumed, nothing said.
    caplog.clear()
    read_csv_manifest(table(tmp_path / "own.csv", "wav_path,score,system_id,sample_id\naudio/a.wav,3,s,a\n"))
    assert not caplog.records


def test_a_mapping_names_any_columns_and_a_wrong_one_is_refused(tmp_path):
    tone(tmp_path / "x.wav")
    manifest = table(
        tmp_path / "m.csv", "clip,quality,condition,id,rater\nx.wav,2,s1,u1,r1\nx.wav,4,s1,u1,r2\n"
    )
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest)
    assert str(err.value) == (
        f"{manifest}: missing column(s) ['wav_path', 'score', 'system_id']; found "
        "['clip', 'quality', 'condition', 'id', 'rater']; add them, or name the table's own: "
        '"data.corpus.columns={wav_path:<column>,score:<column>,system_id:<column>}"'
    )
    mapping = "data.corpus.columns={wav_path:clip,score:quality,system_id:condition,sample_id:id}"
    corpus = read_with(manifest, mapping)
    (clip,) = corpus.clips
    assert (clip.sample_id, clip.mos, clip.system_id, clip.ratings) == (
        "u1",
        3.0,
        "s1",
        {"r1": 2.0, "r2": 4.0},
    )
    # The error's own setting, its placeholders filled in, reads the table too.
    filled = suggested_columns(str(err.value), column="clip")
    filled = filled.replace("score:clip", "score:quality").replace("system_id:clip", "system_id:condition")
    assert read_with(manifest, filled).clips[0].mos == 3.0
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest, columns={"wav_path": "clip", "mos": "quality"})
    assert str(err.value) == (
        f"{manifest}: data.corpus.columns names 'mos', which is not a column of sqa's (wav_path, score, "
        "system_id, sample_id, listener_id, domain_id, split, test_set, role, song_id, score_<name>)"
    )
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest, columns={"score": "Quality"})
    assert str(err.value) == (
        f"{manifest}: data.corpus.columns maps score to 'Quality', which is not a column of the table; "
        "its columns: ['clip', 'quality', 'condition', 'id', 'rater']"
    )
    # A mapped extra score dimension.
    extra = table(tmp_path / "e.csv", "wav_path,score,system_id,sample_id,lyr\nx.wav,3,s,x,4\n")
    assert read_csv_manifest(extra, columns={"score_lyrics": "lyr"}).clips[0].extra_scores == {"lyrics": 4.0}


def test_columns_given_as_a_string_or_a_non_name_are_refused_in_one_line(tmp_path):
    tone(tmp_path / "x.wav")
    manifest = table(tmp_path / "m.csv", "wav_path,mos,system_id\nx.wav,3,s\n")
    # What `data.corpus.columns=mos` on a command line gives: a string where a mapping belongs
    # (train.py says the CorpusError in one line, `sqa.training.builder`).
    assert compose_train(["data=csv", "data.corpus.columns=mos"]).data.corpus.columns == "mos"
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest, columns="mos")
    assert str(err.value) == (
        f"{manifest}: data.corpus.columns must map sqa's column names to the table's, got 'mos'; "
        "e.g. data.corpus.columns={score:mos}"
    )
    # The suggested setting reads the table.
    assert read_with(manifest, suggested_columns(str(err.value))).clips[0].mos == 3.0
    for value, shown in ((["mos"], "['mos']"), (3, "3"), (None, "None")):
        with pytest.raises(
            CorpusError, match=re.escape(f"columns.score must name one column of the table, got {shown}")
        ):
            read_csv_manifest(manifest, columns={"score": value})


def test_one_column_for_two_of_sqas_is_refused_but_sample_id_may_copy_another(tmp_path):
    tone(tmp_path / "x.wav")
    manifest = table(tmp_path / "m.csv", "file,mos,system\nx.wav,3,s\n")
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest, columns={"score": "mos", "score_lyrics": "mos"})
    assert str(err.value) == (
        f"{manifest}: data.corpus.columns maps both score and score_lyrics to column 'mos'; a column is read "
        "as one of sqa's (sample_id alone may copy another's)"
    )
    (clip,) = read_csv_manifest(manifest, columns={"wav_path": "file", "sample_id": "file"}).clips
    assert (clip.sample_id, clip.path, clip.mos) == ("x.wav", tmp_path / "x.wav", 3.0)


def test_a_score_std_column_is_the_ratings_spread_not_a_dimension_unless_named(tmp_path, caplog):
    tone(tmp_path / "x.wav")
    manifest = table(
        tmp_path / "m.csv", "wav_path,score,system_id,sample_id,score_std,score_lyrics\nx.wav,3,s,x,0.5,4\n"
    )
    caplog.set_level(logging.INFO, logger="sqa")
    (clip,) = read_csv_manifest(manifest).clips
    assert clip.extra_scores == {"lyrics": 4.0}
    assert "'score_std' left unread (a statistic of the ratings, not a score dimension)" in caplog.text
    # Named, it is a dimension like any other.
    (clip,) = read_csv_manifest(manifest, columns={"score_std": "score_std"}).clips
    assert clip.extra_scores == {"std": 0.5, "lyrics": 4.0}


def test_an_optional_song_column_names_each_clips_song(tmp_path):
    for name in ("a", "b", "c"):
        tone(tmp_path / f"{name}.wav")
    header = "wav_path,score,system_id,sample_id,song_id\n"
    manifest = table(
        tmp_path / "m.csv", header + "a.wav,3,s1,a,ode\na.wav,4,s1,a,ode\nb.wav,2,s2,b,ode\nc.wav,4,s2,c,\n"
    )
    # An empty cell is no song, as a corpus without the column has none.
    assert [(c.sample_id, c.song) for c in read_csv_manifest(manifest).clips] == [
        ("a", "ode"),
        ("b", "ode"),
        ("c", None),
    ]
    no_column = table(tmp_path / "plain.csv", "wav_path,score,system_id,sample_id\na.wav,3,s1,a\n")
    assert read_csv_manifest(no_column).clips[0].song is None
    # A table's `Song` column is recognised, and a mapping names any other.
    spelled = table(tmp_path / "spelled.csv", "wav_path,score,system_id,Song,piece\nb.wav,2,s2,ode,x\n")
    assert read_csv_manifest(spelled).clips[0].song == "ode"
    assert read_with(spelled, "data.corpus.columns={song_id:piece}").clips[0].song == "x"
    # One clip's rows must agree on its song, as on its system.
    clash = table(tmp_path / "clash.csv", header + "a.wav,3,s1,a,ode\na.wav,4,s1,a,hymn\n")
    with pytest.raises(CorpusError, match="clash.csv:3: song_id of sample 'a' differs from line 2"):
        read_csv_manifest(clash)


def test_two_candidates_for_a_column_are_an_error_whose_fix_reads_the_table(tmp_path):
    tone(tmp_path / "x.wav")
    manifest = table(tmp_path / "m.csv", "file,mos,rating,system\nx.wav,3,1,s\n")
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest)
    assert str(err.value) == (
        f"{manifest}: columns 'mos' and 'rating' could both be score; name the one to use: "
        "data.corpus.columns={score:mos}"
    )
    assert read_with(manifest, suggested_columns(str(err.value))).clips[0].mos == 3.0
    assert read_with(manifest, "data.corpus.columns={score:rating}").clips[0].mos == 1.0
    # sqa's own name wins over a recognised spelling, without an error.
    own = table(tmp_path / "own.csv", "wav_path,file,score,mos,system_id\nx.wav,y.wav,3,1,s\n")
    assert [(c.path.name, c.mos) for c in read_csv_manifest(own).clips] == [("x.wav", 3.0)]
    # A column name that needs quoting is quoted for Hydra and the shell, and the setting reads.
    spaced = table(tmp_path / "spaced.csv", "file,Mean Score,mean-score,system\nx.wav,3,1,s\n")
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(spaced)
    assert str(err.value).endswith(
        "could both be score; name the one to use: \"data.corpus.columns={score:'Mean Score'}\""
    )
    assert read_with(spaced, suggested_columns(str(err.value))).clips[0].mos == 3.0


def test_derived_sample_ids_are_names_unless_names_clash_then_path_ends(tmp_path, caplog):
    for file in ("x/a.wav", "y/a.wav", "x/b.wav", "y/z/c.wav", "w/z/c.wav"):
        tone(tmp_path / file)
    caplog.set_level(logging.INFO, logger="sqa")
    # Names that differ stay the IDs they always were, folders or not (pinned splits keep reading).
    names = table(tmp_path / "names.csv", "filename,mos,model\nx/a.wav,3,s\nx/b.wav,4,s\ny/z/c.wav,2,s\n")
    assert [c.sample_id for c in read_csv_manifest(names).clips] == ["a", "b", "c"]
    assert "sample_id derived from each file's name without its extension" in caplog.text
    # Clashing names: those files' IDs are their paths' ends, as long as they must be; others keep names.
    folders = table(tmp_path / "m.csv", "filename,mos,model\nx/a.wav,3,s\ny/a.wav,4,s\nx/b.wav,5,s\n")
    assert [(c.sample_id, c.path) for c in read_csv_manifest(folders).clips] == [
        ("x/a", tmp_path / "x" / "a.wav"),
        ("y/a", tmp_path / "y" / "a.wav"),
        ("b", tmp_path / "x" / "b.wav"),
    ]
    assert (
        "or, for the 2 files whose names clash, the end of its path that tells it apart (e.g. 'x/a')"
        in caplog.text
    )
    deeper = table(tmp_path / "deep.csv", "filename,mos,model\ny/z/c.wav,3,s\nw/z/c.wav,4,s\nx/a.wav,5,s\n")
    assert [c.sample_id for c in read_csv_manifest(deeper).clips] == ["y/z/c", "w/z/c", "a"]
    # One file written two ways is one clip, its rows its ratings; an absolute path is the same file.
    twice = table(
        tmp_path / "twice.csv",
        f"filename,mos,model\nx/a.wav,3,s\n{tmp_path}/x/a.wav,5,s\ny/a.wav,1,s\ny/../x/a.wav,4,s\n",
    )
    assert [(c.sample_id, c.path, c.mos) for c in read_csv_manifest(twice).clips] == [
        ("x/a", tmp_path / "x" / "a.wav", 4.0),
        ("y/a", tmp_path / "y" / "a.wav", 1.0),
    ]
    # The same table read twice, rows in another order: the same ID for each file.
    shuffled = table(tmp_path / "shuffled.csv", "filename,mos,model\nx/b.wav,5,s\ny/a.wav,4,s\nx/a.wav,3,s\n")
    assert {c.sample_id: c.mos for c in read_csv_manifest(shuffled).clips} == {
        "b": 5.0,
        "y/a": 4.0,
        "x/a": 3.0,
    }


def test_files_told_apart_by_their_extension_alone_need_an_id_and_the_fix_reads(tmp_path):
    tone(tmp_path / "x" / "a.wav")
    tone(tmp_path / "x" / "a.flac")
    manifest = table(tmp_path / "m.csv", "filename,mos,model\nx/a.wav,3,s\nx/a.flac,4,s\n")
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(manifest)
    assert str(err.value) == (
        f"{manifest}: the table has no sample_id column, and files 'x/a.wav' and 'x/a.flac' differ only in "
        "their extension; add a sample_id column, or take each file's path as written as its ID: "
        "data.corpus.columns={sample_id:filename}"
    )
    # The suggested fix reads the table as it is: the file column is both the ID and the file.
    assert [(c.sample_id, c.path) for c in read_with(manifest, suggested_columns(str(err.value))).clips] == [
        ("x/a.wav", tmp_path / "x" / "a.wav"),
        ("x/a.flac", tmp_path / "x" / "a.flac"),
    ]
    # As does a sample_id column.
    ids = table(tmp_path / "ids.csv", "filename,mos,model,sample_id\nx/a.wav,3,s,xa\nx/a.flac,4,s,xf\n")
    assert [c.sample_id for c in read_csv_manifest(ids).clips] == ["xa", "xf"]


def test_the_column_mapped_as_sample_id_is_the_file_column_only_where_there_is_no_other(tmp_path, caplog):
    for name in ("a", "b"):
        tone(tmp_path / f"{name}.wav")
    caplog.set_level(logging.INFO, logger="sqa")
    manifest = table(tmp_path / "m.csv", "path,mos,singer\na.wav,3,s1\nb.wav,4,s2\n")
    corpus = read_with(manifest, "data.corpus.columns={sample_id:path}")
    assert [(c.sample_id, c.path, c.mos) for c in corpus.clips] == [
        ("a.wav", tmp_path / "a.wav", 3.0),
        ("b.wav", tmp_path / "b.wav", 4.0),
    ]
    assert "recognised columns 'path' as wav_path" in caplog.text
    # A column that is no spelling of a file column stays sample_id alone: wav_path is missing.
    keyed = table(tmp_path / "k.csv", "key,mos,singer\na.wav,3,s1\n")
    with pytest.raises(CorpusError, match=re.escape("missing column(s) ['wav_path']")) as err:
        read_csv_manifest(keyed, columns={"sample_id": "key"})
    # Its fix, filled in beside the sample_id, reads: one column, both fields.
    fix = suggested_columns(str(err.value), column="key").replace("{", "{sample_id:key,")
    assert [(c.sample_id, c.path) for c in read_with(keyed, fix).clips] == [("a.wav", tmp_path / "a.wav")]


def test_one_file_under_two_sample_ids_is_warned_naming_both(tmp_path, caplog):
    tone(tmp_path / "a.wav")
    tone(tmp_path / "b.wav")
    manifest = table(
        tmp_path / "m.csv", "wav_path,score,system_id,sample_id\na.wav,3,s,u1\na.wav,4,s,u2\nb.wav,4,s,u3\n"
    )
    corpus = read_csv_manifest(manifest)
    assert [c.sample_id for c in corpus.clips] == ["u1", "u2", "u3"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        f"{manifest}: 1 audio file(s) appear under more than one sample ID: {str(tmp_path / 'a.wav')!r} as "
        "'u1', 'u2'; such a file is several clips, rated apart, that can land in different splits (give it "
        "one sample_id to pool its ratings)"
    ]


def test_every_bad_cell_joins_the_one_report_and_skip_drops_those_clips(tmp_path):
    rows = ["wav_path,score,system_id,sample_id,score_pitch"]
    for i in range(12):
        tone(tmp_path / f"c{i}.wav", 200 + 20 * i)
        rows.append(f"c{i}.wav,{1 + i % 5},s{i % 3},c{i},")
    rows[3] = "c2.wav,,s2,c2,"
    rows[5] = "c4.wav,n/a,s1,c4,"
    rows[7] = "c6.wav,3,s0,c6,loud"
    rows.append("missing.wav,3,s0,gone,")
    manifest = table(tmp_path / "m.csv", "\n".join(rows) + "\n")
    corpus = read_csv_manifest(manifest, default_split="train")
    with pytest.raises(CorpusProblems) as err:
        MOSDataModule(corpus, valid_share=0.2, test_share=0.2)
    problems = {(p.sample_id, p.what) for p in err.value.problems}
    assert problems == {
        ("c2", "line 4 of m.csv: score is not a number ('')"),
        ("c4", "line 6 of m.csv: score is not a number ('n/a')"),
        ("c6", "line 8 of m.csv: score_pitch is not a number ('loud')"),
        ("gone", "audio file not found"),
    }
    assert str(err.value).startswith("4 problem(s) in the corpus:\n")
    assert f"{tmp_path / 'c2.wav'} [c2]: line 4 of m.csv: score is not a number ('')" in str(err.value)
    kept = MOSDataModule(corpus, valid_share=0.2, test_share=0.2, on_error="skip").corpus
    assert len(kept.clips) == 9 and not {"c2", "c4", "c6", "gone"} & {c.sample_id for c in kept.clips}


def test_a_recorded_mapping_is_read_back_and_only_plain_names_are_accepted(tmp_path):
    tone(tmp_path / "export" / "corpus" / "x.wav")
    table(tmp_path / "export" / "corpus" / "m.csv", "clip,quality,condition\nx.wav,3,s\n")
    where = tmp_path / "export" / "config.yaml"
    spec = {
        "_target_": "sqa.data.readers.read_csv_manifest",
        "path": "m.csv",
        "root": "corpus",
        "columns": {"wav_path": "clip", "score": "quality", "system_id": "condition"},
    }
    assert [(c.sample_id, c.mos) for c in recorded_corpus(spec, where).clips] == [("x", 3.0)]
    for columns in ({"_target_": "os.system"}, {"score": "${oc.env:HOME}"}, {"score": {"_target_": "x"}}):
        with pytest.raises(CorpusError, match="corpus argument 'columns' is not a plain value"):
            recorded_corpus({**spec, "columns": columns}, where)


def user_table(folder: Path) -> Path:
    """A 60-clip table of six systems as a user writes it: `filename,mos,model`, no split."""
    generate(folder / "corpus", seed=0, clips=60)
    with (folder / "corpus" / MANIFEST).open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    path = folder / "corpus" / "mine.csv"
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["filename", "mos", "model"])
        writer.writerows([r["wav_path"], r["score"], r["system_id"]] for r in rows)
    return path


SHORT = [
    "data.num_workers=0",
    "data.batch_size=8",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "early_stopping_patience=null",
    "bootstrap=0",
]


@pytest.mark.slow  # a second Python process or a training (over 10 s)
def test_a_users_60_clip_table_trains_as_written_and_with_one_mapping(tmp_path):
    manifest = user_table(tmp_path)
    assert manifest.read_text(encoding="utf-8").splitlines()[0] == "filename,mos,model"
    assert len({c.system_id for c in read_csv_manifest(manifest).clips}) == 6
    # As written: recognised, no option at all.
    run(compose_train(["data=csv", f"data.corpus.path={manifest}", *SHORT]), tmp_path / "a")
    info = json.loads((tmp_path / "a" / "run_info.json").read_text())
    assert info["corpus_clips"] == 60 and info["splits"]["test/test"]["systems"] == 6
    # Renamed beyond recognition: one mapping option, recorded in the export and read back by eval.py.
    text = manifest.read_text(encoding="utf-8").replace("filename,mos,model", "clip,quality,condition", 1)
    renamed = table(manifest.with_name("renamed.csv"), text)
    mapping = "data.corpus.columns={wav_path:clip,score:quality,system_id:condition}"
    run(compose_train(["data=csv", f"data.corpus.path={renamed}", mapping, *SHORT]), tmp_path / "b")
    config = yaml.safe_load((tmp_path / "b" / "export" / "config.yaml").read_text())
    assert config["data"]["corpus"]["columns"] == {
        "wav_path": "clip",
        "score": "quality",
        "system_id": "condition",
    }
    again = evaluate(compose_eval([f"export={tmp_path / 'b' / 'export'}"]), tmp_path / "eval")
    assert (
        again["test"]["utt"]["n"]
        == json.loads((tmp_path / "b" / "metrics.json").read_text())["test"]["utt"]["n"]
    )


def test_a_mapped_column_is_never_recognised_again_for_another_column(tmp_path):
    for name in ("a", "b"):
        tone(tmp_path / f"{name}.wav")
    # `file` is a spelling of wav_path, mapped here to sample_id: `path` alone is the wav_path.
    manifest = table(tmp_path / "m.csv", "file,path,score,system_id\nu1,a.wav,3,s1\nu2,b.wav,4,s2\n")
    corpus = read_with(manifest, "data.corpus.columns={sample_id:file}")
    assert [(c.sample_id, c.path, c.mos) for c in corpus.clips] == [
        ("u1", tmp_path / "a.wav", 3.0),
        ("u2", tmp_path / "b.wav", 4.0),
    ]
    # `judge` is a spelling of listener_id, mapped here to system_id: the rows name no listener
    # (no ratings by listener), and the system is not taken for a listener who rated twice.
    judged = table(tmp_path / "j.csv", "wav_path,score,judge\na.wav,2,s1\na.wav,4,s1\nb.wav,5,s2\n")
    corpus = read_with(judged, "data.corpus.columns={system_id:judge}")
    assert [(c.system_id, c.mos, dict(c.ratings)) for c in corpus.clips] == [("s1", 3.0, {}), ("s2", 5.0, {})]
