"""Score audio with an exported predictor: `Scorer`, the object behind `sqa.load` and `sqa-score`.

`Scorer` is an `sqa.scoring.engine.ExportScorer` (the export loaded, and its batch-invariant path
from waveforms and files to scores) with the queries a user asks of clips given as paths or
arrays: their scores, with spreads and intervals, a clip's timeline, a preference between two.
Its results for many files (`FileScores`) and for a folder (`FolderScores`) convert to a pandas
DataFrame in one call, per clip or per system (`to_pandas`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from sqa.core.extras import require
from sqa.core.spread import INTERVAL_LEVELS, interval
from sqa.data.audio import AudioError
from sqa.data.vocal import VocalActivity, vocal_activity
from sqa.scoring.arrays import ClipInputs, array_waveforms, clip_inputs, one_waveform, shaped
from sqa.scoring.clips import ClipWarning, warn_at_caller
from sqa.scoring.device import resolve_device
from sqa.scoring.domains import MEAN_DOMAIN, default_domain_note, resolve_domain
from sqa.scoring.engine import ExportScorer
from sqa.scoring.named import loaded_line, source_of
from sqa.scoring.outputs import NEXT_COLUMNS, system_rows
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
from sqa.scoring.systems import clip_layout, common_folder, rank_systems, unknown_systems
from sqa.scoring.timeline import Timeline, clip_timeline

if TYPE_CHECKING:
    import pandas as pd

# Every public name this module had when it was split, those now defined in scorer_warnings,
# domains, device and results included, and ClipWarning (docs/scoring.md names it here): each stays
# `sqa.scoring.scorer.<name>` (tests/test_module_paths.py pins the list). FileScores and FolderScores,
# added since, are the types of what `Scorer` returns, not names to star-import.
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

log = logging.getLogger(__name__)

# The extra that installs pandas for `to_pandas`: the researcher's, which trains and evaluates.
PANDAS_EXTRA = "train"
# Columns of a clip's table beside score_<dim> that hold numbers (None: NaN).
FLOAT_COLUMNS = ("score", "spread", "lo90", "hi90")


def _pandas() -> ModuleType:
    """pandas, or a MissingExtraError naming the extra that installs it."""
    return require("pandas", PANDAS_EXTRA, "to_pandas()")


def _frame(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    """`rows` as a DataFrame of `columns`, those holding scores float (a clip without a score: NaN)."""
    pd = _pandas()
    floats = {c: "float64" for c in columns if c in FLOAT_COLUMNS or c.startswith("score_")}
    return pd.DataFrame(rows, columns=columns).astype(floats)


def _systems_frame(rows: list[dict[str, Any]], dimensions: Sequence[str], walked: bool) -> pd.DataFrame:
    """The systems of clip `rows` (path, score, score_<dim>) ranked, as `sqa-score --by-system` writes them.

    A system is told from the paths (`sqa.scoring.systems.clip_layout`): those of one folder's
    or pattern's walk (`walked`) as found under their deepest common folder, for that folder
    stands for the one given; other paths as files named one by one. A clip without a system is
    a ValueError naming it.
    """
    paths = [row["path"] for row in rows]
    top = common_folder(paths) if walked and paths else None
    layout = clip_layout(paths, [top] * len(paths))
    unknown = unknown_systems(paths, layout.systems)
    if unknown is not None:
        raise ValueError(f"by_system: {unknown}")
    ranking = rank_systems([row["score"] for row in rows], layout.systems, layout.items)
    rows = [{**row, "system_id": system} for row, system in zip(rows, layout.systems, strict=True)]
    columns = ["system_id", "n", "score", "lo", "hi", *(f"score_{d}" for d in dimensions[1:]), *NEXT_COLUMNS]
    frame = _frame(system_rows(rows, dimensions[1:], ranking), columns)
    # Its other numbers, NaN where null (`_frame` converts the score columns).
    return frame.astype(dict.fromkeys(["lo", "hi", "next_diff", "next_lo", "next_hi", "next_p"], "float64"))


def _value_columns(value: Any, dimensions: Sequence[str]) -> dict[str, Any]:
    """The columns of a clip's `score` or `score_with_spread`: score, [spread, lo90, hi90], score_<dim>."""
    if isinstance(value, SpreadScore):
        low, high = value.interval90 or (None, None)
        return {"score": value.score, "spread": value.spread, "lo90": low, "hi90": high}
    scores = value if isinstance(value, dict) else dict.fromkeys(dimensions, value)
    return {"score": scores[dimensions[0]], **{f"score_{d}": scores[d] for d in dimensions[1:]}}


class FolderScores(dict[str, Any]):
    """`score(folder)`'s {path: score} (or `score_with_spread`'s {path: SpreadScore}): a dict, and a table.

    `dimensions` are those its values hold, the overall one first.
    """

    def __init__(self, scores: Mapping[str, Any], dimensions: Sequence[str]) -> None:
        super().__init__(scores)
        self.dimensions = list(dimensions)

    def to_pandas(self, *, by_system: bool = False) -> pd.DataFrame:
        """One row per clip in path order: path, score, [spread, lo90, hi90], score_<dim> (None: NaN).

        `by_system`: one row per system instead, ranked (system_id, n, score, lo, hi, ...; see `FileScores`).
        """
        rows = [{"path": path, **_value_columns(value, self.dimensions)} for path, value in self.items()]
        if by_system:
            return _systems_frame(rows, self.dimensions, walked=True)
        return _frame(rows, list(rows[0]) if rows else ["path", "score"])


