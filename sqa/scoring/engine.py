"""An export loaded for scoring, and its batch-invariant path from waveforms and files to scores.

Arrays and files take one path: float32 samples (N, C) -> `downmix_resample` (channel mean,
soxr resampling to the export's rate) -> optional windows of `chunk_seconds` -> length-sorted
batches -> the predictor's pooling of each clip's frame scores (the export's `pooling`, or the
one asked for). Batches give the scores of one-by-one calls (per-clip pooling; GroupNorm front
ends run each length on its own), so batch size and order never change a score. Files are
decoded in DataLoader workers in batches sorted by their header's length, so decoded audio held
at once is bounded by the batch, never by the number of inputs; results still come back in
input order. Scoring imports neither Lightning nor Hydra; a backbone library is imported only
when the export uses it. `sqa.scoring.scorer.Scorer` adds the queries of `sqa.load` (paths and
arrays, spreads, timelines, preferences).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Self

import numpy as np
import torch

from sqa.data.audio import MAX_AUDIO_SAMPLES, chunk_seconds_problem
from sqa.exports.format import learning_warning, load_export
from sqa.exports.residual import residual_sigma
from sqa.models.predictor import POOLINGS
from sqa.models.uncertainty import UncertainMOSPredictor
from sqa.scoring.clips import ClipPreparer, Piece, PreparedClip, file_batches, warn_at_caller
from sqa.scoring.device import resolve_device
from sqa.scoring.domains import check_domain_asked, scored_domains
from sqa.scoring.named import export_folder
from sqa.scoring.pieces import chunk_length, forward_pieces, pool_pieces
from sqa.scoring.preferences import preference_note
from sqa.scoring.results import ScoreResult, in_input_order
from sqa.scoring.retrieval import retrieval_for
from sqa.scoring.scorer_warnings import ChunkWarning, LearningWarning, chunk_warning
from sqa.scoring.walks import audio_paths


class ExportScorer:
    """An export loaded for scoring waveforms and many files (`score_files`); `Scorer` adds paths and arrays.

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
    listener's rating (`Scorer.score_with_spread`, `ScoreResult.spread`; `distribution` names it, None
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
        # A ready predictor's name (`sqa.scoring.named`) is an export built while it is read.
        with export_folder(export) as export:
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
            check_domain_asked(domain, embedded)
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
            chunk, self.chunk_warning = None, None
            if chunk_seconds is not None:
                self.chunk_warning = chunk_warning(type(self.predictor.backbone).__name__, chunk_seconds)
                chunk = chunk_length(chunk_seconds, self.sample_rate, self.min_samples)
            if vocal_only is None:
                vocal_only = bool(self.config.get("vocal_only", False))
            self.vocal_only = vocal_only
            self.prepare = ClipPreparer(
                self.sample_rate, self.min_samples, chunk, self.f0_extractor, vocal_only
            )
            # The residual spread behind `prefer`'s probabilities (None: none recorded), and why it is not
            # the validation RMSE where it is not; said at the first `prefer`, not on every load.
            self.sigma, note = residual_sigma(export)
            self.sigma_note = preference_note(self.sigma, note)

    def to(self, device: str | torch.device) -> Self:
        """Move the predictor to `device` ("auto", "cpu", "cuda:1", ...); returns self."""
        self.device = resolve_device(device)
        self.predictor.to(self.device)
        return self

    def frame_scores(self, wav: np.ndarray) -> np.ndarray:
        """Overall frame scores (T,) on the export's scale of a mono waveform (N,) at `sample_rate`.

        The whole waveform, never trimmed to its vocal span; with `chunk_seconds`, the frames of
        its windows in order.
        """
        _, frames, _ = self._forward(self.prepare(wav))
        return self._overall_frames(frames)

    def _overall_frames(self, frames: list[np.ndarray]) -> np.ndarray:
        """Overall frame scores (T,) on the export's scale of a clip's pieces' kept frames [(n_p, K)]."""
        internal = torch.from_numpy(np.concatenate(frames)[:, 0])
        return self.predictor.to_scale(internal).numpy()

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
        self,
        paths: str | os.PathLike | Iterable[str | os.PathLike],
        num_workers: int = 0,
        ordered: bool = True,
        frames: dict[int, np.ndarray] | None = None,
    ) -> Iterator[ScoreResult]:
        """Score audio files, yielding one result per file in input order (`index`: its position).

        `paths` is a path or an iterable of paths; a folder (its audio files, recursively) or a
        glob pattern stands for its files in sorted order, as in `sqa-score` (`index` counts
        files); one holding no audio is a ValueError naming it, raised at the call.

        Files are decoded by `num_workers` DataLoader workers (0: in this process) in batches of
        similar length, sorted by the length in their headers; a batch's results (never its
        audio) wait until every earlier file's result has been yielded. `ordered=False` yields
        each batch's results as soon as it finishes instead (`index` says whose each is), e.g. to
        drive a progress bar. Unreadable files yield a result with `error` set. `frames`, where
        given, gets each scored file's overall frame scores (T,) by its `index`: those its score
        pools (of its vocal span under `vocal_only`), from which `Scorer.timeline_of` lays out its
        timeline without running the network again.
        """
        results = self._file_results(audio_paths(paths), num_workers, frames)
        return in_input_order(results) if ordered else results

    def _file_results(
        self, paths: list[str], num_workers: int, frames: dict[int, np.ndarray] | None = None
    ) -> Iterator[ScoreResult]:
        """A result per file of `paths`, as its length-sorted batch finishes (header errors first).

        `frames`, where given, gets each scored file's overall frame scores by its index.
        """
        for items in file_batches(paths, self.prepare, self.batch_size, num_workers, self.max_samples):
            for item in items:
                if item.error is not None:
                    yield ScoreResult(paths[item.index], None, item.error, index=item.index)
            readable = [item for item in items if item.error is None]
            for item, row, spread in self._score_prepared(readable, frames):
                extra = dict(zip(self.dimensions[1:], row[1:], strict=True))
                warning = item.reason or item.warning
                yield ScoreResult(paths[item.index], row[0], None, extra, warning, item.index, spread)

    def _score_prepared(
        self, clips: list[PreparedClip], kept: dict[int, np.ndarray] | None = None
    ) -> list[tuple[PreparedClip, list[float | None], float | None]]:
        """Each clip's scores (K,), the mean over its pieces' kept frames (a whole clip: its own), and spread.

        The spread (None without `distribution`) is a whole clip's own, or its windows' pooled by
        their kept frames (`sqa.core.spread.pooled`). A clip without pieces (no vocal activity)
        gets K Nones and None. `kept`, where given, gets each clip's overall frame scores (T,)
        on the export's scale by its index (clips with pieces only).
        """
        if self.chunk_warning and any(len(clip.pieces) > 1 for clip in clips):
            warn_at_caller(self.chunk_warning, ChunkWarning)
            self.chunk_warning = None  # once per loaded export
        # Each piece's sum of kept frame embeddings (D,), for kNN and fusion scores.
        embeddings: list[np.ndarray] | None = None
        if self.retrieval is not None and self.retrieval.mode != "parametric":
            embeddings = []
        pieces = [piece for clip in clips for piece in clip.pieces]
        scores, frames, spreads = self._forward(pieces, embeddings)
        if kept is not None:
            start = 0
            for clip in clips:
                if clip.pieces:
                    kept[clip.index] = self._overall_frames(frames[start : start + len(clip.pieces)])
                start += len(clip.pieces)
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
