"""Audio files scored in batches by a baseline, read by `sqa-score`'s loader: one result per file."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from sqa.scoring.clips import ClipPreparer, file_batches


class FileScores(NamedTuple):
    """The scores of file `index` (the baseline's score names), or why it could not be read."""

    index: int
    scores: dict[str, float] | None
    error: str | None


def score_files(
    score_batch: Callable[[list[np.ndarray]], list[dict[str, float]]],
    prepare: ClipPreparer,
    paths: Sequence[str | Path],
    batch_size: int,
    num_workers: int = 0,
) -> Iterator[FileScores]:
    """Scores of audio files, a batch of `batch_size` files at a time (`index`: the position in `paths`).

    Files are read as `sqa-score` reads them (`sqa.scoring.clips.file_batches`: headers checked
    first, then decoded, downmixed and resampled by `prepare` in `num_workers` DataLoader workers,
    in length-sorted batches); the waveforms (N,) of each batch go to `score_batch`. An
    unreadable file yields its error instead of scores.
    """
    names = [str(p) for p in paths]
    for items in file_batches(names, prepare, batch_size, num_workers):
        for item in items:
            if item.error is not None:
                yield FileScores(item.index, None, item.error)
        readable = [item for item in items if item.error is None]
        # A whole clip is one piece: its waveform is the piece's first element.
        scores = score_batch([item.pieces[0][0] for item in readable]) if readable else []
        for item, clip_scores in zip(readable, scores, strict=True):
            yield FileScores(item.index, clip_scores, None)
