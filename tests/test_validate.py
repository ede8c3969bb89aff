"""Up-front corpus validation: every problem reported by file; raise by default, skip on request."""

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.data.corpus import Clip, Corpus, CorpusError
from sqa.data.datamodule import MOSDataModule
from sqa.data.validate import validate_corpus


def tone(path: Path, seconds: float = 0.5, sr: int = 16000) -> Path:
    t = np.arange(int(sr * seconds)) / sr
    sf.write(path, 0.2 * np.sin(2 * np.pi * 220 * t), sr)
    return path


def clip(sample_id, path, split="train", mos=3.0, system="s1", domain="d1"):
    return Clip(sample_id, Path(path), mos, system, domain, split, "test" if split == "test" else None)


@pytest.fixture
def messy_corpus(tmp_path):
    good = [
        clip(f"g{i}", tone(tmp_path / f"g{i}.wav"), split)
        for i, split in enumerate(["train", "train", "valid", "test"])
    ]
    sf.write(tmp_path / "silent.wav", np.zeros(8000), 16000)
    sf.write(tmp_path / "empty.wav", np.zeros(0), 16000)
    sf.write(tmp_path / "nan.wav", np.full(8000, np.nan, dtype=np.float32), 16000, subtype="FLOAT")
    (tmp_path / "broken.flac").write_bytes(b"fLaC\x00\x00\x00\x22" + bytes(40))
    tone(tmp_path / "short.wav", seconds=0.01)
    bad = [
        clip("missing", tmp_path / "missing.wav"),
        clip("silent", tmp_path / "silent.wav"),
        clip("empty", tmp_path / "empty.wav"),
        clip("nan", tmp_path / "nan.wav"),
        clip("broken", tmp_path / "broken.flac"),
        clip("short", tmp_path / "short.wav"),
        clip("nanscore", tone(tmp_path / "a.wav"), mos=float("nan")),
        clip("toohigh", tone(tmp_path / "b.wav"), mos=7.0),
        clip("g0", tone(tmp_path / "dup.wav")),
        clip("nosys", tone(tmp_path / "c.wav"), system="ghost"),
        clip("nodomain", tone(tmp_path / "d.wav"), domain="d9"),
    ]
    return Corpus(good + bad, ["d1"], (1.0, 5.0), frozenset({"s1"}))


EXPECTED = {
    "missing": "audio file not found",
    "silent": "all silent",
    "empty": "no samples",
    "nan": "NaN or infinite",
    "broken": "cannot read audio",
    "short": "shorter than the 400-sample receptive field",
    "nanscore": "score is nan",
    "toohigh": "outside the scale",
    "g0": "duplicate sample ID",
    "nosys": "unknown system 'ghost'",
    "nodomain": "unknown domain/batch 'd9'",
}


def test_every_problem_is_reported_by_file(messy_corpus):
    problems = validate_corpus(messy_corpus, 16000, 400)
    for sample_id, message in EXPECTED.items():
        matching = [p for p in problems if p.sample_id == sample_id and message in p.what]
        assert matching, f"{sample_id}: no problem containing {message!r} in {problems}"
        assert matching[0].where.endswith((".wav", ".flac"))
    assert not [p for p in problems if p.sample_id in ("g1", "g2", "g3")]


def test_empty_splits_are_problems(tmp_path):
    corpus = Corpus([clip("a", tone(tmp_path / "a.wav"))], ["d1"])
    assert {p.where for p in validate_corpus(corpus, 16000, 400)} == {"valid split", "test split"}


def test_default_stops_with_the_whole_report(messy_corpus):
    with pytest.raises(CorpusError) as err:
        MOSDataModule(messy_corpus)
    report = str(err.value)
    assert report.startswith(f"{len(validate_corpus(messy_corpus, 16000, 400))} problem(s)")
    assert all(message in report for message in EXPECTED.values())
    assert "data.on_error=skip" in report


def test_skip_drops_bad_clips_and_keeps_the_report(messy_corpus):
    dm = MOSDataModule(messy_corpus, on_error="skip")
    assert sorted(c.sample_id for c in dm.corpus.clips) == ["g1", "g2", "g3"]
    assert {p.sample_id for p in dm.problems} == set(EXPECTED)
