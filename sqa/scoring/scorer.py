"""Score audio with an exported predictor: `Scorer`, the object behind `sqa.load` and `sqa-score`.

`Scorer` is an `sqa.scoring.engine.ExportScorer` (the export loaded, and its batch-invariant path
from waveforms and files to scores) with the queries a user asks of clips given as paths or
arrays: their scores, with spreads and intervals, a clip's timeline, a preference between two.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sqa.core.spread import INTERVAL_LEVELS, interval
from sqa.data.audio import AudioError
from sqa.data.vocal import VocalActivity, vocal_activity
from sqa.scoring.arrays import ClipInputs, array_waveforms, clip_inputs, one_waveform, shaped
from sqa.scoring.clips import ClipWarning, warn_at_caller
from sqa.scoring.device import resolve_device
from sqa.scoring.domains import MEAN_DOMAIN, default_domain_note, resolve_domain
from sqa.scoring.engine import ExportScorer
from sqa.scoring.preferences import Preference, check_sigma, preference_of
from sqa.scoring.results import ScoreResult, SpreadScore
from sqa.scoring.scorer_warnings import (
    CHUNK_SECONDS_WITHIN_0_02,
    ChunkWarning,
    DomainWarning,
    LearningWarning,
    PreferenceWarning,
    chunk_warning,
)
from sqa.scoring.timeline import Timeline, clip_timeline

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


class Scorer(ExportScorer):
    """An export loaded for scoring paths and arrays (`score`) and many files (`score_files`); see `sqa.load`.

    Takes `ExportScorer`'s arguments (device, batch size, domain, chunking, pooling, vocal-only
    scoring, retrieval mode; documented there) and adds the queries over paths and arrays: scores,
    scores with spreads and intervals, a clip's timeline, and preferences between two clips.
    """

    def score(self, audio: Any, sample_rate: int | None = None) -> Any:
        """Score a clip, a list (or tuple) of clips, a (clips, samples) batch, or a folder's files.

        A path (str or os.PathLike) is read as `sqa-score` reads it, at its header's rate; a
        folder (its audio files, recursively) or a glob pattern ("takes/*.wav") as `sqa-score`
        reads it, giving {path: score} in sorted path order. An array is a float numpy array or
        torch tensor at `sample_rate` Hz (any rate; resampled as files are): 1-D (samples,) is
        one clip; 2-D with fewer rows than columns and over 8 columns is a batch (clips,
        samples), as SHEET's and SingMOS's predictors take it, giving a list of one score per
        row (every row as long as the longest: trim padding, or pass a list of 1-D clips); 2-D
        (samples, channels) with at most 8 channels, what `soundfile.read` returns, is one clip
        (channels averaged); other shapes are refused. `sample_rate` applies to arrays only:
        needed where the input holds an array, refused where it holds paths only (their rates
        are their headers'). Returns one float per clip, or a dict {dimension: score} per clip
        when the model has several score dimensions, or None for a clip without vocal activity
        under `vocal_only`; a list for a list or batch, a dict for a folder or pattern. An
        unreadable file raises `sqa.data.audio.AudioError` (a ValueError) naming it.
        `score_with_spread` adds the spread of a listener's rating, where the export has one.
        """
        inputs, rows = self._scored(audio, sample_rate)
        out = [
            row[0] if len(row) == 1 or row[0] is None else dict(zip(self.dimensions, row, strict=True))
            for row, _ in rows
        ]
        return shaped(inputs, out)

    def score_with_spread(self, audio: Any, sample_rate: int | None = None) -> Any:
        """Each clip's `SpreadScore`: overall score, spread of a listener's rating, its 90 % interval.

        Takes what `score` takes, and returns one `SpreadScore` (score, spread, (lo90, hi90)) per
        clip, a list for a list or batch, {path: SpreadScore} for a folder: the columns `score`,
        `spread`, `lo90`, `hi90` of `sqa-score`, intervals as in predictions.csv
        (`sqa.core.spread.interval`). An export without a spread gives None spread and interval,
        so callers can pass any export.
        """
        inputs, rows = self._scored(audio, sample_rate)
        out = []
        for row, spread in rows:
            if spread is None or self.distribution is None:
                out.append(SpreadScore(row[0], None, None))
                continue
            low, high = interval(row[0], spread, INTERVAL_LEVELS["90"], self.distribution)
            out.append(SpreadScore(row[0], spread, (float(low), float(high))))
        return shaped(inputs, out)

    def _scored(
        self, audio: Any, sample_rate: int | None
    ) -> tuple[ClipInputs, list[tuple[list[float | None], float | None]]]:
        """The clips `audio` holds, and per clip in input order its scores (K,) and spread (or None)."""
        inputs = clip_inputs(audio, sample_rate)
        names, files = inputs.names, inputs.files
        wavs = array_waveforms(
            [inputs.clips[i] for i in inputs.arrays],
            [names[i] for i in inputs.arrays],
            sample_rate,
            self.sample_rate,
            self.max_samples,
        )
        prepared = [self.prepare.clip(i, wav) for i, wav in zip(inputs.arrays, wavs, strict=True)]
        rows = {}
        for clip, row, spread in self._score_prepared(prepared):
            if clip.reason or clip.warning:
                warn_at_caller(f"{names[clip.index]}: {clip.reason or clip.warning}", ClipWarning)
            rows[clip.index] = (row, spread)
        positions = list(files)
        # As batches finish: an unreadable file (its header is read first) stops the call at once.
        for result in self._file_results(list(files.values()), 0):
            if result.error is not None:
                raise AudioError(result.error)
            if result.warning is not None:
                warn_at_caller(f"{result.path}: {result.warning}", ClipWarning)
            rows[positions[result.index]] = ([result.score, *result.dimension_scores.values()], result.spread)
        return inputs, [rows[i] for i in range(len(inputs.clips))]

    def timeline(
        self,
        audio: Any,
        sample_rate: int | None = None,
        window_seconds: float | None = None,
        hop_seconds: float | None = None,
    ) -> Timeline:
        """The score of one clip (a path, or an array at `sample_rate`) over time: see `clip_timeline`.

        The frame scores are those the score pools (`frame_scores` of the clip, or under
        `vocal_only` of its vocal span), so with `masked_mean` pooling the clip's score is their
        mean. The whole clip is laid out; under `vocal_only` the frames outside the vocal span,
        which the score leaves out, have none (NaN). Each window says whether it is vocal.
        """
        wav = one_waveform(audio, sample_rate, self.sample_rate, self.max_samples)
        activity = vocal_activity(wav, self.sample_rate)
        start, stop = self._scored_span(wav, activity)
        frames = self.frame_scores(wav[start:stop]) if stop > start else np.zeros(0)
        return self._laid_out(wav, frames, activity, start, window_seconds, hop_seconds)

    def timeline_of(
        self,
        wav: np.ndarray,
        frames: np.ndarray,
        window_seconds: float | None = None,
        hop_seconds: float | None = None,
    ) -> Timeline:
        """`timeline` of mono wav (N,) at `sample_rate` from the frame scores (T,) its scoring gave.

        `frames` are those `score_files(frames=...)` kept for the file that decodes to `wav`, so
        the network does not run a second time: the same timeline as `timeline` of the file.
        """
        activity = vocal_activity(wav, self.sample_rate)
        start, _ = self._scored_span(wav, activity)
        return self._laid_out(wav, frames, activity, start, window_seconds, hop_seconds)

    def _scored_span(self, wav: np.ndarray, activity: VocalActivity) -> tuple[int, int]:
        """The samples [start, stop) of wav (N,) that its score pools: its vocal span under `vocal_only`.

        Without `vocal_only`, all of it; under it, a clip without a vocal span has none: (0, 0).
        """
        if not self.vocal_only:
            return 0, wav.shape[0]
        return activity.span(wav.shape[0]) or (0, 0)

    def _laid_out(
        self,
        wav: np.ndarray,
        frames: np.ndarray,
        activity: VocalActivity,
        start: int,
        window_seconds: float | None,
        hop_seconds: float | None,
    ) -> Timeline:
        """The timeline of wav (N,) whose scored span, from sample `start`, has frame scores `frames` (T,)."""
        hop = int(self.predictor.backbone.hop_length)
        # The span starts on a 20 ms activity frame, the backbone's frame grid at 16 kHz.
        first = round(start / hop)
        return clip_timeline(frames, wav, self.sample_rate, hop, window_seconds, hop_seconds, first, activity)

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
        check_sigma(sigma)
        if sigma is None and self.distribution is None and self.sigma_note is not None:
            warn_at_caller(self.sigma_note, PreferenceWarning)
            self.sigma_note = None  # once per Scorer
        clip_a, clip_b = self.score_with_spread([a, b], sample_rate)
        return preference_of(clip_a, clip_b, sigma, self.sigma, self.distribution)
