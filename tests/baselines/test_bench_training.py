"""What sqa-bench reads of an export's training data: the recorded source, one recording, one label."""

from __future__ import annotations

import math
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from sqa.baselines.bench_config import BenchPredictor
from sqa.baselines.bench_training import (
    BenchError,
    Training,
    _same_audio,
    _same_label,
    recorded_source,
    split_by_record,
    training,
)
from sqa.data.corpus import Clip, Corpus


def export_recording(export: Path, folder: Path, data: dict) -> Path:
    """A copy at `folder` of the export `export`, its config.yaml recording `data` as its training data."""
    shutil.copytree(export, folder)
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    config["data"] = data
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    return folder


@pytest.mark.parametrize(
    ("root", "path", "expected"),
    [
        ("../corpus", "m.csv", "corpus/m.csv"),  # a manifest, relative to the recorded root
        ("../corpus", None, "corpus"),  # a corpus folder
        (None, "elsewhere/m.csv", "cwd/elsewhere/m.csv"),  # older exports: the path alone
        (None, None, None),  # nothing recorded
    ],
)
def test_the_recorded_source_is_the_path_under_the_root_relative_to_the_export(
    default_export, tmp_path, monkeypatch, root, path, expected
):
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    spec = {"_target_": "sqa.data.readers.read_csv_manifest", **({"root": root} if root else {})}
    corpus = {**spec, **({"path": path} if path else {})}
    export = export_recording(default_export, tmp_path / "export", {"corpus": corpus})
    source = recorded_source(export)
    assert source == (None if expected is None else (tmp_path / expected).resolve())


def test_one_recording_is_the_same_file_or_the_same_bytes_as_they_are_now(tmp_path):
    rng = np.random.default_rng(0)
    first = rng.uniform(-0.5, 0.5, 800).astype(np.float32)
    sf.write(tmp_path / "a.wav", first, 16000, subtype="FLOAT")
    shutil.copy(tmp_path / "a.wav", tmp_path / "copy.wav")
    assert _same_audio(tmp_path / "a.wav", tmp_path / "a.wav")
    assert _same_audio(tmp_path / "a.wav", tmp_path / "copy.wav")
    # The copy rewritten with other samples of the same size: another recording, though its bytes
    # were read before (the digest is kept per size and modification time).
    stamp = (tmp_path / "copy.wav").stat().st_mtime_ns
    sf.write(tmp_path / "copy.wav", -first, 16000, subtype="FLOAT")
    os.utime(tmp_path / "copy.wav", ns=(stamp + 1000, stamp + 1000))
    assert (tmp_path / "copy.wav").stat().st_size == (tmp_path / "a.wav").stat().st_size
    assert not _same_audio(tmp_path / "a.wav", tmp_path / "copy.wav")
    assert not _same_audio(tmp_path / "copy.wav", tmp_path / "a.wav")
    # And the first rewritten to match it: one recording again.
    stamp = (tmp_path / "a.wav").stat().st_mtime_ns
    sf.write(tmp_path / "a.wav", -first, 16000, subtype="FLOAT")
    os.utime(tmp_path / "a.wav", ns=(stamp + 1000, stamp + 1000))
    assert _same_audio(tmp_path / "a.wav", tmp_path / "copy.wav")
    assert not _same_audio(tmp_path / "a.wav", tmp_path / "missing.wav")


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (3.0, 3.0, True),
        (math.nan, math.nan, True),
        (math.nan, 3.0, False),
        (3.0, math.nan, False),
        (3.0, 4.0, False),
    ],
)
def test_labels_are_the_same_when_equal_or_both_missing(a, b, same):
    assert _same_label(a, b) is same


def test_an_export_whose_corpus_has_its_own_test_split_keeps_it_and_a_bad_split_file_is_named(
    default_export, tmp_path
):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    rows = ["wav_path,score,system_id,sample_id,split"]
    for k, split in enumerate(("train", "train", "valid", "test")):
        sf.write(corpus / f"c{k}.wav", np.full(800, 0.1 * (k + 1), np.float32), 16000)
        rows.append(f"c{k}.wav,{k + 1},s{k},c{k},{split}")
    (corpus / "m.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    spec = {"_target_": "sqa.data.readers.read_csv_manifest", "root": "../corpus", "path": "m.csv"}
    data = {"corpus": spec, "test_split_csv": "test_split.csv"}
    export = export_recording(default_export, tmp_path / "export", data)
    # The split file a run writes names the test clips; the corpus's own test split is what counts.
    (export / "test_split.csv").write_text("sample_id\nc3\n", encoding="utf-8")
    record = training(BenchPredictor("own", export=export))
    assert {i: c.split for i, c in record.clips.items()} == {
        "c0": "train",
        "c1": "train",
        "c2": "valid",
        "c3": "test",
    }
    # Without its own test split, the file names the test clips; one that is no training clip is
    # an error naming the file.
    rows[-1] = rows[-1].replace(",test", ",train")
    (corpus / "m.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert training(BenchPredictor("own", export=export)).clips["c3"].split == "test"
    # The run's carved validation clips likewise: a test clip among them names the file.
    (export / "valid_split.csv").write_text("sample_id\nc3\n", encoding="utf-8")
    with pytest.raises(BenchError, match=f"{export / 'valid_split.csv'}: "):
        training(BenchPredictor("own", export=export))
    (export / "valid_split.csv").unlink()
    (export / "test_split.csv").write_text("sample_id\nc2\n", encoding="utf-8")
    with pytest.raises(BenchError, match=f"{export / 'test_split.csv'}: 1 listed test clip"):
        training(BenchPredictor("own", export=export))


def recorded_clips(tmp_path: Path) -> list[Clip]:
    """Four clips as an export records them: training, validation, a test clip and a test reference."""
    kinds = [
        ("train", None, None),
        ("valid", None, None),
        ("test", "main", None),
        ("test", "refs", "reference"),
    ]
    clips = []
    for k, (split, test_set, role) in enumerate(kinds):
        path = tmp_path / f"c{k}.wav"
        sf.write(path, np.full(800, 0.1 * (k + 1), np.float32), 16000)
        clips.append(Clip(f"c{k}", path, 1.0 + k, "s", "d", split, test_set, role=role))
    return clips


def test_a_table_without_splits_takes_each_clips_split_test_set_and_role_from_its_record(tmp_path):
    recorded = recorded_clips(tmp_path)
    record = Training("tiny", None, {c.sample_id: c for c in recorded})
    table = Corpus([replace(c, split="test", test_set="test", role=None) for c in recorded], ["d"])
    split, notes = split_by_record(table, "table", [record])
    assert [(c.split, c.test_set, c.role) for c in split.clips] == [
        (c.split, c.test_set, c.role) for c in recorded
    ]
    assert notes == [
        "table has no training or validation clips (a table without a split column): split as tiny "
        "recorded it, its 2 test clips those eval.py tests, beside 1 validation and 1 training clips"
    ]


@pytest.mark.parametrize("kept", [("train", "test"), ("valid", "test"), ("train", "valid", "test")])
def test_a_table_with_training_or_validation_clips_keeps_its_own_split(tmp_path, kept):
    recorded = recorded_clips(tmp_path)
    record = Training("tiny", None, {c.sample_id: c for c in recorded})
    table = Corpus([c for c in recorded if c.split in kept], ["d"])
    assert split_by_record(table, "table", [record]) == (table, [])
