"""Validation and test splits carved from a corpus's training clips, and their CSVs.

A run writes the splits it carved to valid_split.csv and test_split.csv; a later run reuses them.
`by` chooses how clips are drawn: "clip" takes a share of every system's clips (every system is
seen on both sides), "system" a share of the systems with all their clips (system-disjoint).
"""

from __future__ import annotations

import csv
import io
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sqa.core.atomic import atomic_write_text
from sqa.data.corpus import Clip, Corpus, CorpusError
from sqa.data.readers import read_text

VALID_SPLIT_COLUMNS = ("sample_id", "system_id", "domain")
SPLIT_BY = ("clip", "system")


def carve(corpus: Corpus, share: float, seed: int, by: str = "clip", stream: int = 0) -> set[str]:
    """Sample IDs of a seeded `share` of the corpus's training clips, drawn by clip or by system.

    by="clip": a system with n ≥ 2 training clips gives max(1, round(share·n)) of them and keeps
    at least one; each system's draw depends only on the seed, its ID and its clips' sample IDs.
    by="system": max(1, round(share·S)) of the S training systems (at least one kept) give all
    their training clips. `stream` separates draws of one seed (0: validation, 1: test).
    """
    if not 0 < share < 1:
        raise ValueError(f"the share to carve must be in (0, 1), got {share}")
    if by not in SPLIT_BY:
        raise ValueError(f"split_by must be one of {list(SPLIT_BY)}, got {by!r}")
    by_system: dict[str, list[str]] = {}
    for c in corpus.split("train"):
        by_system.setdefault(c.system_id, []).append(c.sample_id)
    chosen: set[str] = set()
    if by == "system":
        systems = sorted(by_system)
        if len(systems) < 2:
            return chosen
        rng = np.random.default_rng([seed, stream, zlib.crc32(b"systems")])
        take = min(max(1, round(share * len(systems))), len(systems) - 1)
        for i in rng.permutation(len(systems))[:take]:
            chosen.update(by_system[systems[i]])
        return chosen
    for system, sample_ids in by_system.items():
        if len(sample_ids) < 2:
            continue
        ids = sorted(sample_ids)
        # Stream 0 keeps the validation draws of runs from before test carving.
        key = [seed, zlib.crc32(system.encode())] + ([stream] if stream else [])
        rng = np.random.default_rng(key)
        take = min(max(1, round(share * len(ids))), len(ids) - 1)
        chosen.update(ids[i] for i in rng.permutation(len(ids))[:take])
    return chosen


def carve_valid(corpus: Corpus, share: float, seed: int, by: str = "clip") -> Corpus:
    """The corpus with a seeded `share` of its training clips moved to `valid` (see `carve`)."""
    return corpus.with_valid(carve(corpus, share, seed, by), "carve_valid")


def carve_test(corpus: Corpus, share: float, seed: int, by: str = "clip") -> Corpus:
    """The corpus with a seeded `share` of its training clips moved to `test` (see `carve`)."""
    return corpus.with_test(carve(corpus, share, seed, by, stream=1), "carve_test")


def write_valid_split(clips: Sequence[Clip], path: str | Path) -> None:
    """Write clips' sample_id, system_id and domain to a CSV that `read_valid_split` reads."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(VALID_SPLIT_COLUMNS)
    for c in sorted(clips, key=lambda c: c.sample_id):
        writer.writerow([c.sample_id, c.system_id, c.domain])
    atomic_write_text(path, buffer.getvalue())


def read_valid_split(path: str | Path) -> list[str]:
    """Sample IDs listed in a split CSV (a `sample_id` column; other columns ignored)."""
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
