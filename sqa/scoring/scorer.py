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

import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from sqa.core.spread import INTERVAL_LEVELS, interval
from sqa.data.audio import MAX_AUDIO_SAMPLES, AudioError, chunk_seconds_problem, load_audio
from sqa.data.vocal import vocal_activity
from sqa.exports.format import learning_warning, load_export
from sqa.exports.residual import residual_sigma
from sqa.models.backbone import W2V_HOP
from sqa.models.predictor import POOLINGS
from sqa.models.uncertainty import UncertainMOSPredictor
from sqa.scoring.arrays import array_waveforms
from sqa.scoring.clips import ClipPreparer, ClipWarning, Piece, PreparedClip, file_batches, warn_at_caller
from sqa.scoring.device import resolve_device
from sqa.scoring.domains import MEAN_DOMAIN, default_domain_note, resolve_domain, scored_domains
from sqa.scoring.pieces import forward_pieces, pool_pieces
from sqa.scoring.preferences import Preference, preference
from sqa.scoring.results import ScoreResult, SpreadScore, in_input_order
from sqa.scoring.retrieval import retrieval_for
from sqa.scoring.scorer_warnings import (
    CHUNK_SECONDS_WITHIN_0_02,
    ChunkWarning,
    DomainWarning,
    LearningWarning,
    PreferenceWarning,
    chunk_warning,
)
from sqa.scoring.timeline import HOP_FRAMES, WINDOW_FRAMES, Timeline, build_timeline, window_frames

# Every public name of this module, those now defined in scorer_warnings, domains, device and
# results included, and ClipWarning (docs/scoring.md names it here): each stays `sqa.scoring.scorer.<name>`.
__all__ = [
    "CHUNK_SECONDS_WITHIN_0_02",
    "MEAN_DOMAIN",
    "ChunkWarning",
    "ClipWarning",
    "DomainWarning",
    "LearningWarning",
    "PreferenceWarning",
    "ScoreResult",
    "Scorer",
    "SpreadScore",
    "chunk_warning",
    "default_domain_note",
    "resolve_device",
    "resolve_domain",
]


