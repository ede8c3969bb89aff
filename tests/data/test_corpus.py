import csv
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.data.corpus import CorpusError, count_labels
from sqa.data.readers import read_csv_manifest, read_singmos_pro, read_vmc24
from sqa.data.validate import validate_corpus


def write_wav(path: Path, sr: int = 16000, seconds: float = 0.2) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(sr * seconds)) / sr
    sf.write(path, 0.1 * np.sin(2 * np.pi * 220 * t), sr)


def make_singmos_pro(root: Path, sr_of=lambda utt: 16000) -> Path:
    split = {
        "singmospro-p1": {
            "train": ["s1-u1", "s2-u1"],
            "valid": ["s1-u2"],
            "test": ["s1-u3", "s2-u3"],
        },
        "singmospro-p2": {"train": ["s3-u1"], "valid": ["s3-u2"], "test": ["s3-u3"]},
        "singmospro-p4": {"train": ["s4-u1"], "valid": [], "test": ["s4-u2"]},
    }
    utterance = {}
    for batch in split.values():
        for part in batch.values():
            for utt in part:
                write_wav(root / "wav" / f"{utt}.wav", sr_of(utt))
                score = {"mos": 3.5, "judges": ["a"], "scores": [3, 4]}
                if utt == "s1-u1":
                    score["melody"] = 4.0
                utterance[utt] = {
                    "sys_id": utt.split("-")[0],
                    "wav": f"wav/{utt}.wav",
                    "score": score,
                }
    (root / "info").mkdir(parents=True)
    (root / "info" / "split.json").write_text(json.dumps(split))
    (root / "info" / "score.json").write_text(json.dumps({"utterance": utterance, "system": {}}))
    return root


def test_singmos_pro_reader_assigns_domains_splits_and_test_sets(tmp_path):
    corpus = read_singmos_pro(make_singmos_pro(tmp_path), test_batches=["singmospro-p1", "singmospro-p2"])
    assert corpus.domains == ["singmospro-p1", "singmospro-p2", "singmospro-p4"]
    tests = corpus.test_sets()
    assert {k: sorted(c.sample_id for c in v) for k, v in tests.items()} == {
        "test1": ["s1-u3", "s2-u3"],
        "test2": ["s3-u3"],
    }
    # The test part of a batch that is not a test batch goes to training.
    assert {c.sample_id for c in corpus.split("train")} == {
        "s1-u1",
        "s2-u1",
        "s3-u1",
        "s4-u1",
        "s4-u2",
    }
    assert list(corpus.valid_sets()) == ["singmospro-p1", "singmospro-p2"]
    clip = next(c for c in corpus.clips if c.sample_id == "s1-u1")
    assert clip.extra_scores == {"melody": 4.0}
    assert clip.system_id == "s1" and clip.path == tmp_path / "wav" / "s1-u1.wav"


def test_singmos_pro_sample_rate_filter_keeps_16k_only(tmp_path):
    root = make_singmos_pro(tmp_path, sr_of=lambda utt: 24000 if utt.startswith("s2") else 16000)
    corpus = read_singmos_pro(root, ["singmospro-p1"], sample_rate_filter=16000)
    assert not any(c.system_id == "s2" for c in corpus.clips)
    assert len(corpus.clips) == 8


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda s, sc: sc["utterance"]["s1-u1"].pop("sys_id"), "missing key 'sys_id'"),
        (lambda s, sc: sc["utterance"]["s1-u1"]["score"].pop("mos"), "missing key 'mos'"),
        (lambda s, sc: sc.pop("utterance"), "missing key 'utterance'"),
        (lambda s, sc: s["singmospro-p1"].pop("train"), "missing key 'train'"),
        (lambda s, sc: sc["utterance"].pop("s2-u1"), "missing key 's2-u1'"),
        (lambda s, sc: sc["utterance"]["s1-u1"]["score"].update(mos="good"), "is not a number"),
    ],
)
def test_singmos_pro_errors_name_file_and_key(tmp_path, mutate, message):
    root = make_singmos_pro(tmp_path)
    split = json.loads((root / "info" / "split.json").read_text())
    score = json.loads((root / "info" / "score.json").read_text())
    mutate(split, score)
    (root / "info" / "split.json").write_text(json.dumps(split))
    (root / "info" / "score.json").write_text(json.dumps(score))
    with pytest.raises(CorpusError, match=message) as err:
        read_singmos_pro(root, ["singmospro-p1"])
    assert ".json" in str(err.value)


def test_vmc24_reader(tmp_path):
    (tmp_path / "sets").mkdir()
    ids = {
        "train": ["a-b-sys01-u1", "a-b-sys02-u1"],
        "val": ["a-b-sys01-u2"],
        "eval": ["a-b-sys02-u3"],
    }
    for name, lst in ids.items():
        (tmp_path / "sets" / f"{name}_mos_list.txt").write_text("".join(f"{i},4.0\n" for i in lst))
        for i in lst:
            write_wav(tmp_path / "wav" / f"{i}.wav")
    corpus = read_vmc24(tmp_path)
    assert [c.system_id for c in corpus.split("train")] == ["sys01", "sys02"]
    assert [c.split for c in corpus.clips] == ["train", "train", "valid", "test"]
    assert list(corpus.test_sets()) == ["eval"]
    (tmp_path / "sets" / "val_mos_list.txt").write_text("a-b-sys01-u2;4.0\n")
    with pytest.raises(CorpusError, match=r"val_mos_list.txt:1"):
        read_vmc24(tmp_path)


