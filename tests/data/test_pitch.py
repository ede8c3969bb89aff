"""Pitch features on hand-made f0 tracks and synthetic tones (DESIGN §5 definitions)."""

import numpy as np
import pytest
import torch

from sqa.data.pitch import F0Extractor
from sqa.models.pitch_features import align_frames, intonation, midi_notes, midi_variance, pitch_histogram


def test_midi_notes_of_known_pitches_and_unvoiced_frames():
    f0 = torch.tensor([[440.0, 0.0, 261.6256, 880.0, 466.1638, 452.0]])
    # A4=69, unvoiced=0, C4=60, A5=81, Bb4=70, 452 Hz is 46 cents above A4 -> rounds to 69.
    assert midi_notes(f0).tolist() == [[69, 0, 60, 81, 70, 69]]


def test_midi_variance_definition():
    notes = torch.tensor([[60, 62, 62, 0, 57]])
    assert midi_variance(notes).tolist() == [[60, 130, 128, 66, 185]]


def test_histogram_bins_and_normalisation_by_voiced_frames():
    # 440 Hz -> 0 cents -> bin 0; 220 and 110 Hz fold onto the same bin; unvoiced frames do not count.
    f0 = torch.tensor([[440.0, 220.0, 110.0, 0.0, 0.0, 466.1638]])
    hist = pitch_histogram(f0, torch.tensor([6]))
    assert hist.shape == (1, 120)
    assert hist[0, 0].item() == pytest.approx(3 / 4)
    # Bb4: 466 Hz after rounding to integer Hz is 99.7 cents above A4 -> bin 9.
    assert hist[0, 9].item() == pytest.approx(1 / 4)
    assert hist.sum().item() == pytest.approx(1.0)


def test_histogram_bin_edge_and_clipping():
    # 1200·log2(f/440) = 10 cents exactly at f = 440·2^(1/120) = 442.54 Hz; rounding to 443 Hz
    # gives 10.03 cents -> bin 1, while 442 Hz (7.86 cents) stays in bin 0.
    f0 = torch.tensor([[442.0, 443.0, 1000.0, 30.0]])
    hist = pitch_histogram(f0, torch.tensor([4]))
    assert hist[0, 0].item() == pytest.approx(0.25) and hist[0, 1].item() == pytest.approx(0.25)
    # 1000 Hz clips to 799 Hz: 1032.6 cents -> bin 103; 30 Hz clips to 40 Hz: -4151.3 cents
    # -> (-415.13 mod 120) = 64.87 -> bin 64.
    assert hist[0, 103].item() == pytest.approx(0.25) and hist[0, 64].item() == pytest.approx(0.25)


def test_histogram_of_all_unvoiced_clip_is_zero_and_padding_is_ignored():
    f0 = torch.tensor([[0.0, 0.0, 0.0], [440.0, 220.0, 300.0]])
    hist = pitch_histogram(f0, torch.tensor([3, 2]))
    assert hist[0].abs().sum().item() == 0.0
    assert hist[1, 0].item() == pytest.approx(1.0)  # the third (padded) frame is not counted


def test_intonation_is_the_offset_from_librosas_nearest_midi_note_as_an_angle():
    librosa = pytest.importorskip("librosa")
    hz = np.array([440.0, 440.0 * 2 ** (0.4 / 12), 440.0 * 2 ** (0.6 / 12), 261.63, 97.0, 0.0, 830.0])
    feature = intonation(torch.tensor(hz, dtype=torch.float64)[None])[0].numpy()
    midi = librosa.hz_to_midi(hz[hz > 0])
    offset = midi - np.round(midi)
    np.testing.assert_allclose(feature[hz > 0, 0], np.sin(2 * np.pi * offset), atol=1e-9)
    np.testing.assert_allclose(feature[hz > 0, 1], np.cos(2 * np.pi * offset), atol=1e-9)
    np.testing.assert_array_equal(feature[:, 2], hz > 0)
    np.testing.assert_array_equal(feature[hz == 0], 0.0)
    # 40 cents sharp and 40 cents flat of the next note: opposite signs, the same distance.
    assert feature[1, 0] == pytest.approx(np.sin(0.8 * np.pi)) == pytest.approx(-feature[2, 0])
    assert feature[1, 1] == pytest.approx(feature[2, 1]) == pytest.approx(np.cos(0.8 * np.pi))


