import os
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from sqa.data import audio
from sqa.data.audio import AudioError, DecodedAudio, crop_start, load_audio, pad_to


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


def settled(path):
    """`path`, its modification time set a minute back: a file no longer being written."""
    stamp = path.stat().st_mtime_ns - 60 * 10**9
    os.utime(path, ns=(stamp, stamp))
    return path


def counted_decodes(monkeypatch) -> list[str]:
    """The paths `DecodedAudio` decodes from now on (it calls the module's `load_audio`)."""
    decoded: list[str] = []

    def counting(path, sample_rate, *args):
        decoded.append(str(path))
        return load_audio(path, sample_rate, *args)

    monkeypatch.setattr(audio, "load_audio", counting)
    return decoded


def test_kept_waveforms_are_decoded_once_and_equal_a_fresh_read(tmp_path, monkeypatch):
    path = tmp_path / "a.flac"
    sf.write(path, np.stack([tone(440.0, 44100, 0.5), tone(330.0, 44100, 0.5)], axis=1), 44100)
    settled(path)
    expected = load_audio(path, 16000)
    decoded = counted_decodes(monkeypatch)
    kept = DecodedAudio(1 << 20)
    first = kept.read(path, 16000)
    first[:] = 0.0  # the caller's copy: changing it changes nothing kept
    second = kept.read(path, 16000)
    np.testing.assert_array_equal(second, expected)
    assert decoded == [str(path)] and kept.bytes == expected.nbytes
    # Another rate is another waveform.
    assert kept.read(path, 8000).shape[0] == 4000 and len(decoded) == 2


def test_a_changed_file_is_decoded_anew(tmp_path, monkeypatch):
    path = tmp_path / "a.wav"
    sf.write(path, tone(440.0, 16000, 0.5), 16000)
    settled(path)
    decoded = counted_decodes(monkeypatch)
    kept = DecodedAudio(1 << 20)
    kept.read(path, 16000)
    stamp = path.stat().st_mtime_ns
    # The same size, other samples; the modification time alone tells them apart.
    sf.write(path, tone(220.0, 16000, 0.5), 16000)
    os.utime(path, ns=(stamp + 1, stamp + 1))
    np.testing.assert_array_equal(kept.read(path, 16000), load_audio(path, 16000))
    assert len(decoded) == 2
    # Replaced by another file of the same size and time under the same name: another inode.
    other = tmp_path / "b.wav"
    sf.write(other, tone(110.0, 16000, 0.5), 16000)
    os.utime(other, ns=(stamp + 1, stamp + 1))
    os.replace(other, path)
    np.testing.assert_array_equal(kept.read(path, 16000), load_audio(path, 16000))
    assert len(decoded) == 3


def test_the_least_recently_used_waveform_goes_first_beyond_the_bound(tmp_path, monkeypatch):
    paths = []
    for name in "abc":
        paths.append(tmp_path / f"{name}.wav")
        sf.write(paths[-1], tone(440.0, 16000, 0.25), 16000)
        settled(paths[-1])
    clip = 4000 * 4  # bytes of one decoded clip
    decoded = counted_decodes(monkeypatch)
    kept = DecodedAudio(2 * clip)
    a, b, c = (str(p) for p in paths)
    for path in (paths[0], paths[1], paths[0], paths[2]):
        kept.read(path, 16000)
    # a was used after b: b went when c came.
    assert decoded == [a, b, c] and kept.bytes == 2 * clip
    kept.read(paths[0], 16000)
    kept.read(paths[1], 16000)
    assert decoded == [a, b, c, b]
    # Exactly at the bound a clip is kept; one byte under it, none is.
    exact = DecodedAudio(clip)
    exact.read(paths[0], 16000)
    exact.read(paths[0], 16000)
    under = DecodedAudio(clip - 1)
    under.read(paths[0], 16000)
    under.read(paths[0], 16000)
    # exact decoded a once, under twice.
    assert decoded == [a, b, c, b, a, a, a]
    assert under.bytes == 0 and exact.bytes == clip


def test_kept_waveforms_refuse_what_load_audio_refuses(tmp_path):
    kept = DecodedAudio(1 << 20)
    with pytest.raises(AudioError, match="missing.wav"):
        kept.read(tmp_path / "missing.wav", 16000)
    with pytest.raises(AudioError, match="is a folder"):
        kept.read(tmp_path, 16000)
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"RIFF\x00\x00garbage")
    with pytest.raises(AudioError, match="bad.wav"):
        kept.read(bad, 16000)
    assert kept.bytes == 0


@pytest.mark.parametrize(("age", "keeps"), [(audio.RECENT_NS - 1, False), (audio.RECENT_NS, True)])
def test_a_file_modified_in_the_last_two_seconds_is_decoded_but_not_kept(tmp_path, monkeypatch, age, keeps):
    path = tmp_path / "a.wav"
    sf.write(path, tone(440.0, 16000, 0.25), 16000)
    stamp = path.stat().st_mtime_ns
    monkeypatch.setattr(audio, "time", SimpleNamespace(time_ns=lambda: stamp + age))
    decoded = counted_decodes(monkeypatch)
    kept = DecodedAudio(1 << 20)
    np.testing.assert_array_equal(kept.read(path, 16000), kept.read(path, 16000))
    assert (kept.bytes, len(decoded)) == ((4000 * 4, 1) if keeps else (0, 2))
