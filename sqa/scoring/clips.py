"""From audio to the pieces a predictor scores: checked samples, warnings, windows and f0 tracks.

Shared by arrays (`Scorer.score`) and files (`file_batches`: `FileClips` decoded in DataLoader
workers in length-sorted batches), which `sqa-score` and `sqa-baseline` read alike.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from sqa.data.audio import MAX_AUDIO_SAMPLES, AudioError, audio_info, check_audio_size, load_audio, pad_to
from sqa.data.pitch import F0Extractor
from sqa.data.vocal import vocal_part
from sqa.models.backbone import W2V_HOP, W2V_WINDOW, conv_frame_lengths

# Peak amplitude below which a clip counts as silent (-80 dBFS).
SILENCE_PEAK = 1e-4
# Peak amplitude above which float samples are far outside [-1, 1] (+6 dBFS): a float file or
# array may overshoot full scale a little, but not by this much unless it holds integer PCM values.
LOUD_PEAK = 2.0
# A 2-D clip's channels are its last dimension, of at most this many entries, the other longer:
# (samples, channels), what soundfile.read returns. Rows are clips, as in SHEET's and SingMOS's
# (batch, samples): `Scorer.score` splits a batch, and one clip of several rows is refused.
MAX_CHANNELS = 8


# The sqa package's folder: a warning points at the caller of the outermost frame inside it.
_PACKAGE = os.path.dirname(os.path.dirname(__file__)) + os.sep


class ClipWarning(UserWarning):
    """A clip was scored, but its score says little (too short, silent, or far above full scale)."""


class DecodingWarning(UserWarning):
    """A decoding worker died (e.g. killed by the system); its files were decoded in this process."""


def warn_at_caller(message: str, category: type[Warning]) -> None:
    """Warn at the line that called into sqa (the outermost sqa frame's caller), however deep the cause."""
    # A fixed stacklevel points at the caller only from one call path (score vs. score_files).
    frame, level, outermost = sys._getframe(1), 2, 2
    while frame is not None:
        if frame.f_code.co_filename.startswith(_PACKAGE):
            outermost = level
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=outermost + 1)


def as_samples(audio: Any, name: str) -> np.ndarray:
    """Float32 samples (N, C) of a float numpy array or torch tensor: (N,), (1, N) or (N, C), C <= 8 < N."""
    if isinstance(audio, torch.Tensor):
        if not audio.is_floating_point():
            raise TypeError(f"{name}: expected floating-point samples, got a {audio.dtype} tensor")
        audio = audio.detach().to("cpu", torch.float32).numpy()
    array = np.asarray(audio)
    if not np.issubdtype(array.dtype, np.floating):
        raise TypeError(
            f"{name}: expected floating-point samples in [-1, 1], got {array.dtype}; "
            "scale integer PCM first (e.g. x / 32768 for int16)"
        )
    if array.ndim <= 2 and array.size == 0:
        raise AudioError(f"{name}: the clip holds no samples")
    if array.ndim == 1:
        array = array[:, None]
    elif array.ndim == 2:
        rows, columns = array.shape
        if rows == 1 and columns > MAX_CHANNELS:
            array = array.T
        elif not columns <= MAX_CHANNELS < rows:
            raise ValueError(
                f"{name}: a 2-D clip is (samples, channels), with at most {MAX_CHANNELS} channels and "
                f"more samples, or (1, samples); shape {tuple(array.shape)} is neither: rows are clips "
                "(score(batch) scores a (clips, samples) batch, one score per row); for one clip's "
                "channels pass (samples, channels) or their mean"
            )
    else:
        raise ValueError(
            f"{name}: expected a 1-D, (1, samples) or (samples, channels) clip, got shape {array.shape}"
        )
    return np.ascontiguousarray(array, dtype=np.float32)


def clip_warning(wav: np.ndarray, sample_rate: int, min_samples: int) -> str | None:
    """Why a waveform's score says little (too short, far above full scale, or silent), or None."""
    if wav.shape[0] < min_samples:
        return (
            f"only {wav.shape[0]} samples ({1000 * wav.shape[0] / sample_rate:.1f} ms), shorter than the "
            f"model's {min_samples}-sample receptive field: padded with silence before scoring"
        )
    peak = max(float(wav.max()), -float(wav.min()))  # no |wav| copy of a long clip
    if peak > LOUD_PEAK:
        return (
            f"peak {peak:g} is far above full scale (1.0): the samples look like integer PCM values "
            "stored as floats (int16 scale: divide by 32768); scored as given, the score is unreliable"
        )
    if peak < SILENCE_PEAK:
        return "silent (peak below -80 dBFS): scored, but the score says nothing about singing"
    return None


