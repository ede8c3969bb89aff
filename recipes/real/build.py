"""sqa manifests of two public listening tests, built from local clones of their repositories.

    git clone https://github.com/CVSSP/perceptual-study-source-separation ward2018
    git clone -b gh-pages https://github.com/CVSSP/listen-sisec-mus-18-subjective-evaluation sisec18
    python recipes/real/build.py ward2018 ward2018 --output data/real/ward2018-quality.csv
    python recipes/real/build.py sisec18 sisec18 --output data/real/sisec18-similarity.csv

Both are MUSHRA tests (ratings 0-100) of singing voice separated from a mix:
- ward2018 (Ward et al., ICASSP 2018): 16 songs x 8 stimuli, each rated for sound `quality`
  and, in a second experiment, for `interferer` (how little of the accompaniment leaks in).
  The ratings are `data/ratings.csv`, the audio `site/sounds/<page>/<sound>.flac`.
- sisec18 (the SiSEC 2018 listening test): 15 songs x 9 stimuli rated for similarity to the
  reference vocals. The ratings are the listeners' submissions in `_data/results/similarity/`
  of the gh-pages branch, which also holds the audio in `sounds/<song>/`.

One row per rating: wav_path (absolute), score, system_id (the separation method), sample_id,
listener_id (the submission's anonymous ID, never the name a listener typed), song_id, role
(`reference` for the hidden reference, `anchor` for the anchors, empty for a method) and split.
A test split is given by song (`--test-songs`, the default rule below) and every other song is
`train`; sqa carves validation by song from it (data.split_by=auto), so that selection, like the
test, meets songs it has not heard. Nothing is downloaded: a missing file is an error naming it.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path

COLUMNS = ("wav_path", "score", "system_id", "sample_id", "listener_id", "song_id", "role", "split")
# The stimuli that are not separation methods, by test.
WARD_ROLES = {"ref": "reference", "Quality": "anchor", "Interferer": "anchor"}
SISEC_ROLES = {"Ref": "reference", "Anch1": "anchor", "Anch2": "anchor"}
WARD_EXPERIMENTS = ("quality", "interferer")
# Songs held out for the test when none are named: the TEST_SONGS songs first in order of the CRC-32
# of their names, a rule that depends on nothing but the names.
TEST_SONGS = 3


class BuildError(ValueError):
    """A clone that does not hold what its test's layout names."""


def default_test_songs(songs: Iterable[str], count: int = TEST_SONGS) -> list[str]:
    """The `count` songs first in order of the CRC-32 of their UTF-8 names (ties by name)."""
    return sorted(sorted(set(songs)), key=lambda s: zlib.crc32(s.encode("utf-8")))[:count]


def _audio(clone: Path, relative: str) -> Path:
    """The audio file `relative` inside `clone`, which must exist there."""
    path = clone / relative
    if not path.is_file():
        raise BuildError(f"{path}: missing; is {clone} a whole clone of the test's repository?")
    return path


def _with_splits(rows: list[dict[str, str]], test_songs: Sequence[str] | None) -> list[dict[str, str]]:
    """`rows` with split `test` for the rows of `test_songs` (default rule if None), else `train`."""
    songs = {r["song_id"] for r in rows}
    chosen = list(test_songs) if test_songs is not None else default_test_songs(songs)
    unknown = sorted(set(chosen) - songs)
    if unknown:
        raise BuildError(f"test songs {unknown} are not songs of this test; its songs: {sorted(songs)}")
    return [{**r, "split": "test" if r["song_id"] in chosen else "train"} for r in rows]