def test_csv_manifest_averages_listeners_and_resolves_relative_paths(tmp_path):
    write_wav(tmp_path / "audio" / "x.wav")
    write_wav(tmp_path / "audio" / "y.wav")
    (tmp_path / "m.csv").write_text(
        "wav_path,score,system_id,sample_id,listener_id,split,domain_id,score_lyrics\n"
        "audio/x.wav,4,A,x,l1,train,d2,5\n"
        "audio/x.wav,3,A,x,l2,train,d2,\n"
        "audio/y.wav,2,B,y,l1,test,d10,1\n"
    )
    corpus = read_csv_manifest(tmp_path / "m.csv")
    x = corpus.clips[0]
    assert x.mos == pytest.approx(3.5) and x.extra_scores == {"lyrics": 5.0}
    assert x.path == tmp_path / "audio" / "x.wav"
    assert corpus.domains == ["d2", "d10"]
    assert list(corpus.test_sets()) == ["test"]


def test_csv_manifest_errors(tmp_path):
    (tmp_path / "m.csv").write_text("wav_path,score,sample_id\nx.wav,3,x\n")
    with pytest.raises(CorpusError, match=r"missing column\(s\) \['system_id'\]"):
        read_csv_manifest(tmp_path / "m.csv")
    write_wav(tmp_path / "x.wav")
    # Without a split column every row is a training clip, unless default_split says otherwise.
    (tmp_path / "m.csv").write_text("wav_path,score,system_id,sample_id\nx.wav,3,A,x\n")
    assert read_csv_manifest(tmp_path / "m.csv").clips[0].split == "train"
    assert read_csv_manifest(tmp_path / "m.csv", default_split="test").clips[0].split == "test"
    # An empty split cell: the error's fix (default_split=train) reads it.
    (tmp_path / "m.csv").write_text("wav_path,score,system_id,sample_id,split\nx.wav,3,A,x,\n")
    with pytest.raises(
        CorpusError, match=r"m.csv:2: empty split.*; fill it in or set data.corpus.default_split=train$"
    ):
        read_csv_manifest(tmp_path / "m.csv")
    assert read_csv_manifest(tmp_path / "m.csv", default_split="train").clips[0].split == "train"


def test_singmos_pro_keeps_per_judge_ratings(tmp_path, caplog):
    root = make_singmos_pro(tmp_path)
    score = json.loads((root / "info" / "score.json").read_text())
    score["utterance"]["s1-u1"]["score"].update(judges=["a", "b", "a"], scores=[3, 4, 5])
    (root / "info" / "score.json").write_text(json.dumps(score))
    corpus = read_singmos_pro(root, ["singmospro-p1"])
    clips = {c.sample_id: c for c in corpus.clips}
    # A judge listed twice gets the mean of its ratings; the MOS is still the published one.
    assert clips["s1-u1"].ratings == {"a": 4.0, "b": 4.0} and clips["s1-u1"].mos == 3.5
    # The other entries list one judge for two scores: kept out, with a warning naming the file.
    assert clips["s2-u1"].ratings == {} and clips["s2-u1"].mos == 3.5
    assert "score.json" in caplog.text and "different lengths" in caplog.text


def test_csv_manifest_keeps_listener_ratings(tmp_path):
    write_wav(tmp_path / "x.wav")
    (tmp_path / "m.csv").write_text(
        "wav_path,score,system_id,sample_id,listener_id,split\n"
        "x.wav,4,A,x,l1,train\nx.wav,2,A,x,l2,train\nx.wav,3,A,x,l2,train\n"
    )
    clip = read_csv_manifest(tmp_path / "m.csv").clips[0]
    # l2's two replicates count once: (4 + (2 + 3) / 2) / 2.
    assert clip.mos == pytest.approx(3.25) and clip.ratings == {"l1": 4.0, "l2": 2.5}


def test_replicates_are_averaged_per_listener_first_or_pooled(tmp_path):
    write_wav(tmp_path / "x.wav")
    write_wav(tmp_path / "y.wav")
    # Clip x: listener a rates 80 and 60 (a replicate), b 30, c 50; one unnamed row of 90.
    # Clip y: no listener column values, so every row is its own listener.
    (tmp_path / "m.csv").write_text(
        "wav_path,score,system_id,sample_id,listener_id,split\n"
        "x.wav,80,A,x,a,train\nx.wav,60,A,x,a,train\nx.wav,30,A,x,b,train\n"
        "x.wav,50,A,x,c,train\nx.wav,90,A,x,,train\ny.wav,10,A,y,,train\ny.wav,20,A,y,,train\n"
    )
    per_listener = {c.sample_id: c for c in read_csv_manifest(tmp_path / "m.csv", score_range=[0, 100]).clips}
    pooled = {
        c.sample_id: c.mos
        for c in read_csv_manifest(tmp_path / "m.csv", score_range=[0, 100], replicates="pooled").clips
    }
    # Per listener: a's mean 70, b 30, c 50, the unnamed row 90 -> (70 + 30 + 50 + 90) / 4 = 60.
    assert per_listener["x"].mos == pytest.approx(60.0)
    # Pooled: (80 + 60 + 30 + 50 + 90) / 5 = 62.
    assert pooled["x"] == pytest.approx(62.0)
    assert per_listener["y"].mos == pooled["y"] == pytest.approx(15.0)
    assert per_listener["x"].ratings == {"a": 70.0, "b": 30.0, "c": 50.0}
    with pytest.raises(ValueError, match="replicates must be one of"):
        read_csv_manifest(tmp_path / "m.csv", replicates="mean")


