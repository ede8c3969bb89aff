"""Up-front validation of a corpus: every problem, by file and row, before training starts."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sqa.data.audio import DECODED, AudioError
from sqa.data.corpus import SPLITS, Corpus, CorpusError

# Rating scales of listening tests, narrowest first: a corpus's ratings are matched to the first
# that holds them all.
KNOWN_SCALES = (
    (0.0, 1.0),
    (1.0, 5.0),
    (0.0, 5.0),
    (1.0, 7.0),
    (1.0, 9.0),
    (0.0, 10.0),
    (1.0, 10.0),
    (0.0, 100.0),
)
# Problems listed in an error message; the run's data_problems.txt has every one.
ON_SCREEN = 20


@dataclass(frozen=True)
class Problem:
    """One problem: the file (or corpus part) it concerns, the clip if any, and what is wrong."""

    where: str
    sample_id: str | None
    what: str

    def __str__(self) -> str:
        clip = f" [{self.sample_id}]" if self.sample_id else ""
        return f"{self.where}{clip}: {self.what}"


def validate_corpus(
    corpus: Corpus, sample_rate: int, min_samples: int, splits: Sequence[str] = SPLITS
) -> list[Problem]:
    """All problems of `corpus` when read at `sample_rate` by a backbone seeing `min_samples`.

    Per clip: what its reader found wrong in its rows (`Clip.problems`: a score cell that is not a
    number), missing or unreadable audio, no samples, NaN/inf samples, all-silent audio, audio
    shorter than the receptive field, a score or a judge's rating that is NaN or outside
    `corpus.score_range`, a duplicate sample ID, an unknown system or domain, an unknown split.
    Per corpus: an empty split of `splits`.
    """
    problems: list[Problem] = []
    low, high = corpus.score_range
    counts = Counter(c.sample_id for c in corpus.clips)
    for clip in corpus.clips:

        def add(what: str, clip=clip) -> None:
            problems.append(Problem(str(clip.path), clip.sample_id, what))

        if counts[clip.sample_id] > 1:
            add(f"duplicate sample ID ({counts[clip.sample_id]} rows)")
        for what in clip.problems:
            add(what)
        # A score the reader could not read is NaN, and its problem above already says why.
        if not math.isfinite(clip.mos):
            if not clip.problems:
                add(f"score is {clip.mos}")
        elif not low <= clip.mos <= high:
            add(f"score {clip.mos} is outside the scale [{low}, {high}]")
        # A mean inside the scale can hide ratings outside it (a 0-10 rating among 1-5 ones).
        bad = {j: r for j, r in clip.ratings.items() if not (math.isfinite(r) and low <= r <= high)}
        if bad:
            listed = ", ".join(f"{r} by {j!r}" for j, r in sorted(bad.items()))
            add(f"rating(s) {listed} outside the scale [{low}, {high}] (data.corpus.score_range)")
        if clip.domain not in corpus.domains:
            add(f"unknown domain/batch {clip.domain!r}")
        if corpus.systems is not None and clip.system_id not in corpus.systems:
            add(f"unknown system {clip.system_id!r}")
        if clip.split not in SPLITS:
            add(f"unknown split {clip.split!r}")
        # Not is_file(): a FIFO, device or folder is refused by load_audio, naming what it is, without
        # opening it; os.path (unlike pathlib) answers False for a name too long to exist.
        if not os.path.exists(clip.path):
            add("audio file not found")
            continue
        try:
            wav = DECODED.read(clip.path, sample_rate)
        except AudioError as err:
            add(str(err).removeprefix(f"{clip.path}: "))
            continue
        if not np.any(wav):
            add("audio is all silent")
        if wav.shape[0] < min_samples:
            add(
                f"audio is {wav.shape[0]} samples at {sample_rate} Hz, shorter than the "
                f"{min_samples}-sample receptive field"
            )
    for split in splits:
        if not any(c.split == split for c in corpus.clips):
            problems.append(Problem(f"{split} split", None, "is empty"))
    return problems


def format_report(problems: list[Problem], limit: int | None = None) -> str:
    """A readable report: the number of problems, then one line each (the first `limit` only)."""
    lines = [f"{len(problems)} problem(s) in the corpus:"]
    lines += [f"  {p}" for p in problems[:limit]]
    if limit is not None and len(problems) > limit:
        lines.append(
            f"  ... and {len(problems) - limit} more (all of them: data_problems.txt in the run directory)"
        )
    return "\n".join(lines)


def scale_diagnosis(corpus: Corpus) -> str | None:
    """One line naming `data.corpus.score_range` when most clips' ratings lie outside the scale.

    None when at most half of the clips have a score or rating outside it (those are problems
    of single clips). Otherwise the line names the smallest common rating scale (`KNOWN_SCALES`)
    that holds every rating, or the ratings' own range where none does.
    """
    low, high = corpus.score_range
    values, outside = [], 0
    for clip in corpus.clips:
        own = [v for v in (clip.mos, *clip.ratings.values()) if math.isfinite(v)]
        values += own
        outside += any(not low <= v <= high for v in own)
    if not values or outside * 2 <= len(corpus.clips):
        return None
    seen = (min(values), max(values))
    fits = [scale for scale in KNOWN_SCALES if scale[0] <= seen[0] and seen[1] <= scale[1]]
    scale = fits[0] if fits else seen
    return (
        f"the ratings of {outside} of {len(corpus.clips)} clips lie outside the scale [{low:g}, {high:g}]; "
        f"all ratings lie in [{scale[0]:g}, {scale[1]:g}] (from {seen[0]:g} to {seen[1]:g}): "
        f"set data.corpus.score_range=[{scale[0]:g},{scale[1]:g}]"
    )


class CorpusProblems(CorpusError):
    """Clips of the corpus have problems: `problems` lists them, the message is the report.

    The message lists at most `ON_SCREEN` problems (the run writes all to data_problems.txt);
    a `diagnosis` (one line, e.g. `scale_diagnosis`) comes first.
    """

    def __init__(self, problems: list[Problem], hint: str = "", diagnosis: str | None = None) -> None:
        self.problems = list(problems)
        self.diagnosis = diagnosis
        lines = [diagnosis] if diagnosis else []
        lines += [format_report(self.problems, ON_SCREEN), *([hint] if hint else [])]
        super().__init__("\n".join(lines))
