"""What a `Scorer` is given: paths, folders, patterns, batches and arrays told apart; arrays resampled."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sqa.data.audio import MAX_SAMPLE_RATE, check_audio_size, downmix_resample, load_audio
from sqa.scoring.clips import MAX_CHANNELS, as_samples
from sqa.scoring.walks import listed_audio


@dataclass(frozen=True)
class ClipInputs:
    """One clip, a list of clips or the files of a folder or pattern, by position: names, paths, arrays.

    `single`: one clip (one result); `keyed`: a folder's or pattern's files (results keyed by path).
    """

    single: bool
    clips: list[Any]
    names: list[str]
    files: dict[int, str]
    arrays: list[int]
    keyed: bool = False


def is_batch(audio: Any) -> bool:
    """Whether `audio` is a (clips, samples) batch: 2-D, fewer rows than columns, more than 8 columns.

    SHEET's and SingMOS's predictors take (batch, samples); a clip's channels go last, as
    `soundfile.read` returns them, (samples, channels).
    """
    if not isinstance(audio, np.ndarray | torch.Tensor) or audio.ndim != 2:
        return False
    rows, columns = audio.shape
    return 0 < rows < columns and columns > MAX_CHANNELS


def shaped(inputs: ClipInputs, results: list[Any]) -> Any:
    """`results` (one per clip, in order) as the input was given: one, a list, or {path: result}."""
    if inputs.single:
        return results[0]
    if inputs.keyed:
        return dict(zip(inputs.names, results, strict=True))
    return results


def clip_inputs(audio: Any, sample_rate: int | None) -> ClipInputs:
    """Split a clip, a list (or tuple) of clips, a (clips, samples) batch or a folder into paths and arrays.

    A folder or glob pattern (a str or os.PathLike) names its audio files (`sqa-score`'s reading,
    `sqa.scoring.walks.listed_audio`): keyed by path. A rate given for paths alone is refused: a
    file is read at its header's rate, so it would be ignored.
    """
    listed = listed_audio(audio) if isinstance(audio, str | os.PathLike) else None
    if listed is not None:
        found, problem = listed
        if problem is not None:
            raise ValueError(problem)
        paths = [str(p) for p in found]
        _check_rate_for_paths(sample_rate)
        return ClipInputs(False, paths, paths, dict(enumerate(paths)), [], keyed=True)
    batch = is_batch(audio)
    single = not batch and not isinstance(audio, list | tuple)
    clips = [audio] if single else list(audio)
    names = ["audio"] if single else [f"audio[{i}]" for i in range(len(clips))]
    for name, clip in zip(names, clips, strict=True):
        if not single and isinstance(clip, str | os.PathLike) and listed_audio(clip) is not None:
            raise ValueError(
                f"{name}: {os.fspath(clip)!r} is a folder or a glob pattern; score it alone, "
                "score(folder) gives {path: score}, or pass score_files() a list of both"
            )
    files = {i: os.fspath(clip) for i, clip in enumerate(clips) if isinstance(clip, str | os.PathLike)}
    arrays = [i for i in range(len(clips)) if i not in files]
    if files and not arrays:
        _check_rate_for_paths(sample_rate)
    return ClipInputs(single, clips, names, files, arrays)


def _check_rate_for_paths(sample_rate: int | None) -> None:
    if sample_rate is not None:
        raise ValueError(
            f"sample_rate {sample_rate!r} applies to arrays only; a file is read at its header's "
            "rate: leave sample_rate out"
        )


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
