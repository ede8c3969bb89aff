"""Validation and test splits carved from a corpus's training clips, and their CSVs.

A run writes the splits it carved to valid_split.csv and test_split.csv; a later run reuses them.
`by` chooses how clips are drawn: "clip" takes a share of every system's clips (every system is
seen on both sides), "system" a share of the systems with all their clips (system-disjoint),
"song" a share of the songs with all their clips (song-disjoint: what a test on other songs
meets), and "auto" is "song" where every training clip names its song, else "clip".

A split CSV quotes a cell that a spreadsheet would run as a formula (`=SYS1()`, `+cmd1`) with a
leading `'`, as predictions.csv does; text that reads as a number (`-1`) is kept. The reader
removes exactly that quote (`sqa.core.artefacts.unquoted_cell`), so the sample IDs read back as
they were. A file written before the quoting holds none, and reads as it did, unless a sample
ID itself begins with `'` before a formula (`'=x`): that one now reads without its `'`.
"""

from __future__ import annotations

import csv
import io
import zlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sqa.core.artefacts import quoted_cell, unquoted_cell
from sqa.core.atomic import atomic_write_text
from sqa.data.corpus import Clip, Corpus, CorpusError
from sqa.data.readers import read_text

VALID_SPLIT_COLUMNS = ("sample_id", "system_id", "domain")
SPLIT_BY = ("auto", "clip", "system", "song")


def carve(corpus: Corpus, share: float, seed: int, by: str = "clip", stream: int = 0) -> set[str]:
    """Sample IDs of a seeded `share` of the corpus's training clips, drawn by clip or by system.

    by="clip": a system with n ≥ 2 training clips gives max(1, round(share·n)) of them and keeps
    at least one; each system's draw depends only on the seed, its ID and its clips' sample IDs.
    by="system": max(1, round(share·S)) of the S training systems (at least one kept) give all
    their training clips; by="song" likewise by song (at least 2 songs of 3 or more), every
    training clip naming one; by="auto":
    `resolve_split_by`. `stream` separates draws of one seed (0: validation, 1: test).
    """
    if not 0 < share < 1:
        raise ValueError(f"the share to carve must be in (0, 1), got {share}")
    if by not in SPLIT_BY:
        raise ValueError(f"split_by must be one of {list(SPLIT_BY)}, got {by!r}")
    by = resolve_split_by(corpus, by)
    if by in ("system", "song"):
        return _carve_groups(corpus, share, seed, by, stream)
    by_system: dict[str, list[str]] = {}
    for c in corpus.split("train"):
        by_system.setdefault(c.system_id, []).append(c.sample_id)
    chosen: set[str] = set()
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


def resolve_split_by(corpus: Corpus, by: str) -> str:
    """`by` itself, or for "auto" "song" where every training clip names its song and "clip" where not.

    by="song" on a corpus with a training clip that names no song is a CorpusError naming it.
    """
    train = corpus.split("train")
    unnamed = [c.sample_id for c in train if not c.song]
    if by == "song" and unnamed:
        raise CorpusError(
            f"split_by=song, but training clip {unnamed[0]!r} (and {len(unnamed) - 1} more) names no "
            "song: add a song_id column (or map one with data.corpus.columns={song_id: <column>})"
        )
    if by == "auto":
        return "song" if train and not unnamed else "clip"
    return by


def _carve_groups(corpus: Corpus, share: float, seed: int, by: str, stream: int) -> set[str]:
    """Every training clip of max(1, round(share·G)) of the G systems or songs (at least one kept).

    Songs give at least two (of three or more): a split of one song measures that song alone.
    """
    groups: dict[str, list[str]] = {}
    for c in corpus.split("train"):
        groups.setdefault(c.system_id if by == "system" else str(c.song), []).append(c.sample_id)
    names = sorted(groups)
    chosen: set[str] = set()
    if len(names) < 2:
        return chosen
    # "systems" keeps the draws of runs from before songs were a way to carve.
    rng = np.random.default_rng([seed, stream, zlib.crc32(f"{by}s".encode())])
    # A split of one song measures that song: songs give at least two where three or more exist.
    least = 2 if by == "song" else 1
    take = min(max(least, round(share * len(names))), len(names) - 1)
    for i in rng.permutation(len(names))[:take]:
        chosen.update(groups[names[i]])
    return chosen


def carve_valid(corpus: Corpus, share: float, seed: int, by: str = "clip") -> Corpus:
    """The corpus with a seeded `share` of its training clips moved to `valid` (see `carve`)."""
    return corpus.with_valid(carve(corpus, share, seed, by), "carve_valid")


def carve_test(corpus: Corpus, share: float, seed: int, by: str = "clip") -> Corpus:
    """The corpus with a seeded `share` of its training clips moved to `test` (see `carve`)."""
    return corpus.with_test(carve(corpus, share, seed, by, stream=1), "carve_test")


def write_valid_split(clips: Sequence[Clip], path: str | Path) -> None:
    """Write clips' sample_id, system_id and domain, formulas quoted, to a CSV `read_valid_split` reads."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer)
    writer.writerow(VALID_SPLIT_COLUMNS)
    for c in sorted(clips, key=lambda c: c.sample_id):
        writer.writerow([quoted_cell(str(cell)) for cell in (c.sample_id, c.system_id, c.domain)])
    atomic_write_text(path, buffer.getvalue())


def read_valid_split(path: str | Path) -> list[str]:
    """Sample IDs listed in a split CSV (a `sample_id` column, formulas unquoted; other columns ignored)."""
    path = Path(path)
    # UTF-8 with or without a byte-order mark, as every metadata file; another encoding is an
    # error naming the byte and line.
    reader = csv.DictReader(io.StringIO(read_text(path), newline=""))
    if "sample_id" not in (reader.fieldnames or []):
        raise CorpusError(f"{path}: no 'sample_id' column; found {reader.fieldnames}")
    try:
        ids = [unquoted_cell(row["sample_id"]) for row in reader]
    except csv.Error as err:
        raise CorpusError(f"{path}: not a CSV file ({err})") from None
    if not ids:
        raise CorpusError(f"{path}: lists no sample IDs")
    return ids
