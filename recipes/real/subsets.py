"""Small studies drawn from a real manifest: a few songs to train and validate on, the same test songs.

    python recipes/real/subsets.py data/real/ward2018-quality.csv --output-dir data/real/small
    python train.py data=csv data.corpus.path=data/real/small/ward2018-quality-small-0.csv \
        'data.corpus.score_range=[0,100]'

A user's study is small: ten songs, say, two of them set aside for validation, as the user's own
table says. Each draw `k` of `--draws` takes `--songs` of the manifest's training songs (its
`split` column: every song not in `test`), the first `--valid-songs` of them for validation
(`split` valid) and the rest for training; the test songs stay as they are, so every draw is tested
on the same held-out songs as the full manifest. Draw `k` uses the seed (`--seed`, k): the same
command gives the same subsets. The manifest must have `song_id` and `split` columns
(recipes/real/build.py writes them).
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from sqa.core.atomic import write_output


class SubsetError(ValueError):
    """A manifest that cannot give the subsets asked for."""


def read_rows(manifest: Path) -> tuple[list[str], list[dict[str, str]]]:
    """The header and rows of `manifest`, which must have `song_id` and `split` columns."""
    with manifest.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
        header = list(reader.fieldnames or [])
    missing = [c for c in ("song_id", "split") if c not in header]
    if missing:
        raise SubsetError(f"{manifest}: no {', '.join(missing)} column; build it with recipes/real/build.py")
    return header, rows


def draw(
    rows: Sequence[dict[str, str]], songs: int, valid_songs: int, seed: int, k: int
) -> list[dict[str, str]]:
    """Draw `k`: `songs` training songs of `rows` (`valid_songs` of them as validation) and every test row."""
    pool = sorted({r["song_id"] for r in rows if r["split"].strip().lower() != "test"})
    if not 0 < valid_songs < songs <= len(pool):
        raise SubsetError(
            f"cannot draw {songs} songs ({valid_songs} for validation) from {len(pool)} training songs: "
            "need 0 < valid songs < songs <= training songs"
        )
    chosen = [pool[i] for i in np.random.default_rng([seed, k]).permutation(len(pool))[:songs]]
    split = {song: "valid" for song in chosen[:valid_songs]} | {
        song: "train" for song in chosen[valid_songs:]
    }
    subset = []
    for row in rows:
        if row["split"].strip().lower() == "test":
            subset.append(dict(row))
        elif row["song_id"] in split:
            subset.append({**row, "split": split[row["song_id"]]})
    return subset


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: write `--draws` subsets of a manifest beside each other, and say their songs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("manifest", type=Path)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--draws", type=int, default=5)
    parser.add_argument("--songs", type=int, default=10)
    parser.add_argument("--valid-songs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    try:
        header, rows = read_rows(args.manifest)
        for k in range(args.draws):
            subset = draw(rows, args.songs, args.valid_songs, args.seed, k)
            text = io.StringIO()
            writer = csv.DictWriter(text, header, lineterminator="\n")
            writer.writeheader()
            writer.writerows(subset)
            output = args.output_dir / f"{args.manifest.stem}-small-{k}.csv"
            write_output(output, text.getvalue(), overwrite=args.overwrite, inputs=[args.manifest])
            valid = sorted({r["song_id"] for r in subset if r["split"] == "valid"})
            train = sorted({r["song_id"] for r in subset if r["split"] == "train"})
            print(f"{output}: {len(train)} training songs, validation songs {', '.join(valid)}")
    except (SubsetError, FileExistsError) as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
