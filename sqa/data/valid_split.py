"""A validation split carved from a corpus's training clips, and its CSV (a run's valid_split.csv)."""

from __future__ import annotations

import csv
import io
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sqa.atomic import atomic_write_text
from sqa.data.corpus import Clip, Corpus, CorpusError
from sqa.data.readers import read_text

VALID_SPLIT_COLUMNS = ("sample_id", "system_id", "domain")


def carve_valid(corpus: Corpus, share: float, seed: int) -> Corpus:
    """The corpus with a seeded `share` of every system's training clips moved to `valid`.

    A system with n ≥ 2 training clips gives max(1, round(share·n)) of them and keeps at least
    one, so every system with two or more clips is seen in training and in validation. Each
    system's draw depends only on the seed, its ID and its clips' sample IDs, not on the others.
    """
    if not 0 < share < 1:
        raise ValueError(f"valid_share must be in (0, 1), got {share}")
    by_system: dict[str, list[Clip]] = {}
    for c in corpus.split("train"):
        by_system.setdefault(c.system_id, []).append(c)
    chosen: set[str] = set()
    for system, clips in by_system.items():
        if len(clips) < 2:
            continue
        ids = sorted(c.sample_id for c in clips)
        rng = np.random.default_rng([seed, zlib.crc32(system.encode())])
        take = min(max(1, round(share * len(ids))), len(ids) - 1)
        chosen.update(ids[i] for i in rng.permutation(len(ids))[:take])
    return corpus.with_valid(chosen, "carve_valid")


def write_valid_split(clips: Sequence[Clip], path: str | Path) -> None:
    """Write validation clips' sample_id, system_id and domain to a CSV that `read_valid_split` reads."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(VALID_SPLIT_COLUMNS)
    for c in sorted(clips, key=lambda c: c.sample_id):
        writer.writerow([c.sample_id, c.system_id, c.domain])
    atomic_write_text(path, buffer.getvalue())


def read_valid_split(path: str | Path) -> list[str]:
    """Sample IDs listed in a validation split CSV (a `sample_id` column; other columns ignored)."""
    path = Path(path)
    # UTF-8 with or without a byte-order mark, as every metadata file; another encoding is an
    # error naming the byte and line.
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    if "sample_id" not in (reader.fieldnames or []):
        raise CorpusError(f"{path}: no 'sample_id' column; found {reader.fieldnames}")
    try:
        ids = [row["sample_id"] for row in reader]
    except csv.Error as err:
        raise CorpusError(f"{path}: not a CSV file ({err})") from None
    if not ids:
        raise CorpusError(f"{path}: lists no sample IDs")
    return ids