# A piece of a clip: waveform (n,), its f0 track (T',) or None, and the frames [lo, hi) of its
# output that count towards the clip's score (None: all of them).
Piece = tuple[np.ndarray, np.ndarray | None, tuple[int, int] | None]


def clip_frames(samples: int) -> int:
    """Frames a clip of `samples` samples yields (the 400/320 front end; 1 for a padded short clip)."""
    return int(conv_frame_lengths(torch.tensor(max(samples, W2V_WINDOW))))


def windows(samples: int, window: int) -> list[tuple[int, int, int, int]]:
    """Overlapping windows (start, stop, lo, hi) over `samples` samples whose kept frames tile the clip.

    `window` is a multiple of the 320-sample hop. Each window sees a quarter of its length of
    context on either side of the frames it keeps (its centre half), so every frame of the clip
    is kept by exactly one window and scored with context around it; the first window keeps its
    start and the last, aligned to end with the clip, keeps its end. `lo`, `hi` index the
    window's own frames.
    """
    margin = max(W2V_HOP, window // 4 // W2V_HOP * W2V_HOP)
    hop = window - 2 * margin
    total = clip_frames(samples)
    out = []
    kept = 0
    start = 0
    while start + window < samples and (end := (start + window - margin) // W2V_HOP) < total:
        out.append((start, start + window, kept - start // W2V_HOP, end - start // W2V_HOP))
        kept = end
        start += hop
    # The last window ends with the clip, so it is full length and keeps the clip's last frames.
    start = (samples - window) // W2V_HOP * W2V_HOP
    out.append((start, samples, kept - start // W2V_HOP, total - start // W2V_HOP))
    return out


@dataclass(frozen=True)
class ClipPreparer:
    """Turns a waveform (N,) at the model's rate into the pieces the predictor scores.

    A clip longer than `chunk_samples` (None: never) is cut into overlapping windows of that
    length (a multiple of the 20 ms frame hop, at least 4 hops), and each window's centre frames
    count (`windows`); each piece is padded to `min_samples` and carries its f0 track when the
    model has a pitch branch. With `vocal_only`, `clip` first trims the waveform to its vocal
    span (`sqa.data.vocal`), and a clip without one gets no pieces and the reason.
    """

    sample_rate: int
    min_samples: int
    chunk_samples: int | None
    f0_extractor: F0Extractor | None
    vocal_only: bool = False

    def clip(self, index: int, wav: np.ndarray) -> PreparedClip:
        """Input `index`'s waveform (N,) prepared: its pieces and warning, or why it has no score."""
        if self.vocal_only:
            part, reason = vocal_part(wav, self.sample_rate)
            if part is None:
                return PreparedClip(index, [], reason=reason)
            wav = part
        return PreparedClip(index, self(wav), warning=clip_warning(wav, self.sample_rate, self.min_samples))

    def __call__(self, wav: np.ndarray) -> list[Piece]:
        """Pieces [(waveform (n,), f0 (T',) or None, kept frames or None)] of `wav`, in time order."""
        pieces: list[tuple[np.ndarray, tuple[int, int] | None]] = [(wav, None)]
        if self.chunk_samples is not None and wav.shape[0] > self.chunk_samples:
            spans = windows(wav.shape[0], self.chunk_samples)
            pieces = [(wav[start:stop], (lo, hi)) for start, stop, lo, hi in spans]
        padded = [(pad_to(piece, self.min_samples), keep) for piece, keep in pieces]
        if self.f0_extractor is None:
            return [(piece, None, keep) for piece, keep in padded]
        return [(piece, self.f0_extractor(piece, self.sample_rate), keep) for piece, keep in padded]


@dataclass(frozen=True)
class PreparedClip:
    """One input after decoding: its pieces, or why it could not be read or has no score, and any warning."""

    index: int
    pieces: list[Piece]
    error: str | None = None
    warning: str | None = None
    # Why a readable clip gets no score (no vocal activity under `vocal_only`); it has no pieces.
    reason: str | None = None


class FileClips(Dataset):
    """Decodes file `i` of `paths` (in a DataLoader worker) into a `PreparedClip`; see `load_audio`."""

    def __init__(
        self, paths: Sequence[str], prepare: ClipPreparer, max_samples: int = MAX_AUDIO_SAMPLES
    ) -> None:
        self.paths = paths
        self.prepare = prepare
        self.max_samples = max_samples

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> PreparedClip:
        """The prepared clip of file `index`, or its decoding error."""
        try:
            wav = load_audio(self.paths[index], self.prepare.sample_rate, self.max_samples)
        except AudioError as err:
            return PreparedClip(index, [], str(err))
        return self.prepare.clip(index, wav)


def as_list(items: list[PreparedClip]) -> list[PreparedClip]:
    """Collation of `FileClips` batches: the prepared clips as they are."""
    return items


def file_batches(
    paths: Sequence[str],
    prepare: ClipPreparer,
    batch_size: int,
    num_workers: int = 0,
    max_samples: int = MAX_AUDIO_SAMPLES,
) -> Iterator[list[PreparedClip]]:
    """Batches of prepared clips of `paths` (`index`: the position in `paths`), as they are decoded.

    Every header is read and checked (`check_audio_size`) first: a file that fails comes at once
    as a batch of its own with `error` set. The others are decoded by `num_workers` DataLoader
    workers (0: in this process) in batches of `batch_size` files of similar length, sorted by
    the length in their headers, so decoded audio held at once is bounded by the batch. If a
    worker dies (killed by the system, say), the batches not yet delivered, its own among them,
    are decoded in this process after a `DecodingWarning`, so that no file is lost with it.
    """
    lengths: dict[int, float] = {}
    for i, path in enumerate(paths):
        try:
            rate, frames, channels = audio_info(path)
            check_audio_size(path, rate, frames, channels, prepare.sample_rate, max_samples)
        except AudioError as err:
            yield [PreparedClip(i, [], str(err))]
            continue
        lengths[i] = frames / rate
    order = sorted(lengths, key=lengths.__getitem__)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    clips = FileClips(paths, prepare, max_samples)
    done = 0
    if num_workers > 0:
        loader = DataLoader(clips, batch_sampler=batches, num_workers=num_workers, collate_fn=as_list)
        try:
            with _worker_deaths_raised_here(iter(loader)) as decoded:
                for items in decoded:
                    done += 1  # batches come in order: the first `done` are delivered
                    yield items
        except RuntimeError as err:
            # A dead worker only; an error inside one reads "Caught ... in DataLoader worker process".
            if "DataLoader worker (pid" not in str(err):
                raise
            files = sum(len(batch) for batch in batches[done:])
            warn_at_caller(
                f"a decoding worker exited unexpectedly ({err}); the remaining {files} file(s), the "
                "dead worker's among them, are decoded in this process",
                DecodingWarning,
            )
    # Without workers, or after a worker died: decoded here, each file's errors reported as usual.
    for batch in batches[done:]:
        yield [clips[i] for i in batch]


@contextmanager
def _worker_deaths_raised_here(decoded: Iterator[list[PreparedClip]]) -> Iterator[Iterator]:
    """`decoded` (a started DataLoader iterator) with torch's SIGCHLD handler kept from raising.

    When a worker dies, that handler raises wherever the main thread is, e.g. inside the model's
    forward between two batches, where the batches still to come could not be decoded here.
    Quieted, the handler still calls any handler it wraps, and the DataLoader finds the dead
    worker itself (polling, within seconds) inside `file_batches`'s loop.
    """
    # torch installs its handler from the main thread only (when the first iterator starts).
    main = threading.current_thread() is threading.main_thread() and hasattr(signal, "SIGCHLD")
    installed = signal.getsignal(signal.SIGCHLD) if main else None
    if not callable(installed):
        yield decoded
        return

    def quiet(signum: int, frame: Any) -> None:
        # The DataLoader raises the same error from its own check, inside the loop.
        with suppress(RuntimeError):
            installed(signum, frame)

    signal.signal(signal.SIGCHLD, quiet)
    try:
        yield decoded
    finally:
        signal.signal(signal.SIGCHLD, installed)
