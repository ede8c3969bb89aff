"""Audio I/O: read any soundfile-supported file, downmix to mono, resample, crop or pad."""

from __future__ import annotations

import math
import os
import stat
import sys
import time
from collections import OrderedDict
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

# The highest sample rate sqa reads or an export may declare (the top of common audio gear).
MAX_SAMPLE_RATE = 384_000
# Default bound on the samples a file (frames x channels) or its resampled waveform may hold:
# 2**28 float32 samples are 1 GiB, e.g. 4.6 hours of mono 16 kHz or 46 minutes of 48 kHz stereo.
MAX_AUDIO_SAMPLES = 1 << 28
# The largest sample magnitude read: int32 PCM's full scale, the largest integer PCM values a float
# file or array may hold by mistake (they are scored with a warning). Larger ones overflow float32
# in the front ends (a log-mel power spectrum of 1e19 is infinite), so no score could be trusted.
MAX_SAMPLE_PEAK = float(1 << 31)
# What a process keeps of the waveforms it decoded (`DECODED`): 512 MB, as much as `preload: auto` holds.
DECODED_BYTES = 512 << 20
# A file modified this recently (ns) is decoded but not kept: file systems stamp modification times
# in ticks of a few milliseconds, so a rewrite of the same size within one tick would keep its stat.
RECENT_NS = 2_000_000_000
# The longest scoring window (`--chunk-seconds`): a day. Longer ones would chunk nothing (no clip
# under the sample limit is that long at 16 kHz), and inf overflows the window's sample count.
MAX_CHUNK_SECONDS = 86_400.0


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


def chunk_seconds_problem(chunk_seconds: float) -> str | None:
    """Why `chunk_seconds` is no window length (a number in (0, MAX_CHUNK_SECONDS]), or None."""
    if not 0 < chunk_seconds <= MAX_CHUNK_SECONDS:  # False for NaN too
        return f"must be a number of seconds above 0 and at most {MAX_CHUNK_SECONDS:.0f}, got {chunk_seconds}"
    return None


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


def refuse_special_file(path: str | Path) -> None:
    """AudioError if `path` exists but is not a regular file (a FIFO, device, socket or folder).

    Decided by stat, which never opens it: opening a FIFO blocks until a writer comes. A path
    that cannot be stat'ed is left to the open, which says why it cannot be read.
    """
    try:
        mode = os.stat(os_path(path)).st_mode
    except OSError:
        return
    if stat.S_ISDIR(mode):
        raise AudioError(f"{path}: is a folder, not an audio file")
    if not stat.S_ISREG(mode):
        raise AudioError(f"{path}: not a regular file (a FIFO, device or socket); refusing to open it")


def _reason(err: Exception) -> str:
    """Why a file could not be read, without libsndfile's repeat of the (bytes) path."""
    return err.error_string if isinstance(err, sf.LibsndfileError) else str(err)


def audio_info(path: str | Path) -> tuple[int, int, int]:
    """Return (sample_rate, frames, channels) of an audio file without decoding it."""
    refuse_special_file(path)
    try:
        info = sf.info(os_path(path))
    except (sf.LibsndfileError, RuntimeError, OSError) as err:
        raise AudioError(f"{path}: cannot read audio header ({_reason(err)})") from err
    return int(info.samplerate), int(info.frames), int(info.channels)


def load_audio(path: str | Path, sample_rate: int, max_samples: int = MAX_AUDIO_SAMPLES) -> np.ndarray:
    """Read `path`, average its channels and resample to `sample_rate`; returns float32 (N,).

    A path that is not a regular file is refused without opening it (`refuse_special_file`);
    the header's rate, frames and channels are checked (`check_audio_size`) before decoding.
    """
    refuse_special_file(path)
    try:
        with sf.SoundFile(os_path(path)) as fh:
            check_audio_size(str(path), fh.samplerate, fh.frames, fh.channels, sample_rate, max_samples)
            data, sr = fh.read(dtype="float32", always_2d=True), fh.samplerate
    except (sf.LibsndfileError, RuntimeError, OSError) as err:
        raise AudioError(f"{path}: cannot read audio ({_reason(err)})") from err
    if data.shape[0] == 0:
        raise AudioError(f"{path}: the file holds no samples")
    return downmix_resample(data, sr, sample_rate, str(path))


class DecodedAudio:
    """`load_audio`'s waveforms kept by file and rate, the least recently used dropped beyond `max_bytes`.

    A run reads each clip many times: the corpus check, and the preloaded splits of every
    candidate, cross-validation fold and test pass. Decoding and resampling is the same work each
    time, so it is done once. A file is reused only while its stat (device, inode, size and
    modification time in ns) is the one it was decoded at; an edited or replaced file is decoded anew.
    A file modified in the last `RECENT_NS` is not kept: a later write could land in the same tick.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._kept: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()

    def read(self, path: str | Path, sample_rate: int) -> np.ndarray:
        """`load_audio(path, sample_rate)`, float32 (N,): a copy of the kept waveform, or decoded and kept."""
        name = os_path(path)
        try:
            st = os.stat(name)
        except OSError:
            st = None
        if st is None or not stat.S_ISREG(st.st_mode):
            # load_audio says what is wrong with it.
            return load_audio(path, sample_rate)
        key = (name, sample_rate, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        kept = self._kept.get(key)
        if kept is None:
            kept = load_audio(path, sample_rate)
            settled = time.time_ns() - st.st_mtime_ns >= RECENT_NS
            if settled and kept.nbytes <= self.max_bytes:
                self._kept[key] = kept
                self.bytes += kept.nbytes
                while self.bytes > self.max_bytes:
                    self.bytes -= self._kept.popitem(last=False)[1].nbytes
        else:
            self._kept.move_to_end(key)
        # A copy: the caller may change its waveform in place.
        return kept.copy()


# The process's kept waveforms: the corpus check and the preloaded datasets read through it.
DECODED = DecodedAudio(DECODED_BYTES)


def downmix_resample(data: np.ndarray, orig_sr: int, target_sr: int, name: str) -> np.ndarray:
    """Check float32 samples (N, C), average their channels and resample -> float32 (N',).

    Samples must be finite and at most MAX_SAMPLE_PEAK in magnitude, each checked with its own
    message before the channel mean (which could overflow to infinity) is taken. Files
    (`load_audio`) and in-memory arrays (`sqa.load(...).score`) both go through here, so the
    same audio gets the same waveform either way.
    """
    if not np.isfinite(data).all():
        raise AudioError(f"{name}: the audio holds NaN or infinite samples")
    peak = max(float(data.max()), -float(data.min()))  # no |data| copy of a long clip
    if peak > MAX_SAMPLE_PEAK:
        raise AudioError(
            f"{name}: samples as large as {peak:.3g}; audio must be in [-1, 1] or a sane range "
            f"(at most {MAX_SAMPLE_PEAK:.0f}, int32 PCM's full scale)"
        )
    # One channel is its own mean (exactly); taking it as is saves a copy of a long clip.
    wav = data[:, 0] if data.shape[1] == 1 else data.mean(axis=1)
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