class Scorer:
    """An export loaded for scoring paths and arrays (`score`) and many files (`score_files`); see `sqa.load`.

    A predictor trained with domain IDs scores every clip as coming from `domain` (a domain name
    or index of the export's `domains` list), or with `domain="mean"` as the mean of its scores
    as each domain the model embeds (one forward pass per domain); the default is the first
    domain of that list (annotation batch p1 for SingMOS-Pro), said once per load by a
    `DomainWarning` (and `domain_note`); a `domain` for a predictor without domain IDs is a
    ValueError. A predictor trained with judges scores as its mean judge. `dimensions` are the
    export's score dimensions, the overall "mos" first. With `chunk_seconds`, longer clips are
    scored in windows of about that length and their scores averaged weighted by frames, which
    bounds memory (attention is quadratic in length). An input whose header declares more than
    `max_samples` samples (frames x channels, or resampled to the export's rate) is refused
    before it is decoded, like an unreadable file.
    `pooling` (one of `sqa.models.predictor.POOLINGS`; None: the export's own) chooses how frame
    scores become a clip's score, e.g. "masked_mean" for an imported predictor that records
    its authors' "s3prl_padded_mean".
    With `vocal_only`, every clip is trimmed to its vocal span (`sqa.data.vocal`: leading and
    trailing silence, noise floor and unpitched sound left out) before it is scored, whatever
    the export; a clip without vocal activity gets no score (None) and a `ClipWarning` saying why.
    None (the default) follows the export: its config.yaml's `vocal_only`, true when it was trained
    on clips cut so (`data.vocal_only`), false otherwise and for imports.
    `mode` ("parametric", "knn" or "fusion") and `domain="neighbours"` use the export's
    datastore.pt (`sqa.scoring.retrieval`; refused for an export without one).
    A predictor with a spread (`sqa.models.uncertainty`) also gives each clip the spread of a
    listener's rating (`score_with_spread`, `ScoreResult.spread`; `distribution` names it, None
    for other exports and in the knn and fusion modes, whose scores the spread was never
    calibrated about). A chunked clip's spread pools its windows' by kept frames, and
    `domain="mean"`'s pools the domains' (`sqa.core.spread.pooled`: the root of the weighted mean
    of the variances).
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
        vocal_only: bool | None = None,
        mode: str = "parametric",
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
        embedded = self.predictor.domain_count
        if domain is not None and embedded is None:
            # Scoring "as a domain" would change nothing: refused rather than silently ignored.
            raise ValueError(
                f"domain {domain!r}: this model has no domain embedding (it was trained without domain "
                "IDs), so it scores every clip alike; leave the domain out"
            )
        # The datastore, where the mode or the domain lookup needs it (None: the head alone).
        self.retrieval = retrieval_for(export, self.predictor, self.config, mode, domain)
        # The spread was trained and calibrated about the head's own score, never a kNN or fused one.
        parametric = self.retrieval is None or self.retrieval.mode == "parametric"
        self.distribution: str | None = None
        if parametric and isinstance(self.predictor, UncertainMOSPredictor):
            self.distribution = self.predictor.distribution
        # The domains scored as, and why (their note: the first of several, none asked for; neighbours).
        domains = list(self.config.get("domains", []))
        self.domains, self.domain_note = scored_domains(domain, domains, embedded, self.retrieval)
        # The index scored as (None: the mean over several).
        self.domain = self.domains[0] if len(self.domains) == 1 else None
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
        if vocal_only is None:
            vocal_only = bool(self.config.get("vocal_only", False))
        self.vocal_only = vocal_only
        self.prepare = ClipPreparer(self.sample_rate, self.min_samples, chunk, self.f0_extractor, vocal_only)
        # The residual spread behind `prefer`'s probabilities (None: none recorded), and why it is not
        # the validation RMSE where it is not; said at the first `prefer`, not on every load.
        self.sigma, self.sigma_note = residual_sigma(export)
        if self.sigma is None:
            self.sigma_note += (
                ": preferences give the score difference only, no probability; pass sigma= (the residual "
                "spread of its scores) to get one"
            )

    def to(self, device: str | torch.device) -> Scorer:
        """Move the predictor to `device` ("auto", "cpu", "cuda:1", ...); returns self."""
        self.device = resolve_device(device)
        self.predictor.to(self.device)
        return self

    def score(
        self, audio: Any, sample_rate: int | None = None
    ) -> float | dict[str, float] | None | list[float | dict[str, float] | None]:
        """Score a clip, or a list (or tuple) of clips in input order: paths, arrays, or both mixed.

        A path (str or os.PathLike) is read as `sqa-score` reads it, at its header's rate. An
        array is a float numpy array or torch tensor at `sample_rate` Hz (any rate; resampled as
        files are): 1-D (samples,), or 2-D with exactly one dimension of at most 8 (the channels,
        averaged) and the other longer, so (channels, samples) and (samples, channels), what
        `soundfile.read` returns, are both understood; a 2-D shape with both or neither
        dimension at most 8 (e.g. (4, 4), or (16, 16000), which may be a batch) is refused.
        `sample_rate` applies to arrays only: needed where the input holds an array, refused
        where it holds paths only (their rates are their headers'). Returns one float per clip,
        or a dict {dimension: score} per clip when the model has several score dimensions, or
        None for a clip without vocal activity under `vocal_only`; a list for a list of clips.
        An unreadable file raises `sqa.data.audio.AudioError` (a ValueError) naming it.
        `score_with_spread` adds the spread of a listener's rating, where the export has one.
        """
        single, rows = self._scored(audio, sample_rate)
        out = [
            row[0] if len(row) == 1 or row[0] is None else dict(zip(self.dimensions, row, strict=True))
            for row, _ in rows
        ]
        return out[0] if single else out

    def score_with_spread(
        self, audio: Any, sample_rate: int | None = None
    ) -> SpreadScore | list[SpreadScore]:
        """Each clip's `SpreadScore`: overall score, spread of a listener's rating, its 90 % interval.

        Takes what `score` takes, and returns one `SpreadScore` (score, spread, (lo90, hi90)) per
        clip, a list for a list: the columns `score`, `spread`, `lo90`, `hi90` of `sqa-score`,
        intervals as in predictions.csv (`sqa.core.spread.interval`). An export without a spread
        gives None spread and interval, so callers can pass any export.
        """
        single, rows = self._scored(audio, sample_rate)
        out = []
        for row, spread in rows:
            if spread is None or self.distribution is None:
                out.append(SpreadScore(row[0], None, None))
                continue
            low, high = interval(row[0], spread, INTERVAL_LEVELS["90"], self.distribution)
            out.append(SpreadScore(row[0], spread, (float(low), float(high))))
        return out[0] if single else out

    def _scored(
        self, audio: Any, sample_rate: int | None
    ) -> tuple[bool, list[tuple[list[float | None], float | None]]]:
        """Whether `audio` is one clip, and per clip in input order its scores (K,) and spread (or None)."""
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
        wavs = array_waveforms(
            [clips[i] for i in arrays],
            [names[i] for i in arrays],
            sample_rate,
            self.sample_rate,
            self.max_samples,
        )
        prepared = [self.prepare.clip(i, wav) for i, wav in zip(arrays, wavs, strict=True)]
        rows = {}
        for clip, row, spread in self._score_prepared(prepared):
            if clip.warning or clip.reason:
                warn_at_caller(f"{names[clip.index]}: {clip.warning or clip.reason}", ClipWarning)
            rows[clip.index] = (row, spread)
        positions = list(files)
        # As batches finish: an unreadable file (its header is read first) stops the call at once.
        for result in self._file_results(list(files.values()), 0):
            if result.error is not None:
                raise AudioError(result.error)
            if result.warning is not None:
                warn_at_caller(f"{result.path}: {result.warning}", ClipWarning)
            rows[positions[result.index]] = ([result.score, *result.dimension_scores.values()], result.spread)
        return single, [rows[i] for i in range(len(clips))]

    def timeline(
        self,
        audio: Any,
        sample_rate: int | None = None,
        window_seconds: float | None = None,
        hop_seconds: float | None = None,
    ) -> Timeline:
        """The score of one clip (a path, or an array at `sample_rate`) over time: see `sqa.scoring.timeline`.

        The frame scores (T,) are those the predictor pools (overall score, on the export's
        scale), so with `masked_mean` pooling and no `vocal_only` the clip's score is their mean;
        windows of `window_seconds` (default 50 frames: 1 s) every `hop_seconds` (25 frames: 0.5
        s) average them, rounded to whole frames. The whole clip is laid out, `vocal_only` or
        not; each window says whether it is vocal. With `chunk_seconds`, the frames are those of
        the chunked scoring.
        """
        hop = int(self.predictor.backbone.hop_length)
        frame_seconds = hop / self.sample_rate
        window = window_frames(window_seconds, frame_seconds, WINDOW_FRAMES, "window_seconds")
        step = window_frames(hop_seconds, frame_seconds, HOP_FRAMES, "hop_seconds")
        if isinstance(audio, str | os.PathLike):
            if sample_rate is not None:
                raise ValueError("sample_rate applies to arrays only; a file is read at its header's rate")
            wav = load_audio(audio, self.sample_rate, self.max_samples)
        else:
            wav = array_waveforms([audio], ["audio"], sample_rate, self.sample_rate, self.max_samples)[0]
        _, frames, _ = self._forward(self.prepare(wav))
        internal = torch.from_numpy(np.concatenate(frames)[:, 0])
        frame_scores = self.predictor.to_scale(internal).numpy()
        activity = vocal_activity(wav, self.sample_rate)
        # Each backbone frame takes the vocal flag of the 20 ms activity frame it starts in.
        at = np.minimum(np.arange(frame_scores.shape[0]) * hop // activity.hop, activity.vocal.shape[0] - 1)
        return build_timeline(frame_scores, activity.vocal[at], frame_seconds, window, step)

    def prefer(
        self, a: Any, b: Any, sample_rate: int | None = None, sigma: float | None = None
    ) -> Preference:
        """Whether clip `a` beats clip `b` (paths or arrays at `sample_rate`): see `sqa.scoring.preferences`.

        Returns both overall scores, their difference a - b and P(a better). For an export with a
        spread, the probability that a listener rates a above b, Φ(diff / √(sd_a² + sd_b²)) of
        the clips' predicted rating spreads (`basis` "listener"). Otherwise, or with `sigma`,
        the probability that a's MOS is above b's, Φ(diff / (√2·σ)), σ the export's validation
        RMSE (or `sigma`; `basis` "mos"); a `PreferenceWarning` says once when σ is the test
        RMSE instead, or when there is none (then the probability is None). A clip without a
        score (no vocal activity under `vocal_only`) is a ValueError.
        """
        if sigma is not None and not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
            raise ValueError(f"sigma must be a positive number, got {sigma!r}")
        if sigma is None and self.distribution is None and self.sigma_note is not None:
            warn_at_caller(self.sigma_note, PreferenceWarning)
            self.sigma_note = None  # once per Scorer
        _, rows = self._scored([a, b], sample_rate)
        for name, (row, _) in zip("ab", rows, strict=True):
            if row[0] is None:
                raise ValueError(f"clip {name} has no score (no vocal activity); no preference can be given")
        (row_a, spread_a), (row_b, spread_b) = rows
        if sigma is not None:
            # A σ given by hand asks the MOS question, whatever the export.
            return preference(row_a[0], row_b[0], sigma)
        spreads = None if self.distribution is None else (spread_a, spread_b, self.distribution)
        return preference(row_a[0], row_b[0], self.sigma, spreads)

    def score_waveforms(self, wavs: list[np.ndarray]) -> list[float | None]:
        """Overall scores of mono float32 waveforms (N,) at the export's `sample_rate`, in order."""
        return [row[0] for row in self.score_dimensions(wavs)]

    def score_dimensions(self, wavs: list[np.ndarray]) -> list[list[float | None]]:
        """Scores of every dimension (one list of K per waveform (N,) at `sample_rate`), in order.

        A waveform without vocal activity under `vocal_only` gets K Nones.
        """
        clips = [self.prepare.clip(i, wav) for i, wav in enumerate(wavs)]
        return [row for _, row, _ in self._score_prepared(clips)]

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
        yield from in_input_order(results) if ordered else results

    def _file_results(self, paths: list[str], num_workers: int) -> Iterator[ScoreResult]:
        """A result per file of `paths`, as its length-sorted batch finishes (header errors first)."""
        for items in file_batches(paths, self.prepare, self.batch_size, num_workers, self.max_samples):
            for item in items:
                if item.error is not None:
                    yield ScoreResult(paths[item.index], None, item.error, index=item.index)
            readable = [item for item in items if item.error is None]
            for item, row, spread in self._score_prepared(readable):
                extra = dict(zip(self.dimensions[1:], row[1:], strict=True))
                warning = item.reason or item.warning
                yield ScoreResult(paths[item.index], row[0], None, extra, warning, item.index, spread)

    def _score_prepared(
        self, clips: list[PreparedClip]
    ) -> list[tuple[PreparedClip, list[float | None], float | None]]:
        """Each clip's scores (K,), the mean over its pieces' kept frames (a whole clip: its own), and spread.

        The spread (None without `distribution`) is a whole clip's own, or its windows' pooled by
        their kept frames (`sqa.core.spread.pooled`). A clip without pieces (no vocal activity)
        gets K Nones and None.
        """
        if self.chunk_warning and any(len(clip.pieces) > 1 for clip in clips):
            warn_at_caller(self.chunk_warning, ChunkWarning)
            self.chunk_warning = None  # once per Scorer
        # Each piece's sum of kept frame embeddings (D,), for kNN and fusion scores.
        embeddings: list[np.ndarray] | None = None
        if self.retrieval is not None and self.retrieval.mode != "parametric":
            embeddings = []
        pieces = [piece for clip in clips for piece in clip.pieces]
        scores, frames, spreads = self._forward(pieces, embeddings)
        return pool_pieces(clips, scores, frames, spreads, self.predictor, self.retrieval, embeddings)

    def _forward(
        self, pieces: list[Piece], embeddings: list[np.ndarray] | None = None
    ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
        """Scores (P, K), kept frame scores (n_p, K) and spreads (P,) of `pieces`: see `forward_pieces`."""
        spread, f0 = self.distribution is not None, self.f0_extractor is not None
        return forward_pieces(
            self.predictor,
            pieces,
            self.device,
            self.batch_size,
            self.domains,
            self.retrieval,
            spread,
            f0,
            embeddings,
        )