def test_each_row_without_a_listener_counts_as_its_own_listener(tmp_path):
    """Rule: a row with an empty listener_id is one listener on its own (per_listener replicates).

    Neighbour: all of a clip's unnamed rows merged into one anonymous listener (or dropped); with
    two or more unnamed rows of different scores beside named listeners the MOS differs.
    """
    write_wav(tmp_path / "x.wav")
    # l1 rates 5; l2 rates 2 and 3 (a replicate, mean 2.5); three unnamed rows rate 1, 4 and 1.
    (tmp_path / "m.csv").write_text(
        "wav_path,score,system_id,sample_id,listener_id,split\n"
        "x.wav,1,A,x,,train\nx.wav,5,A,x,l1,train\nx.wav,2,A,x,l2,train\n"
        "x.wav,4,A,x,,train\nx.wav,3,A,x,l2,train\nx.wav,1,A,x,,train\n"
    )
    corpus = read_csv_manifest(tmp_path / "m.csv")
    (clip,) = corpus.clips
    # Five listeners: (5 + 2.5 + 1 + 4 + 1) / 5 = 2.7. Merged unnamed rows would give
    # (5 + 2.5 + 2) / 3 = 3.1667, dropped ones (5 + 2.5) / 2 = 3.75, pooled rows 16 / 6 = 2.6667.
    assert clip.mos == pytest.approx(2.7, abs=1e-12)
    # Only named listeners have ratings, so only they count as the corpus's listeners.
    assert clip.ratings == {"l1": 5.0, "l2": 2.5}
    assert count_labels(corpus.clips).listeners == 2
    pooled = read_csv_manifest(tmp_path / "m.csv", replicates="pooled").clips[0]
    assert pooled.mos == pytest.approx(16 / 6, abs=1e-12) and pooled.ratings == clip.ratings


def test_references_and_anchors_come_from_a_column_or_the_config(tmp_path):
    for name in ("r", "a", "s", "t"):
        write_wav(tmp_path / f"{name}.wav")
    (tmp_path / "m.csv").write_text(
        "wav_path,score,system_id,sample_id,split,role\n"
        "r.wav,98,ref,r,test,Reference\na.wav,20,lp35,a,test,\ns.wav,60,S,s,test,\nt.wav,70,T,t,valid,anchor\n"
    )
    corpus = read_csv_manifest(tmp_path / "m.csv", score_range=[0, 100], anchor_systems=["lp35"])
    roles = {c.sample_id: c.role for c in corpus.clips}
    assert roles == {"r": "reference", "a": "anchor", "s": None, "t": "anchor"}
    # Test sets put them on their own rows; validation leaves them out.
    assert {name: [c.sample_id for c in clips] for name, clips in corpus.test_sets().items()} == {
        "anchor": ["a"],
        "reference": ["r"],
        "test": ["s"],
    }
    assert corpus.valid_sets() == {}
    (tmp_path / "bad.csv").write_text(
        "wav_path,score,system_id,sample_id,split,role\nr.wav,98,ref,r,test,hidden\n"
    )
    with pytest.raises(CorpusError, match=r"bad.csv:2: role 'hidden' of sample 'r'"):
        read_csv_manifest(tmp_path / "bad.csv", score_range=[0, 100])


MANIFEST = "wav_path,score,system_id,sample_id,split\nx.wav,4,Sängerin,clé,train\n"


def test_csv_manifest_with_a_byte_order_mark_reads_its_first_column(tmp_path):
    write_wav(tmp_path / "x.wav")
    (tmp_path / "m.csv").write_bytes(b"\xef\xbb\xbf" + MANIFEST.encode("utf-8"))
    clip = read_csv_manifest(tmp_path / "m.csv").clips[0]
    assert clip.path == tmp_path / "x.wav" and clip.sample_id == "clé" and clip.system_id == "Sängerin"
    # The same with CRLF line ends (a spreadsheet's export).
    (tmp_path / "m.csv").write_bytes(b"\xef\xbb\xbf" + MANIFEST.replace("\n", "\r\n").encode("utf-8"))
    assert read_csv_manifest(tmp_path / "m.csv").clips[0].sample_id == "clé"


def test_latin1_manifest_is_named_and_reads_with_its_encoding(tmp_path):
    write_wav(tmp_path / "x.wav")
    (tmp_path / "m.csv").write_bytes(MANIFEST.encode("latin-1"))
    # 'ä' is byte 0xe4 in Latin-1, on line 2; the error names the file, byte, line and the fix.
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(tmp_path / "m.csv")
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'm.csv'}: not UTF-8 text (byte 0xe4 on line 2)")
    assert "data.corpus.encoding" in message
    clip = read_csv_manifest(tmp_path / "m.csv", encoding="latin-1").clips[0]
    assert clip.sample_id == "clé" and clip.system_id == "Sängerin"
    with pytest.raises(CorpusError, match="unknown encoding 'klingon'"):
        read_csv_manifest(tmp_path / "m.csv", encoding="klingon")


