"""Up-front validation of a corpus: every problem, by file and row, before training starts."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sqa.data.audio import AudioError, load_audio
from sqa.data.corpus import SPLITS, Corpus, CorpusError


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

    Per clip: missing or unreadable audio, no samples, NaN/inf samples, all-silent audio, audio
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
        if not math.isfinite(clip.mos):
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
        if not clip.path.is_file():
            add("audio file not found")
            continue
        try:
            wav = load_audio(clip.path, sample_rate)
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


def format_report(problems: list[Problem]) -> str:
    """A readable report: the number of problems, then one line each."""
    lines = [f"{len(problems)} problem(s) in the corpus:"]
    lines += [f"  {p}" for p in problems]
    return "\n".join(lines)


class CorpusProblems(CorpusError):
    """Clips of the corpus have problems: `problems` lists them, the message is the report."""

    def __init__(self, problems: list[Problem], hint: str = "") -> None:
        self.problems = list(problems)
        super().__init__(format_report(self.problems) + (f"\n{hint}" if hint else ""))
