import numpy as np
import pytest
import soundfile as sf

from sqa.data.audio import AudioError, crop_start, load_audio, pad_to


def tone(freq: float, sr: int, seconds: float) -> np.ndarray:
    return 0.5 * np.sin(2 * np.pi * freq * np.arange(int(sr * seconds)) / sr)


@pytest.mark.parametrize(
    ("sr", "subtype"), [(44100, "PCM_16"), (24000, "PCM_24"), (8000, "FLOAT"), (16000, "PCM_32")]
)
def test_load_resamples_to_16k_and_keeps_pitch_and_duration(tmp_path, sr, subtype):
    path = tmp_path / "a.wav"
    sf.write(path, tone(440.0, sr, 1.0), sr, subtype=subtype)
    wav = load_audio(path, 16000)
    assert wav.dtype == np.float32
    assert abs(wav.shape[0] - 16000) <= 1
    spectrum = np.abs(np.fft.rfft(wav))
    assert np.argmax(spectrum) * 16000 / wav.shape[0] == pytest.approx(440.0, abs=2.0)


def test_stereo_is_averaged_to_mono(tmp_path):
    left, right = tone(440.0, 16000, 0.5), -0.5 * tone(440.0, 16000, 0.5)
    sf.write(tmp_path / "s.flac", np.stack([left, right], axis=1), 16000)
    wav = load_audio(tmp_path / "s.flac", 16000)
    np.testing.assert_allclose(wav, 0.25 * tone(440.0, 16000, 0.5), atol=1e-4)


def test_long_clips_are_not_truncated(tmp_path):
    sf.write(tmp_path / "long.wav", tone(220.0, 16000, 30.0), 16000)
    assert load_audio(tmp_path / "long.wav", 16000).shape[0] == 30 * 16000


def test_unreadable_and_empty_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00garbage")
    with pytest.raises(AudioError, match="bad.wav"):
        load_audio(bad, 16000)
    sf.write(tmp_path / "empty.wav", np.zeros(0), 16000)
    with pytest.raises(AudioError, match="empty.wav: the file holds no samples"):
        load_audio(tmp_path / "empty.wav", 16000)


def test_pad_and_crop_start():
    assert pad_to(np.ones(10, np.float32), 400).shape == (400,)
    assert pad_to(np.ones(500, np.float32), 400).shape == (500,)
    assert crop_start(1000, None, None) == 0 and crop_start(500, 600, None) == 0
    assert crop_start(1000, 600, None) == 200
    starts = {crop_start(10000, 3000, np.random.default_rng(s), align=320) for s in range(50)}
    assert all(s % 320 == 0 and 0 <= s <= 7000 for s in starts) and len(starts) > 5
    assert crop_start(10000, 3000, np.random.default_rng(3), 320) == crop_start(
        10000, 3000, np.random.default_rng(3), 320
    )
