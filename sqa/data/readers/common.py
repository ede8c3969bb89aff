"""What every corpus reader shares: reading a metadata file, the rating scale, natural order."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from sqa.core import reading
from sqa.data.corpus import CorpusError


def read_text(path: Path, encoding: str | None = None, hint: str = "") -> str:
    """Text of a metadata file (`sqa.core.reading.read_text`); a CorpusError names what is wrong."""
    try:
        return reading.read_text(path, encoding, hint)
    except reading.ReadError as err:
        raise CorpusError(str(err)) from None


def rating_scale(score_range: Sequence[float]) -> tuple[float, float]:
    """`score_range` as (low, high); ValueError unless it is two numbers with low < high."""
    try:
        low, high = (float(v) for v in score_range)
    except (TypeError, ValueError):
        raise ValueError(f"score_range must be [low, high], got {score_range!r}") from None
    if not low < high:
        raise ValueError(f"score_range must be [low, high] with low < high, got {score_range!r}")
    return low, high


def natural_key(name: str) -> list[tuple[int, int | str]]:
    """Sort key that orders 'p2' before 'p10'."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.findall(r"\d+|\D+", name)]
