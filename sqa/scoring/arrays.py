"""Arrays given to a `Scorer` with their sample rate: the rate checked, each array checked and resampled."""

from __future__ import annotations

from typing import Any

import numpy as np

from sqa.data.audio import MAX_SAMPLE_RATE, check_audio_size, downmix_resample
from sqa.scoring.clips import as_samples


def array_waveforms(
    arrays: list[Any], names: list[str], sample_rate: int | None, rate: int, max_samples: int
) -> list[np.ndarray]:
    """Mono waveforms (N,) at `rate` of `arrays` at `sample_rate`, each refused past `max_samples`."""
    if not arrays:
        return []
    if sample_rate is None:
        raise TypeError(
            "score() needs the sample_rate of an array, e.g. score(audio, 44100); a path needs none"
        )
    if (
        isinstance(sample_rate, bool)
        or not isinstance(sample_rate, int | np.integer)
        or not 0 < sample_rate <= MAX_SAMPLE_RATE
    ):
        raise ValueError(f"sample_rate must be an integer in 1..{MAX_SAMPLE_RATE} Hz, got {sample_rate!r}")
    samples = [as_samples(array, name) for array, name in zip(arrays, names, strict=True)]
    for array, name in zip(samples, names, strict=True):
        check_audio_size(name, int(sample_rate), *array.shape, rate, max_samples)
    return [
        downmix_resample(array, int(sample_rate), rate, name)
        for array, name in zip(samples, names, strict=True)
    ]
