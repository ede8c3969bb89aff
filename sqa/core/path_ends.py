"""Telling files apart by name: the shortest end of each path that no other file shares.

Takes in voice folders (`soprano/take1.wav`, `alto/take1.wav`) share a name; the end of the path
that tells them apart (`soprano/take1`) names each one wherever sqa needs a name per file: a
table's derived sample IDs, a timeline's file name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path


def distinct_ends(files: Iterable[Path]) -> dict[Path, tuple[str, ...]]:
    """Each file's shortest path end (folder names, then its stem) that no other of `files` shares.

    A file whose name no other has keeps its stem alone, `("take1",)`. Files that only their
    extension tells apart (`a.wav`, `a.flac` in one folder) have no such end and are left out.
    """
    ends = {f: (*(p for p in f.parent.parts if p != f.anchor), f.stem) for f in set(files)}
    found: dict[Path, tuple[str, ...]] = {}
    for length in range(1, max((len(e) for e in ends.values()), default=0) + 1):
        # An end no other file shares tells its file apart; two files' ends of different lengths differ.
        counts = Counter(e[-length:] for e in ends.values())
        for file, end in ends.items():
            if file not in found and counts[end[-length:]] == 1:
                found[file] = end[-length:]
    return found