def test_metadata_files_with_a_bom_or_another_encoding(tmp_path):
    root = make_singmos_pro(tmp_path / "pro")
    split = root / "info" / "split.json"
    split.write_bytes(b"\xef\xbb\xbf" + split.read_bytes())
    assert len(read_singmos_pro(root, ["singmospro-p1"]).clips) == 10
    (tmp_path / "sets").mkdir()
    for name in ("train", "val", "eval"):
        (tmp_path / "sets" / f"{name}_mos_list.txt").write_text(f"a-b-sys01-{name},4.0\n")
    (tmp_path / "sets" / "val_mos_list.txt").write_bytes("a-b-sys\xe9-u1,4.0\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"val_mos_list.txt: not UTF-8 text \(byte 0xe9 on line 1\)"):
        read_vmc24(tmp_path)


def test_score_range_is_the_corpus_scale_and_is_checked(tmp_path):
    write_wav(tmp_path / "x.wav")
    (tmp_path / "m.csv").write_text(MANIFEST)
    assert read_csv_manifest(tmp_path / "m.csv").score_range == (1.0, 5.0)
    assert read_csv_manifest(tmp_path / "m.csv", score_range=[0, 10]).score_range == (0.0, 10.0)
    pro = read_singmos_pro(make_singmos_pro(tmp_path / "p"), ["singmospro-p1"], score_range=(0, 100))
    assert pro.score_range == (0, 100)
    for bad in ([5, 1], [1], ["low", "high"]):
        with pytest.raises(ValueError, match="score_range must be"):
            read_csv_manifest(tmp_path / "m.csv", score_range=bad)


def test_every_recorded_reader_name_resolves_to_its_reader():
    from hydra.utils import get_method

    from sqa.data import readers, small_table, synthetic
    from sqa.data.readers import CORPUS_READERS

    found = {name: get_method(name) for name in sorted(CORPUS_READERS)}
    assert found == {
        "sqa.data.readers.read_csv_manifest": readers.read_csv_manifest,
        "sqa.data.readers.read_singmos_pro": readers.read_singmos_pro,
        "sqa.data.readers.read_vmc24": readers.read_vmc24,
        "sqa.data.readers.read_webmushra": readers.read_webmushra,
        "sqa.data.synthetic.load_synthetic": synthetic.load_synthetic,
        "sqa.data.synthetic.load_synthetic_mushra": synthetic.load_synthetic_mushra,
        "sqa.data.small_table.load_small_table": small_table.load_small_table,
    }
    with pytest.raises(AttributeError, match="read_nothing"):
        from sqa.data import corpus

        corpus.read_nothing  # noqa: B018


def test_metadata_errors_name_the_file_the_byte_and_the_line(tmp_path):
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(tmp_path / "none.csv")
    assert str(err.value) == f"{tmp_path / 'none.csv'}: file not found"
    (tmp_path / "m.csv").write_bytes(b"wav_path,score,system_id,sample_id\nx.wav,3,A,x\ny.wav,3,B,\xc3\xa9\n")
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(tmp_path / "m.csv", encoding="ascii")
    assert str(err.value) == (
        f"{tmp_path / 'm.csv'}: not ascii text (byte 0xc3 on line 3); "
        "save it as UTF-8 or set data.corpus.encoding (e.g. latin-1)"
    )
    # Other metadata files have no encoding setting: the message ends with the fix.
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "train_mos_list.txt").write_bytes(b"a-b-s\xe9-u1,4.0\n")
    with pytest.raises(CorpusError) as err:
        read_vmc24(tmp_path)
    assert str(err.value).endswith(
        "train_mos_list.txt: not UTF-8 text (byte 0xe9 on line 1); save it as UTF-8"
    )
    root = make_singmos_pro(tmp_path / "pro")
    (root / "info" / "score.json").write_text("{'utterance': 1}")
    with pytest.raises(CorpusError, match=r"score.json: not valid JSON \(Expecting property name"):
        read_singmos_pro(root, ["singmospro-p1"])


