"""The corpus `sqa-baseline` reads from its command line: sources, default locations, rate filters, scales."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.baselines import corpora
from sqa.data.corpus import CorpusError
from tests.data.test_corpus import make_singmos_pro
from tests.data.test_splits import write_manifest


def args(corpus: str, **given) -> argparse.Namespace:
    """`sqa-baseline`'s parsed corpus options, its defaults where not given."""
    defaults = {
        "root": None,
        "manifest": None,
        "seed": 0,
        "clips_per_system": 14,
        "sample_rate_filter": None,
        "score_range": None,
    }
    return argparse.Namespace(corpus=corpus, **{**defaults, **given})


def test_singmos_pro_keeps_16k_clips_unless_a_rate_or_0_is_given(tmp_path):
    # Two clips of system s2 are stored at 24 kHz, the other eight at 16 kHz.
    root = make_singmos_pro(tmp_path, sr_of=lambda utt: 24000 if utt.startswith("s2") else 16000)
    # The release's third test batch, which sqa-baseline scores too, with no clip of its own.
    split = json.loads((root / "info" / "split.json").read_text())
    split["singmospro-p3"] = {"train": [], "valid": [], "test": []}
    (root / "info" / "split.json").write_text(json.dumps(split))
    assert len(corpora.read_corpus(args("singmos_pro", root=root)).clips) == 8
    assert len(corpora.read_corpus(args("singmos_pro", root=root, sample_rate_filter=0)).clips) == 10
    only = corpora.read_corpus(args("singmos_pro", root=root, sample_rate_filter=24000))
    assert {clip.system_id for clip in only.clips} == {"s2"} and len(only.clips) == 2
    assert corpora.read_corpus(args("singmos_pro", root=root, score_range=[0.0, 10.0])).score_range == (
        0.0,
        10.0,
    )


def test_a_csv_manifest_keeps_every_rate_and_takes_the_scale_given(tmp_path):
    manifest = write_manifest(tmp_path, {"A": 2, "B": 2}, splits=None)
    corpus = corpora.read_corpus(args("csv", manifest=manifest))
    assert len(corpus.clips) == 4 and corpus.score_range == (1.0, 5.0)
    assert {clip.split for clip in corpus.clips} == {"test"}  # no split column: all test clips
    scaled = corpora.read_corpus(args("csv", manifest=manifest, score_range=[0.0, 10.0]))
    assert scaled.score_range == (0.0, 10.0)
    # A rate asked for is kept alone: one clip stored at 24 kHz.
    sf.write(tmp_path / "C-u00.wav", np.zeros(2400), 24000)
    with manifest.open("a") as fh:
        fh.write("C-u00.wav,3,C,C-u00\n")
    assert len(corpora.read_corpus(args("csv", manifest=manifest)).clips) == 5
    only = corpora.read_corpus(args("csv", manifest=manifest, sample_rate_filter=24000))
    assert [clip.sample_id for clip in only.clips] == ["C-u00"]


@pytest.mark.parametrize(
    ("corpus", "message"),
    [
        ("csv", "--corpus csv needs --manifest FILE"),
        ("singmos_pro", "--corpus singmos_pro needs --root DIR"),
        ("singmos_vmc24", "--corpus singmos_vmc24 needs --root DIR"),
    ],
)
def test_a_missing_location_is_named(corpus, message):
    with pytest.raises(CorpusError) as error:
        corpora.read_corpus(args(corpus))
    assert str(error.value) == message


@pytest.mark.parametrize(
    ("corpus", "loader", "folder"),
    [
        ("synthetic", "load_synthetic", "synthetic-seed3-clips5"),
        ("synthetic_mushra", "load_synthetic_mushra", "synthetic-mushra-seed3-clips5"),
    ],
)
def test_a_synthetic_corpus_lies_where_a_training_run_puts_it_unless_a_root_is_given(
    tmp_path, monkeypatch, corpus, loader, folder
):
    calls = []
    monkeypatch.setattr(corpora, loader, lambda root, **kw: calls.append((root, kw)))
    monkeypatch.setenv("SQA_DATA_DIR", str(tmp_path))
    corpora.read_corpus(args(corpus, seed=3, clips_per_system=5))
    corpora.read_corpus(args(corpus, seed=3, clips_per_system=5, root=tmp_path / "mine"))
    monkeypatch.delenv("SQA_DATA_DIR")
    corpora.read_corpus(args(corpus, seed=3, clips_per_system=5, sample_rate_filter=16000))
    expected = {"seed": 3, "clips_per_system": 5}
    filtered = dict(expected)
    if corpus == "synthetic":
        expected["sample_rate_filter"], filtered["sample_rate_filter"] = None, 16000
    # Without SQA_DATA_DIR, under data/ of the working directory, as conf/data/synthetic.yaml says.
    assert calls == [
        (tmp_path / folder, expected),
        (tmp_path / "mine", expected),
        (Path("data") / folder, filtered),
    ]


def test_vmc24_reads_every_rate_on_the_scale_given(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(corpora, "read_vmc24", lambda root, **kw: calls.append((root, kw)))
    corpora.read_corpus(args("singmos_vmc24", root=tmp_path))
    corpora.read_corpus(
        args("singmos_vmc24", root=tmp_path, sample_rate_filter=16000, score_range=[0.0, 1.0])
    )
    assert calls == [
        (tmp_path, {"sample_rate_filter": None, "score_range": (1.0, 5.0)}),
        (tmp_path, {"sample_rate_filter": 16000, "score_range": [0.0, 1.0]}),
    ]
