"""f0 extraction with an on-disk f0 cache.

f0 is computed once per clip and extractor setting and cached (keyed by a hash of the waveform
and the settings). The pitch features the model computes from it are in
`sqa.models.pitch_features`.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from pathlib import Path

import numpy as np
import torch

from sqa.core.atomic import atomic_write
from sqa.core.extras import require


class F0Extractor:
    """f0 (Hz, 0 = unvoiced) at a fixed frame period by WORLD DIO + StoneMask or torchfcpe.

    `method="dio"` is the paper's extractor; `method="fcpe"` uses torchfcpe's bundled network,
    more robust for low voices where DIO can lock onto a harmonic. Voiced values above `f0_ceil`
    are clipped to it. With `cache_dir`, results are stored on disk and never recomputed.
    """

    def __init__(
        self,
        method: str = "dio",
        frame_period_ms: float = 20.0,
        f0_floor: float = 40.0,
        f0_ceil: float = 799.0,
        cache_dir: str | None = None,
    ) -> None:
        if method not in ("dio", "fcpe"):
            raise ValueError(f"f0 method must be 'dio' or 'fcpe', got {method!r}")
        self.method = method
        self.frame_period_ms = frame_period_ms
        self.f0_floor = f0_floor
        self.f0_ceil = f0_ceil
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._fcpe = None
        self.computed = 0  # number of f0 computations (cache misses), for tests and benchmarks

    def settings(self) -> dict:
        """The settings that determine the f0 track (part of the cache key and of exports)."""
        return {
            "method": self.method,
            "frame_period_ms": self.frame_period_ms,
            "f0_floor": self.f0_floor,
            "f0_ceil": self.f0_ceil,
        }

    def export_config(self) -> dict:
        """Hydra config rebuilding this extractor (without a cache)."""
        return {"_target_": f"{__name__}.F0Extractor", **self.settings()}

    def __call__(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        """f0 track (T,) float32 of a mono waveform (N,), from the cache when present."""
        path = self._cache_path(wav, sample_rate) if self.cache_dir else None
        if path is not None and path.is_file():
            return np.load(path)
        f0 = self.compute(wav, sample_rate)
        if path is not None:
            # Atomic: a concurrent run or a kill never leaves a half-written cache entry.
            atomic_write(path, lambda fh: np.save(fh, f0))
        return f0

    def _cache_path(self, wav: np.ndarray, sample_rate: int) -> Path:
        digest = hashlib.sha1(np.ascontiguousarray(wav, dtype=np.float32).tobytes())
        digest.update(json.dumps({**self.settings(), "sample_rate": sample_rate}).encode())
        key = digest.hexdigest()
        return self.cache_dir / key[:2] / f"{key}.npy"

    def compute(self, wav: np.ndarray, sample_rate: int) -> np.ndarray:
        """Extract f0 (T,) without the cache; T = N / hop + 1 frames centred on multiples of hop."""
        self.computed += 1
        f0 = self._dio(wav, sample_rate) if self.method == "dio" else self._fcpe_f0(wav, sample_rate)
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
        frames = int(len(wav) / (sample_rate * self.frame_period_ms / 1000)) + 1
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
