"""Score audio with an exported predictor: the object behind `sqa.load` and `sqa-score`.

Arrays and files take one path: float32 samples (N, C) -> `downmix_resample` (channel mean,
soxr resampling to the export's rate) -> optional windows of `chunk_seconds` -> length-sorted
batches -> the predictor's pooling of each clip's frame scores (the export's `pooling`, or the
one asked for). Batches give the scores of one-by-one calls (per-clip pooling; GroupNorm front
ends run each length on its own), so batch size and order never change a score. Files are
decoded in DataLoader workers in batches sorted by their header's length, so decoded audio held
at once is bounded by the batch, never by the number of inputs; results still come back in
input order. Scoring imports neither Lightning nor Hydra; a backbone library is imported only
when the export uses it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sqa.data.audio import (
    MAX_AUDIO_SAMPLES,
    MAX_SAMPLE_RATE,
    AudioError,
    check_audio_size,
    chunk_seconds_problem,
    downmix_resample,
)
from sqa.data.batching import pad_batch
from sqa.exports.format import learning_warning, load_export
from sqa.models.backbone import W2V_HOP
from sqa.models.predictor import POOLINGS
from sqa.scoring.clips import (
    ClipPreparer,
    ClipWarning,
    Piece,
    PreparedClip,
    as_samples,
    clip_warning,
    file_batches,
    warn_at_caller,
)

# The shortest window (seconds) whose chunked scores stayed within 0.02 MOS of whole-clip scores
# on 3-minute varied songs, by backbone class (benchmarks/chunking.py; docs/scoring.md). Shorter
# windows, and backbones not measured, warn when a clip is chunked.
CHUNK_SECONDS_WITHIN_0_02 = {"LogMelBackbone": 10.0, "TorchaudioWav2Vec2": 5.0}


def chunk_warning(backbone: str, chunk_seconds: float) -> str | None:
    """Why chunked scores of `backbone` (a class name) in `chunk_seconds` windows may move, or None."""
    bound = CHUNK_SECONDS_WITHIN_0_02.get(backbone)
    if bound is None:
        return f"chunked scoring of a {backbone} backbone was not measured against whole-clip scoring"
    if chunk_seconds < bound:
        return (
            f"{backbone} windows shorter than {bound:g} s moved scores of long songs by more than 0.02 MOS "
            "against whole-clip scoring (docs/scoring.md); use longer windows where memory allows"
        )
    return None


def resolve_domain(domain: str | int | None, domains: list[str], embedded: int | None = None) -> int:
    """Index of `domain` (a name or an index) in `domains`; None means the first one.

    `embedded` is the number of domains the model's embedding holds (None: as many as
    `domains`): a domain of the list beyond it (a config.yaml listing more domains than the
    model was built with) is refused by name rather than failing inside the embedding.
    """
    if domain is None:
        return 0
    text = str(domain)
    if isinstance(domain, int) or (text.isascii() and text.isdigit()):
        # Compared as text first: int() of thousands of digits is itself an error.
        index = int(domain) if len(text) <= 9 else -1
        if not 0 <= index < max(len(domains), 1):
            raise ValueError(f"domain index {text} out of range for domains {domains}")
    elif domain not in domains:
        raise ValueError(f"unknown domain {domain!r}; the export knows {domains}")
    else:
        index = domains.index(domain)
    if embedded is not None and index >= embedded:
        # Reached only with a non-empty list: an empty one allows index 0, which every model embeds.
        raise ValueError(
            f"domain {domains[index]!r} (index {index}): the export's config.yaml lists domains "
            f"{domains}, but its model embeds only {embedded} (model.num_domains): the first "
            f"{embedded} of the list can be scored"
        )
    return index


def resolve_device(device: str | torch.device) -> torch.device:
    """`"auto"` -> the GPU when one is present, else the CPU; any other name must be usable here."""
    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as err:
        raise ValueError(f"unknown device {str(device)!r} ({err})") from err
    if resolved.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (resolved.index is not None and resolved.index >= count):
            raise ValueError(f"device {str(device)!r} is not available: this machine has {count} CUDA GPU(s)")
    elif resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {str(device)!r} is not available on this machine")
    return resolved


class LearningWarning(UserWarning):
    """The export's model did not beat the constant training-mean predictor on its own test data."""