def test_intonation_meets_at_half_a_semitone_either_side():
    below, above = 440.0 * 2 ** (0.4999 / 12), 440.0 * 2 ** (0.5001 / 12)
    feature = intonation(torch.tensor([[below, above]], dtype=torch.float64))[0]
    # d = +0.4999 and −0.4999: one pitch region, so the features are nearly equal.
    torch.testing.assert_close(feature[0], feature[1], atol=2e-3, rtol=0)


def test_align_frames_truncates_and_pads():
    f0 = torch.arange(1.0, 6.0)[None]
    assert align_frames(f0, 3).tolist() == [[1.0, 2.0, 3.0]]
    assert align_frames(f0, 7).tolist() == [[1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]]


def tone(freq, sr=16000, seconds=1.0, silence=0.0):
    t = np.arange(int(sr * seconds)) / sr
    wav = 0.3 * np.sin(2 * np.pi * freq * t)
    return np.concatenate([wav, np.zeros(int(sr * silence))])


@pytest.mark.parametrize("method", ["dio", "fcpe"])
@pytest.mark.parametrize("freq", [196.0, 440.0])
def test_extractors_find_known_pitch_of_tones(method, freq):
    f0 = F0Extractor(method)(tone(freq, silence=0.5), 16000)
    assert f0.shape == (76,)  # 1.5 s at a 20 ms frame period, frames at 0, 20, ..., 1500 ms
    voiced = f0[5:45]
    assert np.all(voiced > 0)
    assert np.median(voiced) == pytest.approx(freq, rel=0.01)
    assert np.all(f0[-10:] == 0)  # the trailing silence is unvoiced


def test_dio_clips_voiced_f0_at_ceiling():
    f0 = F0Extractor("dio", f0_ceil=300.0)(tone(290.0), 16000)
    assert f0.max() <= 300.0


def test_cache_computes_once_per_clip_and_setting(tmp_path):
    wav = tone(330.0)
    extractor = F0Extractor("dio", cache_dir=str(tmp_path))
    first = extractor(wav, 16000)
    second = extractor(wav, 16000)
    assert extractor.computed == 1
    np.testing.assert_array_equal(first, second)
    fresh = F0Extractor("dio", cache_dir=str(tmp_path))  # a second run reuses the disk cache
    fresh(wav, 16000)
    assert fresh.computed == 0
    other = F0Extractor("dio", f0_ceil=500.0, cache_dir=str(tmp_path))
    other(wav, 16000)
    assert other.computed == 1  # another setting is another cache entry


@pytest.mark.parametrize("method", ["dio", "fcpe"])
def test_voiced_f0_that_the_extractor_returns_above_the_ceiling_is_clipped(monkeypatch, method):
    # The extractors are stubbed to return values above the ceiling (real DIO rarely does, so
    # a test on audio cannot show whether the clipping happens).
    raw = np.array([0.0, 120.0, 850.0, 1500.0, 0.0, 798.0])
    extractor = F0Extractor(method, f0_ceil=799.0)
    if method == "dio":
        import pyworld

        monkeypatch.setattr(pyworld, "dio", lambda x, fs, floor, ceil, frame_period: (raw.copy(), raw * 0))
        monkeypatch.setattr(pyworld, "stonemask", lambda x, f0, t, fs: f0)
    else:

        class StubFCPE:
            def infer(self, wav, sr, f0_min, f0_max, output_interp_target_length):
                return torch.tensor(raw, dtype=torch.float32)[None, :, None]

        extractor._fcpe = StubFCPE()
    f0 = extractor.compute(np.zeros(1600), 16000)
    assert f0.tolist() == [0.0, 120.0, 799.0, 799.0, 0.0, 798.0]