class FileScores(Iterator[ScoreResult]):
    """`score_files`'s results, one `ScoreResult` per file as they come, that also gather into a table."""

    def __init__(
        self, results: Iterable[ScoreResult], dimensions: Sequence[str], distribution: str | None
    ) -> None:
        self._results = iter(results)
        self._taken = 0
        self.dimensions = list(dimensions)
        self.distribution = distribution

    def __next__(self) -> ScoreResult:
        """The next result."""
        result = next(self._results)
        self._taken += 1
        return result

    def _columns(self) -> list[str]:
        """The table's columns, as `sqa-score` names them, then each result's warning and error."""
        spreads = ["spread", "lo90", "hi90"] if self.distribution is not None else []
        return ["path", "score", *spreads, *(f"score_{d}" for d in self.dimensions[1:]), "warning", "error"]

    def _row(self, r: ScoreResult) -> dict[str, Any]:
        """The columns of one result (`_columns`)."""
        row: dict[str, Any] = {"path": r.path, "score": r.score}
        if self.distribution is not None:
            low = high = None
            if r.spread is not None:
                low, high = map(float, interval(r.score, r.spread, INTERVAL_LEVELS["90"], self.distribution))
            row.update(spread=r.spread, lo90=low, hi90=high)
        row.update({f"score_{d}": r.dimension_scores.get(d) for d in self.dimensions[1:]})
        row.update(warning=r.warning, error=r.error)
        return row

    def to_pandas(self, *, by_system: bool = False) -> pd.DataFrame:
        """Every result as a DataFrame, one row per file in input order, whatever `ordered` was.

        Columns: path, score, [spread, lo90, hi90 for an export with a spread], score_<dim> for
        each other dimension, warning, error; a file without a score has NaN scores. `by_system`:
        the systems of the readable files instead, ranked best first, the table `sqa-score
        --by-system` writes (system_id, n, score with its 95 % bootstrap interval lo, hi,
        score_<dim>, and the comparison with the next system, next_*; see `_systems_frame`).
        It takes the results itself, so it is called before any is iterated (else a ValueError).
        Needs pandas (the `train` extra; a MissingExtraError says so).
        """
        _pandas()  # before the files are scored, not after
        if self._taken:
            raise ValueError(
                f"to_pandas() gathers every result, but {self._taken} were already iterated: "
                "call it on a fresh score_files(...)"
            )
        results = sorted(self, key=lambda r: r.index)
        rows = [self._row(r) for r in results]
        if by_system:
            return _systems_frame(
                [row for row in rows if row["error"] is None], self.dimensions, walked=False
            )
        return _frame(rows, self._columns())


class Scorer(ExportScorer):
    """An export loaded for scoring paths and arrays (`score`) and many files (`score_files`); see `sqa.load`.

    Takes `ExportScorer`'s arguments (device, batch size, domain, chunking, pooling, vocal-only
    scoring, retrieval mode; documented there) and adds the queries over paths and arrays: scores,
    scores with spreads and intervals, a clip's timeline, and preferences between two clips.
    `export` is an export's path or a built-in predictor's name (`sqa.scoring.named`); `source`
    says which was loaded, its absolute path or "built-in 'distillmos'", logged at INFO.
    """

    def __init__(self, export: str | Path, *args: Any, **kwargs: Any) -> None:
        super().__init__(export, *args, **kwargs)
        self.source = source_of(export)
        log.info(loaded_line(export))

    def __repr__(self) -> str:
        """What was loaded: its source, the predictor's and backbone's classes, dimensions and device."""
        kind = f"{type(self.predictor).__name__}({type(self.predictor.backbone).__name__})"
        return (
            f"Scorer(source={self.source!r}, kind={kind!r}, dimensions={self.dimensions!r}, "
            f"device={str(self.device)!r})"
        )

    def score_files(
        self,
        paths: str | os.PathLike | Iterable[str | os.PathLike],
        num_workers: int = 0,
        ordered: bool = True,
        frames: dict[int, np.ndarray] | None = None,
    ) -> FileScores:
        """`ExportScorer.score_files`'s results as they come; `to_pandas()` gathers them into a DataFrame."""
        results = super().score_files(paths, num_workers, ordered, frames)
        return FileScores(results, self.dimensions, self.distribution)

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
        under `vocal_only`; a list for a list or batch, a dict for a folder or pattern (a
        `FolderScores`, whose `to_pandas()` is its DataFrame). An
        unreadable file raises `sqa.data.audio.AudioError` (a ValueError) naming it.
        `score_with_spread` adds the spread of a listener's rating, where the export has one.
        """
        inputs, rows = self._scored(audio, sample_rate)
        out = [
            row[0] if len(row) == 1 or row[0] is None else dict(zip(self.dimensions, row, strict=True))
            for row, _ in rows
        ]
        scores = shaped(inputs, out)
        return FolderScores(scores, self.dimensions) if inputs.keyed else scores

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
        spreads = shaped(inputs, out)
        return FolderScores(spreads, self.dimensions[:1]) if inputs.keyed else spreads

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
