"""Property-based fuzzing: readers and the audio loader fail only with their own clear errors."""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sqa.data.audio import AudioError, load_audio
from sqa.data.corpus import CorpusError
from sqa.data.readers import read_csv_manifest, read_singmos_pro, read_vmc24

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True) | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)
keys = st.sampled_from(
    ["singmospro-p1", "train", "valid", "test", "utterance", "sys_id", "wav", "score", "mos", "u1", "x"]
)
structured = st.recursive(
    st.none() | st.floats(allow_nan=True) | st.integers(0, 5) | st.sampled_from(["u1", "wav/u1.wav", "s1"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(keys, children, max_size=4),
    max_leaves=15,
)


@FUZZ
@given(split=st.one_of(json_values, structured), score=st.one_of(json_values, structured))
def test_singmos_pro_reader_raises_only_corpus_errors(split, score):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "info").mkdir()
        (root / "wav").mkdir()
        sf.write(root / "wav" / "u1.wav", np.full(800, 0.1), 16000)
        (root / "info" / "split.json").write_text(json.dumps(split))
        (root / "info" / "score.json").write_text(json.dumps(score))
        try:
            corpus = read_singmos_pro(root, test_batches=[])
        except CorpusError as err:
            assert str(root) in str(err)
        else:
            assert all(isinstance(c.mos, float) for c in corpus.clips)


@FUZZ
@given(text=st.text(alphabet=string.printable, max_size=300))
def test_csv_and_vmc24_readers_raise_only_corpus_errors(text):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        manifest = root / "m.csv"
        manifest.write_text("wav_path,score,system_id,sample_id,split\n" + text)
        try:
            read_csv_manifest(manifest)
        except CorpusError as err:
            assert "m.csv" in str(err)
        (root / "sets").mkdir()
        for name in ("train", "val", "eval"):
            (root / "sets" / f"{name}_mos_list.txt").write_text(text)
        try:
            read_vmc24(root)
        except CorpusError as err:
            assert "sets" in str(err) or "wav" in str(err)


@FUZZ
@given(
    header=st.sampled_from([b"", b"RIFF\x24\x00\x00\x00WAVEfmt ", b"fLaC\x00\x00\x00\x22", b"OggS"]),
    body=st.binary(max_size=400),
)
def test_audio_loader_rejects_garbage_with_audio_error(header, body):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "x.wav"
        path.write_bytes(header + body)
        try:
            wav = load_audio(path, 16000)
        except AudioError as err:
            assert "x.wav" in str(err)
        else:
            assert wav.ndim == 1 and wav.dtype == np.float32 and np.isfinite(wav).all()


@FUZZ
@given(
    sr=st.sampled_from([8000, 11025, 16000, 22050, 24000, 32000, 44100, 48000]),
    channels=st.integers(1, 6),
    frames=st.integers(1, 5000),
    fmt=st.sampled_from(
        [
            ("WAV", "PCM_U8"),
            ("WAV", "PCM_16"),
            ("WAV", "PCM_24"),
            ("WAV", "PCM_32"),
            ("WAV", "FLOAT"),
            ("WAV", "DOUBLE"),
            ("FLAC", "PCM_16"),
            ("FLAC", "PCM_24"),
        ]
    ),
    seed=st.integers(0, 2**16),
)
def test_any_valid_audio_loads_as_mono_16k(sr, channels, frames, fmt, seed):
    data = np.random.default_rng(seed).uniform(-0.9, 0.9, (frames, channels))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("a.flac" if fmt[0] == "FLAC" else "a.wav")
        sf.write(path, data, sr, format=fmt[0], subtype=fmt[1])
        wav = load_audio(path, 16000)
    assert wav.ndim == 1 and wav.dtype == np.float32 and np.isfinite(wav).all()
    assert abs(wav.shape[0] - frames * 16000 / sr) <= 1