def entry_of(extractor: F0Extractor, wav: np.ndarray):
    """The cache entry of `wav` at 16 kHz (its path, once the extractor has written it)."""
    return extractor._cache_path(wav, 16000)


def npy(array: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "damage",
    [
        lambda f0: npy(f0[None, :]),  # 2-D
        lambda f0: npy(f0[:1]),  # one frame long
        lambda f0: npy(np.full_like(f0, np.nan)),  # NaN
        lambda f0: npy(f0.astype(np.float64)),  # another dtype
        lambda f0: npy(np.full_like(f0, 1000.0)),  # above the ceiling
        lambda f0: npy(-f0 - 1),  # negative
        lambda f0: npy(f0)[:100],  # cut short
        lambda f0: b"not an npy file",
        lambda f0: npy(np.array([{"a": 1}], dtype=object)),  # a pickle
        lambda f0: npy(f0) + bytes(1 << 20),  # longer than the track can take
    ],
)
def test_a_cache_entry_that_is_not_the_clips_track_is_recomputed_and_replaced(tmp_path, damage):
    wav = tone(330.0)
    extractor = F0Extractor("dio", cache_dir=str(tmp_path))
    expected = extractor(wav, 16000)
    entry = entry_of(extractor, wav)
    entry.write_bytes(damage(expected))
    fresh = F0Extractor("dio", cache_dir=str(tmp_path))
    np.testing.assert_array_equal(fresh(wav, 16000), expected)
    assert fresh.computed == 1
    np.testing.assert_array_equal(np.load(entry), expected)  # replaced: the next run reads it
    again = F0Extractor("dio", cache_dir=str(tmp_path))
    again(wav, 16000)
    assert again.computed == 0


def test_an_entry_that_is_a_folder_or_under_a_file_or_unwritable_is_computed_and_named(tmp_path, monkeypatch):
    import errno

    from sqa.data import pitch

    wav = tone(330.0)
    extractor = F0Extractor("dio", cache_dir=str(tmp_path / "a"))
    expected = F0Extractor("dio").compute(wav, 16000)
    entry = entry_of(extractor, wav)
    entry.mkdir(parents=True)  # a folder where the entry belongs: IsADirectoryError on writing
    with pytest.warns(pitch.F0CacheWarning, match=f"f0 cache entry {entry}: not written"):
        np.testing.assert_array_equal(extractor(wav, 16000), expected)
    assert entry.is_dir()
    under_file = F0Extractor("dio", cache_dir=str(tmp_path / "b"))
    entry = entry_of(under_file, wav)
    entry.parent.parent.mkdir()
    entry.parent.write_text("a file where the entry's folder belongs")
    with pytest.warns(pitch.F0CacheWarning, match=f"f0 cache entry {entry}: not written"):
        np.testing.assert_array_equal(under_file(wav, 16000), expected)

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pitch, "atomic_write", full)
    full_disk = F0Extractor("dio", cache_dir=str(tmp_path / "c"))
    with pytest.warns(pitch.F0CacheWarning, match="not written \\(No space left on device\\)"):
        np.testing.assert_array_equal(full_disk(wav, 16000), expected)


@pytest.mark.parametrize("samples", [1, 319, 320, 321, 16000, 24001, 44100])
@pytest.mark.parametrize("rate", [16000, 22050, 44100])
def test_the_frame_count_is_worlds(samples, rate):
    import pyworld

    x = np.zeros(samples)
    extractor = F0Extractor("dio")
    f0, _ = pyworld.dio(x, rate, 40.0, 799.0, frame_period=20.0)
    assert extractor.frame_count(samples, rate) == f0.shape[0]
