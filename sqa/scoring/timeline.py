"""A clip's score over time: its frame scores averaged in sliding windows, with vocal activity.

The SSL-MOS head scores every backbone frame (20 ms) before pooling; `Timeline` keeps those
frame scores (on the export's scale) and averages them in windows of `window` frames every `hop`
frames (defaults: 50 and 25 frames, 1 s and 0.5 s at the 20 ms frame rate). A window is *vocal*
when at least half of its 20 ms frames are vocal (`sqa.data.vocal`); a window of digital silence
only has no score (silence scored as singing would be a made-up number), nor has one of frames
the clip's score left out (outside its vocal span, under `vocal_only`). `sqa-score --timeline
DIR` writes one CSV (`start_s, end_s, score, vocal, silent`) and one PNG per clip (`write_timeline`).
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sqa.core import ownership
from sqa.core.atomic import atomic_write, atomic_write_text
from sqa.core.path_ends import distinct_ends
from sqa.data.vocal import VocalActivity, vocal_activity

# Default window and hop in backbone frames: 1 s and 0.5 s at the 20 ms frame rate.
WINDOW_FRAMES = 50
HOP_FRAMES = 25
# A window counts as vocal when at least this share of its frames is vocal.
VOCAL_SHARE = 0.5
# File names in a timeline folder: safe characters only, and at most this long before the suffix.
NAME_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
MAX_NAME = 100
SUFFIXES = (".csv", ".png")


@dataclass(frozen=True)
class Timeline:
    """Frame scores (T,) every `frame_seconds`; windows' [start_s, end_s), scores and vocal flags (W,).

    `silent` (W,) marks windows of digital silence (every sample below -80 dBFS): their score is
    NaN, since a score of silence says nothing of singing (None: no window is). A frame the
    clip's score left out (outside its vocal span, under `vocal_only`) is NaN, and so is the
    score of a window of such frames only.
    """

    frame_seconds: float
    frame_scores: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    score: np.ndarray
    vocal: np.ndarray
    silent: np.ndarray | None = None

    def silence(self) -> np.ndarray:
        """The silent flags (W,): `silent`, or all False."""
        return np.zeros(self.score.shape, dtype=bool) if self.silent is None else self.silent

    def rows(self) -> list[dict[str, float | bool | None]]:
        """One dict per window: start_s, end_s, score (None for silence or no scored frame), vocal, silent."""
        return [
            {
                "start_s": float(s),
                "end_s": float(e),
                "score": None if quiet or np.isnan(v) else float(v),
                "vocal": bool(m),
                "silent": bool(quiet),
            }
            for s, e, v, m, quiet in zip(
                self.start_s, self.end_s, self.score, self.vocal, self.silence(), strict=True
            )
        ]

    def lowest(self) -> tuple[float, float]:
        """[start_s, end_s) of the lowest-scored window that has a score (the first of equals).

        A clip that is silence throughout, or left out of its score, has none: a ValueError.
        """
        scores = np.where(self.silence() | np.isnan(self.score), np.inf, self.score)
        if np.isinf(scores).all():
            what = "digital silence" if self.silence().all() else "digital silence or left out of the score"
            raise ValueError(f"every window is {what}: no window has a score")
        index = int(np.argmin(scores))
        return float(self.start_s[index]), float(self.end_s[index])


def window_frames(seconds: float | None, frame_seconds: float, default: int, name: str) -> int:
    """`seconds` as a whole number of frames (at least 1); None: `default` frames."""
    if seconds is None:
        return default
    if not (isinstance(seconds, int | float) and np.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{name} must be a positive number of seconds, got {seconds!r}")
    return max(1, round(seconds / frame_seconds))


def build_timeline(
    frame_scores: np.ndarray,
    vocal: np.ndarray,
    frame_seconds: float,
    window: int,
    hop: int,
    silent: np.ndarray | None = None,
) -> Timeline:
    """Windows of `window` frames every `hop` of frame_scores (T,), vocal flags from vocal (T',) frames.

    Windows start at frame 0, hop, 2·hop, ... while they start inside the clip; the last one
    that reaches the clip's end stops there (so a clip shorter than a window has one window).
    `vocal` is indexed by 20 ms frame like `frame_scores`; a frame beyond it counts as not vocal.
    `silent` (T,) marks frames of digital silence; a window of silent frames only gets a NaN score.
    A NaN frame score (a frame left out of the clip's score) is left out of its windows' means,
    and a window of such frames only gets a NaN score.
    """
    total = frame_scores.shape[0]
    starts = list(range(0, max(total - window, 0) + 1, hop))
    if starts[-1] + window < total:
        # The hop does not land on the end: one more window so that the last frames are covered.
        starts.append(starts[-1] + hop)
    ends = [min(start + window, total) for start in starts]
    flags = np.zeros(total, dtype=bool)
    flags[: min(total, vocal.shape[0])] = vocal[:total]
    scores = np.array([_scored_mean(frame_scores[s:e]) for s, e in zip(starts, ends, strict=True)])
    shares = np.array([flags[s:e].mean() for s, e in zip(starts, ends, strict=True)])
    quiet = None
    if silent is not None:
        quiet = np.array([bool(silent[s:e].all()) for s, e in zip(starts, ends, strict=True)])
        scores = np.where(quiet, np.nan, scores)
    return Timeline(
        frame_seconds,
        frame_scores,
        np.array(starts) * frame_seconds,
        np.array(ends) * frame_seconds,
        scores,
        shares >= VOCAL_SHARE,
        quiet,
    )


def _scored_mean(frames: np.ndarray) -> float:
    """The mean of a window's frame scores (n,) that are not NaN; NaN where none is."""
    scored = frames[~np.isnan(frames)]
    return float(scored.mean()) if scored.size else float("nan")


def silent_frames(wav: np.ndarray, hop: int, frames: int) -> np.ndarray:
    """Whether each of `frames` frames of `hop` samples of wav (N,) is digital silence (peak < -80 dBFS).

    A frame past the end of the waveform is silent.
    """
    # Imported here: sqa.scoring.clips imports torch, which `sqa-score --help` must not.
    from sqa.scoring.clips import SILENCE_PEAK

    padded = np.zeros(frames * hop, dtype=np.float32)
    count = min(wav.shape[0], padded.shape[0])
    padded[:count] = np.abs(wav[:count])
    return padded.reshape(frames, hop).max(axis=1) < SILENCE_PEAK


def clip_timeline(
    frame_scores: np.ndarray,
    wav: np.ndarray,
    sample_rate: int,
    hop: int,
    window_seconds: float | None = None,
    hop_seconds: float | None = None,
    first_frame: int = 0,
    activity: VocalActivity | None = None,
) -> Timeline:
    """The timeline of a clip's frame scores (T',), one every `hop` samples of its waveform wav (N,).

    The scores are those of the clip's frames from `first_frame` on (a vocal span's, which
    starts there); the clip's other frames (those of a whole clip, by the 400/320 front end's
    count) have none (NaN). Windows of `window_seconds` (default 50 frames: 1 s) every
    `hop_seconds` (25 frames: 0.5 s), rounded to whole frames. Each backbone frame takes the
    vocal flag of the 20 ms activity frame it starts in (`activity`, `sqa.data.vocal.vocal_activity`
    of the whole waveform, computed where None). A window over digital silence only
    (`silent_frames`) has no score.
    """
    # Imported here: sqa.scoring.clips imports torch, which `sqa-score --help` must not.
    from sqa.scoring.clips import clip_frames

    frame_seconds = hop / sample_rate
    window = window_frames(window_seconds, frame_seconds, WINDOW_FRAMES, "window_seconds")
    step = window_frames(hop_seconds, frame_seconds, HOP_FRAMES, "hop_seconds")
    activity = activity or vocal_activity(wav, sample_rate)
    scored = first_frame + frame_scores.shape[0]
    if first_frame or scored < clip_frames(wav.shape[0]):
        # Laid out over the whole clip: the frames around the scored ones have no score.
        whole = np.full(max(scored, clip_frames(wav.shape[0])), np.nan, dtype=np.float64)
        whole[first_frame:scored] = frame_scores
        frame_scores = whole
    at = np.minimum(np.arange(frame_scores.shape[0]) * hop // activity.hop, activity.vocal.shape[0] - 1)
    silent = silent_frames(wav, hop, frame_scores.shape[0])
    return build_timeline(frame_scores, activity.vocal[at], frame_seconds, window, step, silent)


def csv_text(timeline: Timeline) -> str:
    """The timeline's windows as CSV: start_s, end_s, score (empty: silence), vocal, silent (true/false)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["start_s", "end_s", "score", "vocal", "silent"])
    for row in timeline.rows():
        score = "" if row["score"] is None else repr(row["score"])
        flags = ["true" if row[k] else "false" for k in ("vocal", "silent")]
        writer.writerow([f"{row['start_s']:.2f}", f"{row['end_s']:.2f}", score, *flags])
    return buffer.getvalue()


def safe_stems(paths: Sequence[str]) -> list[str]:
    """A distinct file-name stem per input path, in safe characters.

    A file whose name others share gets the end of its path that tells it apart (`alto/take1.wav`
    and `soprano/take1.wav`: `alto_take1`, `soprano_take1`); names still alike after that (only
    the extension or the case differs, or the safe characters made them equal) get `-2`, `-3`...
    """
    files = [Path(os.path.normpath(os.path.abspath(p))) for p in paths]
    ends = distinct_ends(files)
    stems: list[str] = []
    taken: set[str] = set()
    for path, file in zip(paths, files, strict=True):
        name = "_".join(ends[file]) if file in ends else Path(path).stem
        stem = NAME_CHARACTERS.sub("_", name).strip("._") or "clip"
        stem = stem[:MAX_NAME]
        candidate, n = stem, 1
        while candidate.lower() in taken:
            # Compared case-blind: on a case-insensitive file system A.wav and a.wav would collide.
            n += 1
            candidate = f"{stem}-{n}"
        taken.add(candidate.lower())
        stems.append(candidate)
    return stems


def check_timeline_folder(
    folder: Path, stems: Sequence[str], overwrite: bool, outputs: Sequence[Path] = ()
) -> str | None:
    """Why the timelines of `stems` must not be written into `folder` (None if they may).

    The folder may exist or not (its parent must). A planned file that exists is replaced only if
    sqa wrote it there (recorded in the folder's `.sqa-owned.json`) and `overwrite` is given: a
    user's own file is never replaced. A planned file that is one of the command's `outputs` (the
    score table) is refused, `overwrite` or not: one would replace the other.
    """
    planned = {(folder / (stem + suffix)).resolve(): stem + suffix for stem in stems for suffix in SUFFIXES}
    for output in outputs:
        if output.resolve() in planned:
            return (
                f"{output}: is also where --timeline writes {planned[output.resolve()]}; "
                "choose another --output or --timeline folder"
            )
    if not folder.parent.is_dir():
        return f"{folder}: the folder {folder.parent} does not exist"
    if os.path.lexists(folder) and not folder.is_dir():
        return f"{folder}: --timeline needs a folder, and this is a file"
    if not folder.is_dir():
        return None
    stray = ownership.stray_record(folder)
    if stray is not None:
        return f"{folder}: {stray} (--timeline)"
    mine = ownership.owned(folder)
    for stem in stems:
        for suffix in SUFFIXES:
            name = stem + suffix
            if not os.path.lexists(folder / name):
                continue
            if name not in mine:
                return f"{folder / name}: exists and was not written by sqa; choose another --timeline folder"
            if not overwrite:
                return f"{folder / name}: already exists; pass --overwrite to replace it"
    return None


def plot_timeline(
    timeline: Timeline, title: str, path: Path, score_range: tuple[float, float], exclusive: bool = False
) -> None:
    """Draw the window scores over time, non-vocal windows shaded, as a PNG at `path` (atomically).

    `exclusive`: never replace an existing `path`.
    """
    from sqa.core.extras import require

    require("matplotlib", "all", "sqa-score --timeline's plots")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8.0, 3.0), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    quiet = timeline.silence()
    for start, end, vocal, silent in zip(
        timeline.start_s, timeline.end_s, timeline.vocal, quiet, strict=True
    ):
        if not vocal and not silent:
            axes.axvspan(start, end, color="0.85", linewidth=0, zorder=0)
    centres = (timeline.start_s + timeline.end_s) / 2
    # Silence is left blank: its NaN scores break the line there.
    axes.plot(centres, timeline.score, marker=".", color="tab:blue", label="window score")
    axes.set_ylim(*score_range)
    axes.set_xlim(0.0, max(float(timeline.end_s[-1]), timeline.frame_seconds))
    axes.set_xlabel("time (s)")
    axes.set_ylabel("score")
    axes.set_title(title, fontsize=9)
    axes.text(
        0.99,
        0.02,
        "shaded: not vocal; blank: silence",
        transform=axes.transAxes,
        ha="right",
        fontsize=8,
        color="0.4",
    )
    atomic_write(path, lambda fh: figure.savefig(fh, format="png"), exclusive)


def write_timeline(
    folder: Path, stem: str, timeline: Timeline, title: str, score_range: tuple[float, float], overwrite: bool
) -> None:
    """Write `stem`.csv and `stem`.png of `timeline` into `folder`, recorded there as sqa's."""
    names = [stem + suffix for suffix in SUFFIXES]
    folder.mkdir(exist_ok=True)
    ownership.check_recordable(folder)
    # Only a file sqa wrote there is replaced: one that appeared since the check stays.
    mine = ownership.owned(folder)
    replace = [overwrite and name in mine for name in names]
    atomic_write_text(folder / names[0], csv_text(timeline), exclusive=not replace[0])
    ownership.record(folder, names[:1])
    plot_timeline(timeline, title, folder / names[1], score_range, exclusive=not replace[1])
    ownership.record(folder, names[1:])
