"""What a `Scorer` is given: paths and arrays told apart, each array's rate checked, checked and resampled."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from sqa.data.audio import MAX_SAMPLE_RATE, check_audio_size, downmix_resample, load_audio
from sqa.scoring.clips import as_samples


@dataclass(frozen=True)
class ClipInputs:
    """One clip or a list of clips (`single`), by position: names, file paths, array positions."""

    single: bool
    clips: list[Any]
    names: list[str]
    files: dict[int, str]
    arrays: list[int]


def clip_inputs(audio: Any, sample_rate: int | None) -> ClipInputs:
    """Split a clip or list (or tuple) of clips into paths (str or os.PathLike) and arrays, by position.

    A rate given for paths alone is refused: a file is read at its header's rate, so it would be
    ignored.
    """
    single = not isinstance(audio, list | tuple)
    clips = [audio] if single else list(audio)
    names = ["audio"] if single else [f"audio[{i}]" for i in range(len(clips))]
    files = {i: os.fspath(clip) for i, clip in enumerate(clips) if isinstance(clip, str | os.PathLike)}
    arrays = [i for i in range(len(clips)) if i not in files]
    if files and not arrays and sample_rate is not None:
        raise ValueError(
            f"sample_rate {sample_rate!r} applies to arrays only; a file is read at its header's "
            "rate: leave sample_rate out"
        )
    return ClipInputs(single, clips, names, files, arrays)


def one_waveform(audio: Any, sample_rate: int | None, rate: int, max_samples: int) -> np.ndarray:
    """The mono waveform (N,) at `rate` of one clip: a path read at its header's rate, or an array."""
    if isinstance(audio, str | os.PathLike):
        if sample_rate is not None:
            raise ValueError("sample_rate applies to arrays only; a file is read at its header's rate")
        return load_audio(audio, rate, max_samples)
    return array_waveforms([audio], ["audio"], sample_rate, rate, max_samples)[0]


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
