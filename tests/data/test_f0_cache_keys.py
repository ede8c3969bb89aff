"""The f0 cache's keys: a track is read back only for the samples and settings it was computed from."""

from __future__ import annotations

import re
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest

from sqa.data import pitch
from sqa.data.pitch import KEY_TAG, F0CacheWarning, F0Extractor
from tests.data.test_pitch import npy, tone


@pytest.fixture
def calls(monkeypatch) -> list[dict]:
    """The settings of every f0 computation (a stub track of 100 Hz, so no extractor runs)."""
    made: list[dict] = []

    def compute(self: F0Extractor, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        made.append(self.settings())
        return np.full(self.frame_count(len(wav), sample_rate), 100.0, dtype=np.float32)

    monkeypatch.setattr(F0Extractor, "compute", compute)
    return made


def test_another_clips_entry_under_this_clips_name_is_not_used_and_named(tmp_path: Path):
    first, second = tone(330.0), tone(220.0)
    extractor = F0Extractor("dio", cache_dir=str(tmp_path))
    first_track = extractor(first, 16000)
    entry = extractor._cache_path(second, 16000)
    entry.parent.mkdir(parents=True, exist_ok=True)
    # The first clip's entry given the second clip's name (a co-user's copy, or a mix-up): a track
    # of the right length and range, so nothing but its key tells it apart.
    shutil.copyfile(extractor._cache_path(first, 16000), entry)
    assert np.load(entry).shape == (extractor.frame_count(len(second), 16000),)
    expected = F0Extractor("dio").compute(second, 16000)
    assert not np.array_equal(first_track, expected)
    fresh = F0Extractor("dio", cache_dir=str(tmp_path))
    with pytest.warns(F0CacheWarning) as said:
        track = fresh(second, 16000)
    np.testing.assert_array_equal(track, expected)
    assert fresh.computed == 1
    named = [str(w.message) for w in said if str(entry) in str(w.message)]
    assert len(named) == 1 and re.search(r"not used \(it holds the key [0-9a-f]{64}: another clip", named[0])
    # Replaced by the second clip's own entry: the next run reads it, silently.
    again = F0Extractor("dio", cache_dir=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", F0CacheWarning)
        np.testing.assert_array_equal(again(second, 16000), expected)
    assert again.computed == 0


@pytest.mark.parametrize(
    ("base", "changed"),
    [
        ({}, {"method": "fcpe"}),
        ({}, {"frame_period_ms": 10.0}),
        ({}, {"f0_floor": 50.0}),
        ({}, {"f0_ceil": 700.0}),
        ({"method": "crepe"}, {"method": "crepe", "crepe_model": "full"}),
        ({"method": "crepe"}, {"method": "crepe", "crepe_threshold": 0.3}),
    ],
)
def test_each_f0_setting_is_part_of_the_key_and_the_same_ones_hit(tmp_path: Path, calls, base, changed):
    wav = tone(330.0, seconds=0.5)
    F0Extractor(**base, cache_dir=str(tmp_path))(wav, 16000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", F0CacheWarning)
        F0Extractor(**base, cache_dir=str(tmp_path))(wav, 16000)
        assert len(calls) == 1  # the same audio and settings: read back
        F0Extractor(**changed, cache_dir=str(tmp_path))(wav, 16000)
        assert calls[-1] == F0Extractor(**changed).settings() and len(calls) == 2
        F0Extractor(**changed, cache_dir=str(tmp_path))(wav, 16000)
        F0Extractor(**base, cache_dir=str(tmp_path))(wav, 16000)
    assert len(calls) == 2


def test_the_samples_their_rate_and_the_extractors_code_are_part_of_the_key(
    tmp_path: Path, calls, monkeypatch
):
    wav = tone(330.0, seconds=0.5)
    extractor = F0Extractor(cache_dir=str(tmp_path))
    extractor(wav, 16000)
    nudged = wav.copy()
    nudged[100] += 1e-6
    for samples, rate in [(nudged, 16000), (wav.astype(np.float32), 16000), (wav, 22050)]:
        extractor(samples, rate)
    assert len(calls) == 4
    # Another version of sqa's extraction, or of the method's library, computes anew.
    monkeypatch.setattr(pitch, "EXTRACTOR_VERSION", pitch.EXTRACTOR_VERSION + 1)
    extractor(wav, 16000)
    monkeypatch.setattr(pitch, "library_version", lambda name: "0.0.0")
    extractor(wav, 16000)
    assert len(calls) == 6


@pytest.mark.parametrize(
    "track",
    [
        lambda frames: np.full(frames, np.nan, dtype=np.float32),
        lambda frames: np.full(frames - 1, 100.0, dtype=np.float32),
        lambda frames: np.full(frames, 100.0, dtype=np.float64),
    ],
)
def test_an_entry_with_the_right_key_and_a_wrong_track_is_recomputed(tmp_path: Path, calls, track):
    wav = tone(330.0, seconds=0.5)
    extractor = F0Extractor(cache_dir=str(tmp_path))
    entry = extractor._cache_path(wav, 16000)
    entry.parent.mkdir(parents=True)
    frames = extractor.frame_count(len(wav), 16000)
    entry.write_bytes(npy(track(frames)) + KEY_TAG + extractor.cache_key(wav, 16000))
    with pytest.warns(F0CacheWarning, match=re.escape(f"{entry}: not used (not a float32 track")):
        assert extractor(wav, 16000).tolist() == [100.0] * frames
    assert len(calls) == 1
