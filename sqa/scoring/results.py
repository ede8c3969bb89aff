"""What a `Scorer` gives per clip: a file's `ScoreResult`, a clip's `SpreadScore`, results in input order."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True)
class ScoreResult:
    """The overall score of input `index` and its other dimensions' scores, or why it failed.

    A readable clip without a score (no vocal activity under `vocal_only`) has `score` and its
    dimension scores None, no `error`, and the reason as its `warning`. `spread` is the spread
    of a listener's overall rating about `score` (`Scorer.distribution`), None without one.
    """

    path: str
    score: float | None
    error: str | None = None
    dimension_scores: Mapping[str, float | None] = field(default_factory=dict)
    warning: str | None = None
    index: int = 0
    spread: float | None = None


class SpreadScore(NamedTuple):
    """A clip's overall score, the spread of a listener's rating about it, and that rating's 90 % interval.

    `spread` and `interval90` (low, high) are None for an export without a spread; all three for a
    clip without a score (no vocal activity under `vocal_only`).
    """

    score: float | None
    spread: float | None
    interval90: tuple[float, float] | None


def in_input_order(results: Iterable[ScoreResult]) -> Iterator[ScoreResult]:
    """`results` of inputs 0, 1, 2, ... in any order, each yielded once every earlier one has been."""
    waiting: dict[int, ScoreResult] = {}
    done = 0
    for result in results:
        waiting[result.index] = result
        while done in waiting:
            yield waiting.pop(done)
            done += 1
