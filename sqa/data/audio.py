"""Audio I/O: read any soundfile-supported file, downmix to mono, resample, crop or pad."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

# The highest sample rate sqa reads or an export may declare (the top of common audio gear).
MAX_SAMPLE_RATE = 384_000
# Default bound on the samples a file (frames x channels) or its resampled waveform may hold:
# 2**28 float32 samples are 1 GiB, e.g. 4.6 hours of mono 16 kHz or 46 minutes of 48 kHz stereo.
MAX_AUDIO_SAMPLES = 1 << 28


class AudioError(ValueError):
    """An audio file could not be read or holds no usable samples."""


def check_audio_size(
    name: str, rate: int, frames: int, channels: int, target_rate: int, max_samples: int = MAX_AUDIO_SAMPLES
) -> None:
    """AudioError unless the rate is in 1..MAX_SAMPLE_RATE and the decoded and resampled sizes fit."""
    if not 0 < rate <= MAX_SAMPLE_RATE:
        raise AudioError(f"{name}: sample rate {rate} Hz is outside 1..{MAX_SAMPLE_RATE}")
    decoded = frames * channels
    resampled = math.ceil(frames * target_rate / rate)
    if max(decoded, resampled) > max_samples:
        raise AudioError(
            f"{name}: {frames} frames x {channels} channels at {rate} Hz ({max(decoded, resampled)} samples "
            f"decoded or resampled to {target_rate} Hz) exceeds the limit of {max_samples} samples"
        )


def os_path(path: str | Path) -> str | bytes:
    """`path` as libsndfile opens it: the file system's bytes on POSIX, whatever the locale."""
    # soundfile encodes a str path strictly in the locale's encoding, so under LANG=C (ASCII) a
    # non-ASCII name, which Python decoded with surrogate escapes, could not be opened.
    if "\0" in str(path):  # only a manifest or list can name one; every OS call would refuse it
        raise AudioError(f"{str(path)!r}: a file name cannot hold a NUL character")
    if os.name == "nt":
        return str(path)
    try:
        return os.fsencode(path)
    except UnicodeEncodeError as err:  # a name read from UTF-8 text (a manifest) under LANG=C
        raise AudioError(
            f"{path}: the file system encoding of this locale ({sys.getfilesystemencoding()}) cannot "
            "encode the name; run under a UTF-8 locale, e.g. LANG=C.UTF-8"
        ) from err


def _reason(err: Exception) -> str:
    """Why a file could not be read, without libsndfile's repeat of the (bytes) path."""
    return err.error_string if isinstance(err, sf.LibsndfileError) else str(err)


def audio_info(path: str | Path) -> tuple[int, int, int]:
    """Return (sample_rate, frames, channels) of an audio file without decoding it."""
    try:
        info = sf.info(os_path(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as err:
        raise AudioError(f"{path}: cannot read audio header ({_reason(err)})") from err
    return int(info.samplerate), int(info.frames), int(info.channels)


def load_audio(path: str | Path, sample_rate: int, max_samples: int = MAX_AUDIO_SAMPLES) -> np.ndarray:
    """Read `path`, average its channels and resample to `sample_rate`; returns float32 (N,).

    The header's rate, frames and channels are checked (`check_audio_size`) before decoding.
    """
    try:
        with sf.SoundFile(os_path(path)) as fh:
            check_audio_size(str(path), fh.samplerate, fh.frames, fh.channels, sample_rate, max_samples)
            data, sr = fh.read(dtype="float32", always_2d=True), fh.samplerate
    except (sf.LibsndfileError, RuntimeError, OSError) as err:
        raise AudioError(f"{path}: cannot read audio ({_reason(err)})") from err
    if data.shape[0] == 0:
        raise AudioError(f"{path}: the file holds no samples")
    return downmix_resample(data, sr, sample_rate, str(path))


def downmix_resample(data: np.ndarray, orig_sr: int, target_sr: int, name: str) -> np.ndarray:
    """Average the channels of float32 samples (N, C), check them, resample -> float32 (N',).

    Files (`load_audio`) and in-memory arrays (`sqa.load(...).score`) both go through here, so
    the same audio gets the same waveform either way.
    """
    # One channel is its own mean (exactly); taking it as is saves a copy of a long clip.
    wav = data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)
    if not np.isfinite(wav).all():
        raise AudioError(f"{name}: the audio holds NaN or infinite samples")
    return resample(wav, orig_sr, target_sr)


def resample(wav: np.ndarray, orig_sr: int, target_sr: int) -> np.ndarray:
    """Band-limited resampling (soxr, high quality) of a mono float array (N,) -> (N',)."""
    if orig_sr == target_sr:
        return np.ascontiguousarray(wav, dtype=np.float32)
    return soxr.resample(wav.astype(np.float32), orig_sr, target_sr, quality="HQ").astype(np.float32)


def crop_start(length: int, max_samples: int | None, rng: np.random.Generator | None, align: int = 1) -> int:
    """Start of a `max_samples` crop: a random multiple of `align` with `rng`, else centred."""
    if max_samples is None or length <= max_samples:
        return 0
    excess = length - max_samples
    if rng is None:
        return excess // 2 // align * align
    return int(rng.integers(0, excess // align + 1)) * align


def pad_to(wav: np.ndarray, min_samples: int) -> np.ndarray:
    """Zero-pad a waveform (N,) at the end to at least `min_samples`."""
    if wav.shape[0] >= min_samples:
        return wav
    return np.pad(wav, (0, min_samples - wav.shape[0]))