def ward2018_rows(
    clone: Path, experiment: str, test_songs: Sequence[str] | None = None
) -> list[dict[str, str]]:
    """The ratings of one Ward et al. (2018) experiment (`quality` or `interferer`) as manifest rows."""
    if experiment not in WARD_EXPERIMENTS:
        raise BuildError(f"experiment must be one of {list(WARD_EXPERIMENTS)}, got {experiment!r}")
    table = clone / "data" / "ratings.csv"
    if not table.is_file():
        raise BuildError(f"{table}: missing; is {clone} a clone of CVSSP/perceptual-study-source-separation?")
    with table.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"page", "sound", "rating", "subject", "experiment"} - set(reader.fieldnames or ())
        if missing:
            raise BuildError(f"{table}: no column(s) {sorted(missing)}")
        ratings = [r for r in reader if r["experiment"] == experiment]
    if not ratings:
        raise BuildError(f"{table}: no ratings of the {experiment!r} experiment")
    rows = []
    for r in ratings:
        page, sound = r["page"], r["sound"]
        rows.append(
            {
                "wav_path": str(_audio(clone, f"site/sounds/{page}/{sound}.flac").resolve()),
                "score": r["rating"],
                "system_id": sound,
                "sample_id": f"{page}-{sound}",
                "listener_id": r["subject"],
                # vocals-<track>-<SIR|SAR>: the track is the song.
                "song_id": page.split("-")[1] if page.count("-") == 2 else page,
                "role": WARD_ROLES.get(sound, ""),
            }
        )
    return _with_splits(rows, test_songs)


def _submission_pages(path: Path) -> list[dict]:
    """The rated pages of one listener's submission file (its `data` holds the pages, as JSON text)."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        data = record["data"]
        data = json.loads(data) if isinstance(data, str) else data
        return list(data["pages"])
    except (ValueError, KeyError, TypeError) as err:
        raise BuildError(f"{path}: not a listener's submission ({type(err).__name__}: {err})") from None


def sisec18_rows(clone: Path, test_songs: Sequence[str] | None = None) -> list[dict[str, str]]:
    """The similarity ratings of the SiSEC 2018 listening test (gh-pages branch) as manifest rows."""
    results = clone / "_data" / "results" / "similarity"
    submissions = sorted(results.glob("*.json")) if results.is_dir() else []
    if not submissions:
        raise BuildError(
            f"{results}: no submissions; the ratings are on the gh-pages branch "
            f"(git -C {clone} checkout gh-pages)"
        )
    rows = []
    for path in submissions:
        listener = path.stem
        for page in _submission_pages(path):
            for sound in page.get("sounds", []):
                url, name = sound["url"], sound["name"]
                song = url.split("/")[1]
                rows.append(
                    {
                        "wav_path": str(_audio(clone, url).resolve()),
                        "score": str(sound["rating"]),
                        "system_id": name,
                        "sample_id": f"{song}-{name}",
                        "listener_id": listener,
                        "song_id": song,
                        "role": SISEC_ROLES.get(name, ""),
                    }
                )
    return _with_splits(rows, test_songs)


def write_manifest(rows: Sequence[dict[str, str]], output: Path, overwrite: bool = False) -> None:
    """Write `rows` as a CSV manifest to `output` (an existing file only with `overwrite`)."""
    if output.exists() and not overwrite:
        raise BuildError(f"{output}: exists; pass --overwrite to replace it")
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: build one manifest and say its clips, songs and test songs."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("test", choices=["ward2018", "sisec18"])
    parser.add_argument("clone", type=Path, help="the local clone of the test's repository")
    parser.add_argument("--experiment", choices=WARD_EXPERIMENTS, default="quality", help="ward2018 only")
    parser.add_argument("--test-songs", nargs="*", help="songs held out for the test (default: the rule)")
    parser.add_argument("--output", type=Path, required=True)
    parser.add_argument("--overwrite", action="store_true")
    args = parser.parse_args(argv)
    try:
        if args.test == "ward2018":
            rows = ward2018_rows(args.clone, args.experiment, args.test_songs)
        else:
            rows = sisec18_rows(args.clone, args.test_songs)
        write_manifest(rows, args.output, args.overwrite)
    except BuildError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    clips = {r["sample_id"] for r in rows}
    tests = sorted({r["song_id"] for r in rows if r["split"] == "test"})
    print(
        f"{args.output}: {len(rows)} ratings of {len(clips)} clips, {len({r['song_id'] for r in rows})} songs"
    )
    print(f"test songs: {', '.join(tests)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