def test_a_csv_cell_over_the_field_limit_names_the_file_and_line(tmp_path):
    limit = csv.field_size_limit()  # csv's default, 131072: sqa leaves it as it is
    path = tmp_path / "m.csv"
    header = "wav_path,score,system_id,sample_id\n"
    # A cell of exactly the limit is read; this one is a name no file can have, a clip problem.
    path.write_text(f"{header}a.wav,3,A,a\n{'x' * limit},3,A,b\n", encoding="utf-8")
    corpus = read_csv_manifest(path)
    assert [len(c.path.name) for c in corpus.clips] == [5, limit]
    problems = [p for p in validate_corpus(corpus, 16000, 400) if p.sample_id == "b"]
    assert [p.what for p in problems] == ["audio file not found"]
    over = f"a field longer than {limit} characters (is a quote left open?)"
    path.write_text(f"{header}a.wav,3,A,a\n{'x' * (limit + 1)},3,A,b\n", encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(path)
    assert str(err.value) == f"{path} line 3: {over}"
    # In the header, or a quote left open on line 2 that swallows the lines after it.
    path.write_text(f"wav_path,{'s' * (limit + 1)}\n", encoding="utf-8")
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(path)
    assert str(err.value) == f"{path} line 1: {over}"
    # The line is where the cell passes the limit, not where the quote opened: the hint says why.
    swallowed = "a.wav,3,A,a\n" + "".join(f"x{i}.wav,3,A,x{i}\n" for i in range(limit // 10))
    path.write_text(f'{header}"{swallowed}', encoding="utf-8")
    line = 2 + swallowed[:limit].count("\n")
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(path)
    assert str(err.value) == f"{path} line {line}: {over}"


def test_score_range_needs_low_strictly_below_high(tmp_path):
    (tmp_path / "m.csv").write_text(MANIFEST)
    assert read_csv_manifest(tmp_path / "m.csv", score_range=[2.9, 3]).score_range == (2.9, 3.0)
    with pytest.raises(ValueError) as err:
        read_csv_manifest(tmp_path / "m.csv", score_range=[3, 3])
    assert str(err.value) == "score_range must be [low, high] with low < high, got [3, 3]"
    for bad in (None, [1, 2, 3]):
        with pytest.raises(ValueError) as err:
            read_vmc24(tmp_path, score_range=bad)
        assert str(err.value) == f"score_range must be [low, high], got {bad!r}"


def rewrite(root: Path, split=None, score=None) -> None:
    """Apply `split(split_json)` and `score(score_json)` to a SingMOS-Pro layout's metadata."""
    for name, change in (("split.json", split), ("score.json", score)):
        if change:
            data = json.loads((root / "info" / name).read_text())
            change(data)
            (root / "info" / name).write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("split", "score", "message"),
    [
        (lambda s: s.clear(), None, r"split.json: expected a non-empty object of annotation batches$"),
        (
            None,
            lambda s: s.update(utterance=[]),
            r"score.json: expected an object at \['utterance'\], found list$",
        ),
        (lambda s: s.update({"singmospro-p1": ["s1-u1"]}), None, r"at \['singmospro-p1'\], found list$"),
        (
            lambda s: s["singmospro-p1"].update(train="s1-u1"),
            None,
            r"split.json: expected a list of utterance IDs at \['singmospro-p1'\]\['train'\]$",
        ),
        (
            None,
            lambda s: s["utterance"].update({"s1-u1": "wav/s1-u1.wav"}),
            r"score.json: expected an object at \['utterance'\]\['s1-u1'\], found str$",
        ),
        (
            None,
            lambda s: s["utterance"]["s1-u1"]["score"].update(pitch="high"),
            r"score.json: \['utterance'\]\['s1-u1'\]\['score'\]\['pitch'\] is not a number \('high'\)$",
        ),
        (
            None,
            lambda s: s["utterance"]["s1-u1"].pop("wav"),
            r"score.json: missing key 'wav' at \['utterance'\]\['s1-u1'\]$",
        ),
        (
            None,
            lambda s: s["utterance"]["s1-u1"].pop("sys_id"),
            r"score.json: missing key 'sys_id' at \['utterance'\]\['s1-u1'\]$",
        ),
        (None, lambda s: s.pop("utterance"), r"score.json: missing key 'utterance' at the top level$"),
        (
            None,
            lambda s: s["utterance"]["s1-u1"]["score"].pop("mos"),
            r"score.json: missing key 'mos' at \['utterance'\]\['s1-u1'\]\['score'\]$",
        ),
        (
            None,
            lambda s: s["utterance"]["s1-u1"]["score"].update(mos="good"),
            r"score.json: \['utterance'\]\['s1-u1'\]\['score'\]\['mos'\] is not a number \('good'\)$",
        ),
    ],
)
def test_singmos_pro_structure_errors_say_where(tmp_path, split, score, message):
    root = make_singmos_pro(tmp_path)
    rewrite(root, split, score)
    with pytest.raises(CorpusError, match=message):
        read_singmos_pro(root, ["singmospro-p1"])


def test_singmos_pro_test_batches_batch_order_aliases_and_systems(tmp_path):
    root = make_singmos_pro(tmp_path)

    def rename(split: dict) -> None:
        split["singmospro-p10"] = split.pop("singmospro-p4")
        # A batch may list validation clips under two names: both are read.
        split["singmospro-p2"]["dev"] = split["singmospro-p2"].pop("test")

    rewrite(root, rename)
    with pytest.raises(CorpusError) as err:
        read_singmos_pro(root, ["singmospro-p1", "singmospro-p4"])
    assert str(err.value) == (
        f"{root / 'info' / 'split.json'}: missing key 'singmospro-p4' (a test batch) at the top level"
    )
    corpus = read_singmos_pro(root, ["singmospro-p10", "singmospro-p1"])
    # p2 before p10; the k-th named test batch is test set test{k}.
    assert corpus.domains == ["singmospro-p1", "singmospro-p2", "singmospro-p10"]
    assert {k: [c.sample_id for c in v] for k, v in corpus.test_sets().items()} == {
        "test1": ["s4-u2"],
        "test2": ["s1-u3", "s2-u3"],
    }
    assert sorted(c.sample_id for c in corpus.split("valid") if c.domain == "singmospro-p2") == [
        "s3-u2",
        "s3-u3",
    ]
    assert all(c.test_set is None for c in corpus.clips if c.split != "test")
    # Clips come batch by batch in that order too.
    assert list(dict.fromkeys(c.domain for c in corpus.clips)) == corpus.domains
    assert corpus.systems is None
    (root / "info" / "sys_info.json").write_text(json.dumps({"s1": {}, "s2": {}, "s3": {}, "s4": {}}))
    assert read_singmos_pro(root, ["singmospro-p1"]).systems == frozenset({"s1", "s2", "s3", "s4"})


def test_singmos_pro_extra_scores_and_judge_lists(tmp_path, caplog):
    root = make_singmos_pro(tmp_path)

    def scores(data: dict) -> None:
        utt = data["utterance"]
        for entry in utt.values():
            entry["score"] = {"mos": 3.0, "judges": ["a", "b"], "scores": [2, 4]}
        # Lists and objects beside the MOS are not extra scores; numbers are.
        utt["s1-u1"]["score"].update(melody="4.5", notes=[1, 2], detail={"x": 1})
        utt["s2-u1"]["score"].pop("scores")  # judges without scores: no ratings, no warning
        utt["s3-u1"]["score"].pop("judges")
        utt["s1-u2"]["score"]["scores"] = [2, "?"]
        utt["s3-u2"]["score"]["judges"] = "ab"
        utt["s2-u3"]["score"]["scores"] = "4"

    rewrite(root, score=scores)
    clips = {c.sample_id: c for c in read_singmos_pro(root, ["singmospro-p1"]).clips}
    assert clips["s1-u1"].extra_scores == {"melody": 4.5} and clips["s1-u3"].extra_scores == {}
    assert clips["s1-u1"].ratings == {"a": 2.0, "b": 4.0}
    assert clips["s2-u1"].ratings == clips["s3-u1"].ratings == {}
    assert clips["s1-u2"].ratings == clips["s3-u2"].ratings == clips["s2-u3"].ratings == {}
    assert clips["s3-u2"].extra_scores == clips["s2-u3"].extra_scores == {}
    assert [r.getMessage() for r in caplog.records] == [
        f"{root / 'info' / 'score.json'}: 3 utterance(s) have 'judges' and 'scores' lists of different "
        "lengths or with non-numbers (first: 's1-u2'); their per-judge ratings are ignored"
    ]


def test_vmc24_lines_ids_and_sample_rates(tmp_path):
    (tmp_path / "sets").mkdir()
    lists = {
        "train": "a-b-sys01-u1.wav,4.5\n\n  a-b-sys02-u1,2\n",
        "val": "a-b-sys01-u2,3\n",
        "eval": "a-b-sys02-u3,1.5\nx-y-sys03,2.5\n",
    }
    for name, text in lists.items():
        (tmp_path / "sets" / f"{name}_mos_list.txt").write_text(text)
    write_wav(tmp_path / "wav" / "a-b-sys01-u1.wav", sr=24000)
    write_wav(tmp_path / "wav" / "a-b-sys02-u1.wav", sr=16000)
    corpus = read_vmc24(tmp_path)
    clips = {c.sample_id: c for c in corpus.clips}
    assert list(clips) == ["a-b-sys01-u1", "a-b-sys02-u1", "a-b-sys01-u2", "a-b-sys02-u3", "x-y-sys03"]
    assert [c.mos for c in clips.values()] == [4.5, 2.0, 3.0, 1.5, 2.5]
    # An ID of exactly three fields has its system in the third.
    assert clips["x-y-sys03"].system_id == "sys03"
    assert clips["a-b-sys01-u1"].path == tmp_path / "wav" / "a-b-sys01-u1.wav"
    assert {c.domain for c in corpus.clips} == {"vmc24"} and corpus.domains == ["vmc24"]
    assert [c.test_set for c in clips.values()] == [None, None, None, "eval", "eval"]
    assert corpus.score_range == (1.0, 5.0)
    assert read_vmc24(tmp_path, score_range=(0, 10)).score_range == (0.0, 10.0)
    # The 24 kHz clip is left out by the 16 kHz filter, the 16 kHz one kept (and clips without a file).
    assert [c.sample_id for c in read_vmc24(tmp_path, sample_rate_filter=16000).clips] == list(clips)[1:]
    (tmp_path / "sets" / "val_mos_list.txt").write_text("a-b-sys01-u2,3\na-b,2\n")
    with pytest.raises(CorpusError) as err:
        read_vmc24(tmp_path)
    where = tmp_path / "sets" / "val_mos_list.txt"
    assert str(err.value) == f"{where}:2: ID 'a-b' has no system field (third '-' field)"
    (tmp_path / "sets" / "val_mos_list.txt").write_text("a-b-sys01-u2,3,4\n")
    with pytest.raises(CorpusError) as err:
        read_vmc24(tmp_path)
    assert str(err.value) == f"{where}:1: expected '<id>,<score>', found 'a-b-sys01-u2,3,4'"
    (tmp_path / "sets" / "val_mos_list.txt").write_text("a-b-sys01-u2,3\na-b-c-d,good\n")
    with pytest.raises(CorpusError, match=r"val_mos_list.txt: line 2 score is not a number \('good'\)$"):
        read_vmc24(tmp_path)


HEADER = "wav_path,score,system_id,sample_id,split,domain_id,test_set,role\n"


@pytest.mark.parametrize("key", ["wav_path", "system_id", "domain_id", "split", "test_set", "role"])
def test_rows_of_one_sample_must_agree(tmp_path, key):
    first = {"wav_path": "x.wav", "system_id": "A", "domain_id": "d", "split": "test", "test_set": "t"}
    first["role"] = "anchor"
    other = {**first, key: {"split": "train", "role": "reference"}.get(key, "other")}
    row = "{wav_path},3,{system_id},x,{split},{domain_id},{test_set},{role}\n"
    (tmp_path / "m.csv").write_text(HEADER + row.format(**first) + row.format(**other) + row.format(**first))
    with pytest.raises(CorpusError) as err:
        read_csv_manifest(tmp_path / "m.csv")
    assert str(err.value) == f"{tmp_path / 'm.csv'}:3: {key} of sample 'x' differs from line 2"


def test_csv_split_column_wins_over_default_split_and_test_sets(tmp_path):
    (tmp_path / "m.csv").write_text(
        HEADER + "a.wav,3,A,a,test,,,\nb.wav,3,A,b,,,,\nc.wav,3,A,c,test,,t2,\nd.wav,3,A,d,train,,t3,\n"
    )
    corpus = read_csv_manifest(tmp_path / "m.csv", default_split="valid")
    clips = {c.sample_id: c for c in corpus.clips}
    assert {k: c.split for k, c in clips.items()} == {"a": "test", "b": "valid", "c": "test", "d": "train"}
    # An empty test_set is `test`; a non-test row has none, whatever its column says.
    assert {k: c.test_set for k, c in clips.items()} == {"a": "test", "b": None, "c": "t2", "d": None}
    # No domain column value: the default domain.
    assert corpus.domains == ["default"] and clips["a"].domain == "default"
    # Domains in natural order: numbers before names, p2 before p10.
    rows = "".join(f"{d}.wav,3,A,{d},train,{d},,\n" for d in ("px", "p10", "p2", "10"))
    (tmp_path / "domains.csv").write_text(HEADER + rows)
    assert read_csv_manifest(tmp_path / "domains.csv").domains == ["10", "p2", "p10", "px"]
    for name in ("avg", " AVG "):
        (tmp_path / "avg.csv").write_text(HEADER + f"a.wav,3,A,a,test,,{name},\n")
        with pytest.raises(CorpusError) as err:
            read_csv_manifest(tmp_path / "avg.csv")
        assert str(err.value) == (
            f"{tmp_path / 'avg.csv'}:2: test_set {name!r} is reserved for the average over the test sets; "
            "rename it"
        )


def test_csv_extra_scores_ratings_and_score_errors(tmp_path):
    (tmp_path / "m.csv").write_text(
        "wav_path,score,system_id,sample_id,listener_id,score_pitch,score_breath\n"
        "x.wav,4,A,x,l1,5,\nx.wav,2,A,x,,2,\nx.wav,3,A,x,l2,,\n"
    )
    clip = read_csv_manifest(tmp_path / "m.csv").clips[0]
    # pitch: the two rows that have one (the third row's cell is empty); breath: no value, no score.
    assert clip.extra_scores == {"pitch": 3.5}
    assert clip.ratings == {"l1": 4.0, "l2": 3.0} and clip.mos == pytest.approx(3.0)
    # Cells that are not numbers are problems of their clips, for the corpus's one report.
    (tmp_path / "loud.csv").write_text("wav_path,score,system_id,sample_id,score_pitch\nx.wav,4,A,x,loud\n")
    clip = read_csv_manifest(tmp_path / "loud.csv").clips[0]
    assert clip.problems == ("line 2 of loud.csv: score_pitch is not a number ('loud')",)
    assert clip.mos == 4.0 and clip.extra_scores == {}
    (tmp_path / "bad.csv").write_text("wav_path,score,system_id,sample_id\nx.wav,4,A,x\nx.wav,n/a,A,x\n")
    clip = read_csv_manifest(tmp_path / "bad.csv").clips[0]
    assert clip.problems == ("line 3 of bad.csv: score is not a number ('n/a')",)


def test_roles_from_both_sources_column_first_then_reference_over_anchor(tmp_path):
    (tmp_path / "m.csv").write_text(
        HEADER + "a.wav,3,R,a,test,,,anchor\nb.wav,3,R,b,test,,,\nc.wav,3,Q,c,test,,, REFERENCE \n"
    )
    corpus = read_csv_manifest(tmp_path / "m.csv", reference_systems=["R"], anchor_systems=["R", "Q"])
    assert {c.sample_id: c.role for c in corpus.clips} == {"a": "anchor", "b": "reference", "c": "reference"}


def test_csv_paths_relative_to_the_root_the_csv_or_absolute(tmp_path, monkeypatch):
    real = tmp_path / "real"
    write_wav(real / "audio" / "x.wav", sr=24000)
    write_wav(tmp_path / "abs.wav")
    (real / "m.csv").write_text(
        f"wav_path,score,system_id,sample_id\naudio/x.wav,3,A,x\n{tmp_path / 'abs.wav'},3,A,y\n"
    )
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    # A relative manifest against `root` (a symlinked folder), not the working directory.
    corpus = read_csv_manifest("m.csv", root=tmp_path / "link")
    assert [c.path for c in corpus.clips] == [tmp_path / "link" / "audio" / "x.wav", tmp_path / "abs.wav"]
    assert all(c.path.is_file() for c in corpus.clips)
    monkeypatch.chdir(tmp_path)
    assert read_csv_manifest("real/m.csv").clips[0].path == Path("real/audio/x.wav")
    assert (
        read_csv_manifest(real / "m.csv", root=tmp_path / "elsewhere").clips[0].path
        == real / "audio" / "x.wav"
    )
    assert [c.sample_id for c in read_csv_manifest("real/m.csv", sample_rate_filter=16000).clips] == ["y"]


def write_export_corpus(tmp_path: Path) -> tuple[Path, dict]:
    """An export folder whose config records a CSV corpus in `<export>/corpus` by a relative root."""
    export = tmp_path / "export"
    (export / "corpus").mkdir(parents=True)
    (export / "corpus" / "m.csv").write_text("wav_path,score,system_id,sample_id\nx.wav,3,A,x\n")
    return export / "config.yaml", {
        "_target_": "sqa.data.readers.read_csv_manifest",
        "path": "m.csv",
        "root": "corpus",
    }


def test_recorded_corpus_resolves_against_the_export_or_the_given_root(tmp_path, monkeypatch):
    from sqa.data.readers import recorded_corpus

    where, spec = write_export_corpus(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert recorded_corpus(spec, where).clips[0].path == tmp_path / "export" / "corpus" / "x.wav"
    monkeypatch.chdir(tmp_path)
    assert recorded_corpus(spec, Path("export/config.yaml")).clips[0].path == Path("export/corpus/x.wav")
    # The user's root wins over the recorded one; old reader names still resolve.
    (tmp_path / "moved").mkdir()
    (tmp_path / "moved" / "m.csv").write_text("wav_path,score,system_id,sample_id\ny.wav,3,B,y\n")
    old = {**spec, "_target_": "sqa.data.corpus.read_csv_manifest"}
    assert recorded_corpus(old, where, root=tmp_path / "moved").clips[0].sample_id == "y"
    # A plain list argument is fine; the manifest by an absolute path, without a root.
    absolute = {
        "_target_": spec["_target_"],
        "path": str(tmp_path / "moved" / "m.csv"),
        "score_range": [0.5, 10],
    }
    assert recorded_corpus(absolute, where).score_range == (0.5, 10.0)


def test_recorded_corpus_refuses_readers_arguments_and_paths(tmp_path):
    from sqa.data.readers import CORPUS_READERS, recorded_corpus

    where, spec = write_export_corpus(tmp_path)
    move = "; if the corpus has moved, name its folder: eval.py export=... data.corpus.root=DIR"
    for bad in ({"path": "m.csv"}, ["m.csv"]):
        with pytest.raises(CorpusError) as err:
            recorded_corpus(bad, where)
        assert str(err.value) == f"{where}: the recorded corpus has no reader (`_target_`)"
    with pytest.raises(CorpusError) as err:
        recorded_corpus({**spec, "_target_": "os.system"}, where)
    assert str(err.value) == f"{where}: refusing corpus reader 'os.system'; allowed: {sorted(CORPUS_READERS)}"
    # Interpolations at the start, in the middle, at the end and nested in lists; nested targets.
    for value in ("${oc.env:HOME}", "a${x}b", "m.csv${", ["ok", ["${x}"]], {"_target_": "os.system"}):
        with pytest.raises(CorpusError) as err:
            recorded_corpus({**spec, "encoding": value}, where)
        assert str(err.value) == f"{where}: corpus argument 'encoding' is not a plain value ({value!r})"
    (tmp_path / "export" / "corpus" / "m.txt").write_text("x")
    for path in ("m.txt", "gone.csv"):
        with pytest.raises(CorpusError) as err:
            recorded_corpus({**spec, "path": path}, where)
        full = where.parent / "corpus" / path
        assert str(err.value) == f"{where}: the recorded corpus path {str(full)!r} is not a .csv file{move}"
    vmc = {"_target_": "sqa.data.readers.read_vmc24", "root": "gone", "sample_rate_filter": None}
    with pytest.raises(CorpusError) as err:
        recorded_corpus(vmc, where)
    assert (
        str(err.value)
        == f"{where}: the recorded corpus folder {str(where.parent / 'gone')!r} does not exist{move}"
    )


def test_a_recorded_synthetic_corpus_is_never_generated(tmp_path):
    from sqa.data.readers import recorded_corpus

    (tmp_path / "export" / "corpus").mkdir(parents=True)
    spec = {"_target_": "sqa.data.synthetic.load_synthetic_mushra", "root": "corpus", "allow_generate": True}
    with pytest.raises(CorpusError, match=r"no synthetic corpus there \(allow_generate is false\)"):
        recorded_corpus(spec, tmp_path / "export" / "config.yaml")
    assert list((tmp_path / "export" / "corpus").iterdir()) == []