class ChunkWarning(UserWarning):
    """Chunked scores of this backbone and window length may differ from whole-clip scores."""


@dataclass(frozen=True)
class ScoreResult:
    """The overall score of input `index` and its other dimensions' scores, or why it failed."""

    path: str
    score: float | None
    error: str | None = None
    dimension_scores: Mapping[str, float] = field(default_factory=dict)
    warning: str | None = None
    index: int = 0


class Scorer:
    """An export loaded for scoring paths and arrays (`score`) and many files (`score_files`); see `sqa.load`.

    A predictor trained with domain IDs scores every clip as coming from `domain` (a domain name
    or index of the export's `domains` list); the default is the first domain of that list
    (annotation batch p1 for SingMOS-Pro); a `domain` for a predictor without domain IDs is a
    ValueError. A predictor trained with judges scores as its mean judge. `dimensions` are the
    export's score dimensions, the overall "mos" first. With `chunk_seconds`, longer clips are
    scored in windows of about that length and their scores averaged weighted by frames, which
    bounds memory (attention is quadratic in length). An input whose header declares more than
    `max_samples` samples (frames x channels, or resampled to the export's rate) is refused
    before it is decoded, like an unreadable file.
    `pooling` (one of `sqa.models.predictor.POOLINGS`; None: the export's own) chooses how frame
    scores become a clip's score, e.g. "masked_mean" for an imported predictor that records
    its authors' "s3prl_padded_mean".
    """

    def __init__(
        self,
        export: str | Path,
        device: str | torch.device = "cpu",
        batch_size: int = 8,
        domain: str | int | None = None,
        chunk_seconds: float | None = None,
        max_samples: int = MAX_AUDIO_SAMPLES,
        pooling: str | None = None,
    ) -> None:
        if max_samples < 1:
            raise ValueError(f"max_samples must be at least 1, got {max_samples}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if chunk_seconds is not None and (problem := chunk_seconds_problem(chunk_seconds)):
            raise ValueError(f"chunk_seconds {problem}")
        if pooling is not None and pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.device = resolve_device(device)
        self.predictor, self.config, self.f0_extractor = load_export(export)
        # Said on every load: a user may score with a model that learned nothing without knowing it.
        self.learning_warning = learning_warning(export)
        if self.learning_warning is not None:
            warn_at_caller(self.learning_warning, LearningWarning)
        if pooling is not None:
            self.predictor.pooling = pooling
        self.predictor.to(self.device)
        self.dimensions = list(self.predictor.dimensions)
        if domain is not None and self.predictor.domain is None:
            # Scoring "as a domain" would change nothing: refused rather than silently ignored.
            raise ValueError(
                f"domain {domain!r}: this model has no domain embedding (it was trained without domain "
                "IDs), so it scores every clip alike; leave the domain out"
            )
        embedded = None if self.predictor.domain is None else self.predictor.domain.embedding.num_embeddings
        self.domain = resolve_domain(domain, self.config.get("domains", []), embedded)
        self.sample_rate = int(self.config["sample_rate"])
        self.min_samples = int(self.predictor.backbone.min_samples)
        self.batch_size = batch_size
        self.max_samples = max_samples
        chunk = None
        self.chunk_warning = None
        if chunk_seconds is not None:
            self.chunk_warning = chunk_warning(type(self.predictor.backbone).__name__, chunk_seconds)
            hops = max(4, round(chunk_seconds * self.sample_rate / W2V_HOP))
            chunk = max(self.min_samples, hops * W2V_HOP)
        self.prepare = ClipPreparer(self.sample_rate, self.min_samples, chunk, self.f0_extractor)

    def to(self, device: str | torch.device) -> Scorer:
        """Move the predictor to `device` ("auto", "cpu", "cuda:1", ...); returns self."""
        self.device = resolve_device(device)
        self.predictor.to(self.device)
        return self

    def score(
        self, audio: Any, sample_rate: int | None = None
    ) -> float | dict[str, float] | list[float] | list[dict[str, float]]:
        """Score a clip, or a list (or tuple) of clips in input order: paths, arrays, or both mixed.

        A path (str or os.PathLike) is read as `sqa-score` reads it, at its header's rate. An
        array is a float numpy array or torch tensor at `sample_rate` Hz (any rate; resampled as
        files are): 1-D (samples,), or 2-D with exactly one dimension of at most 8 (the channels,
        averaged) and the other longer, so (channels, samples) and (samples, channels), what
        `soundfile.read` returns, are both understood; a 2-D shape with both or neither
        dimension at most 8 (e.g. (4, 4), or (16, 16000), which may be a batch) is refused.
        `sample_rate` applies to arrays only: needed where the input holds an array, refused
        where it holds paths only (their rates are their headers'). Returns one float per clip,
        or a dict {dimension: score} per clip when the model has several score dimensions; a
        list for a list of clips. An unreadable file raises `sqa.data.audio.AudioError` (a
        ValueError) naming it.
        """
        single = not isinstance(audio, list | tuple)
        clips = [audio] if single else list(audio)
        names = ["audio"] if single else [f"audio[{i}]" for i in range(len(clips))]
        files = {i: os.fspath(clip) for i, clip in enumerate(clips) if isinstance(clip, str | os.PathLike)}
        arrays = [i for i in range(len(clips)) if i not in files]
        if files and not arrays and sample_rate is not None:
            # A file's rate is its header's: a rate given for it would be ignored, so it is refused.
            raise ValueError(
                f"sample_rate {sample_rate!r} applies to arrays only; a file is read at its header's "
                "rate: leave sample_rate out"
            )
        wavs = self._waveforms([clips[i] for i in arrays], [names[i] for i in arrays], sample_rate)
        rows = dict(zip(arrays, self.score_dimensions(wavs), strict=True))
        positions = list(files)
        # As batches finish: an unreadable file (its header is read first) stops the call at once.
        for result in self._file_results(list(files.values()), 0):
            if result.error is not None:
                raise AudioError(result.error)
            if result.warning is not None:
                warn_at_caller(f"{result.path}: {result.warning}", ClipWarning)
            rows[positions[result.index]] = [result.score, *result.dimension_scores.values()]
        out = [
            rows[i][0] if len(rows[i]) == 1 else dict(zip(self.dimensions, rows[i], strict=True))
            for i in range(len(clips))
        ]
        return out[0] if single else out

    def _waveforms(self, arrays: list[Any], names: list[str], sample_rate: int | None) -> list[np.ndarray]:
        """Mono waveforms (N,) at the export's rate of `arrays` at `sample_rate`, checked and warned of."""
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
            raise ValueError(
                f"sample_rate must be an integer in 1..{MAX_SAMPLE_RATE} Hz, got {sample_rate!r}"
            )
        samples = [as_samples(array, name) for array, name in zip(arrays, names, strict=True)]
        for array, name in zip(samples, names, strict=True):
            check_audio_size(name, int(sample_rate), *array.shape, self.sample_rate, self.max_samples)
        wavs = [
            downmix_resample(array, int(sample_rate), self.sample_rate, name)
            for array, name in zip(samples, names, strict=True)
        ]
        for wav, name in zip(wavs, names, strict=True):
            warning = clip_warning(wav, self.sample_rate, self.min_samples)
            if warning is not None:
                warn_at_caller(f"{name}: {warning}", ClipWarning)
        return wavs

    def score_waveforms(self, wavs: list[np.ndarray]) -> list[float]:
        """Overall scores of mono float32 waveforms (N,) at the export's `sample_rate`, in order."""
        return [row[0] for row in self.score_dimensions(wavs)]

    def score_dimensions(self, wavs: list[np.ndarray]) -> list[list[float]]:
        """Scores of every dimension (one list of K per waveform (N,) at `sample_rate`), in order."""
        clips = [PreparedClip(i, self.prepare(wav)) for i, wav in enumerate(wavs)]
        return [row for _, row in self._score_prepared(clips)]

    def score_files(
        self, paths: Iterable[str | os.PathLike], num_workers: int = 0, ordered: bool = True
    ) -> Iterator[ScoreResult]:
        """Score audio files, yielding one result per file in input order (`index`: its position).

        Files are decoded by `num_workers` DataLoader workers (0: in this process) in batches of
        similar length, sorted by the length in their headers; a batch's results (never its
        audio) wait until every earlier file's result has been yielded. `ordered=False` yields
        each batch's results as soon as it finishes instead (`index` says whose each is), e.g. to
        drive a progress bar. Unreadable files yield a result with `error` set.
        """
        results = self._file_results([str(p) for p in paths], num_workers)
        if not ordered:
            yield from results
            return
        waiting: dict[int, ScoreResult] = {}
        done = 0
        for result in results:
            waiting[result.index] = result
            while done in waiting:
                yield waiting.pop(done)
                done += 1

    def _file_results(self, paths: list[str], num_workers: int) -> Iterator[ScoreResult]:
        """A result per file of `paths`, as its length-sorted batch finishes (header errors first)."""
        for items in file_batches(paths, self.prepare, self.batch_size, num_workers, self.max_samples):
            for item in items:
                if item.error is not None:
                    yield ScoreResult(paths[item.index], None, item.error, index=item.index)
            readable = [item for item in items if item.error is None]
            for item, row in self._score_prepared(readable):
                extra = dict(zip(self.dimensions[1:], row[1:], strict=True))
                yield ScoreResult(paths[item.index], row[0], None, extra, item.warning, item.index)

    def _score_prepared(self, clips: list[PreparedClip]) -> list[tuple[PreparedClip, list[float]]]:
        """Each clip's scores (K,): the mean over its pieces' kept frames (a whole clip: its score)."""
        if self.chunk_warning and any(len(clip.pieces) > 1 for clip in clips):
            warn_at_caller(self.chunk_warning, ChunkWarning)
            self.chunk_warning = None  # once per Scorer
        scores, sums, counts = self._forward([piece for clip in clips for piece in clip.pieces])
        out = []
        start = 0
        for clip in clips:
            rows = slice(start, start + len(clip.pieces))
            start = rows.stop
            if len(clip.pieces) == 1:
                out.append((clip, scores[rows.start].tolist()))
                continue
            # Frame scores are on the head's 1-5 scale; the map to the user's scale is linear.
            mean = torch.from_numpy(sums[rows].sum(axis=0) / counts[rows].sum())
            out.append((clip, self.predictor.to_scale(mean).tolist()))
        return out

    @torch.inference_mode()
    def _forward(self, pieces: list[Piece]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Scores (P, K), sums of kept frame scores (P, K) and kept frame counts (P,) of pieces.

        Pieces go in length-sorted batches of `batch_size`.
        """
        scores = np.zeros((len(pieces), len(self.dimensions)), dtype=np.float32)
        sums = np.zeros((len(pieces), len(self.dimensions)), dtype=np.float64)
        counts = np.zeros(len(pieces), dtype=np.int64)
        order = sorted(range(len(pieces)), key=lambda i: pieces[i][0].shape[0])
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            wav, lengths = pad_batch([torch.from_numpy(pieces[i][0]) for i in idx])
            f0 = None
            if self.f0_extractor is not None:
                f0 = pad_batch([torch.from_numpy(pieces[i][1]) for i in idx])[0].to(self.device)
            domain = torch.full((len(idx),), self.domain, device=self.device)
            out = self.predictor(wav.to(self.device), lengths.to(self.device), domain, f0)
            scores[idx] = self.predictor.to_scale(out.scores.float()).cpu().numpy()
            frame_scores = out.dim_frame_scores.double().cpu().numpy()
            for row, i in enumerate(idx):
                lo, hi = pieces[i][2] or (0, int(out.frame_lengths[row]))
                sums[i] = frame_scores[row, lo:hi].sum(axis=0)
                counts[i] = hi - lo
        return scores, sums, counts
