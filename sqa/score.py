"""Command line: score wav files, folders or manifests with an exported checkpoint.

    python -m sqa.score --checkpoint <export dir> [--output scores.csv|scores.json] INPUT...

Output columns: `path, score` (the overall MOS) and `score_<dim>` for each other score dimension
of the model. INPUT is an audio file, a folder (searched recursively for audio files), a CSV manifest with a
`wav_path` column (relative paths resolve against the CSV's folder) or a .txt list of paths.
Inputs that cannot be read are reported on stderr and the exit code is 1; every other input is
still scored and written.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from sqa.atomic import json_text
from sqa.export import ExportError
from sqa.scoring import Scorer, ScoreResult

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".aiff", ".aif", ".mp3", ".opus"}


def expand_inputs(inputs: list[str]) -> Iterator[str]:
    """Audio paths named by files, folders, CSV manifests (wav_path column) and .txt lists."""
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            yield from (str(p) for p in sorted(path.rglob("*")) if p.suffix.lower() in AUDIO_SUFFIXES)
        elif path.suffix.lower() == ".csv" and path.is_file():
            with path.open(newline="") as fh:
                for row in csv.DictReader(fh):
                    wav = Path(row["wav_path"])
                    yield str(wav if wav.is_absolute() else path.parent / wav)
        elif path.suffix.lower() == ".txt" and path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    wav = Path(line.strip())
                    yield str(wav if wav.is_absolute() else path.parent / wav)
        else:
            yield str(path)


def write_results(results: list[ScoreResult], output: str | None, dimensions: Sequence[str] = ()) -> None:
    """Write `path,score` rows as CSV (stdout or a .csv file) or a JSON list (.json file).

    Each of the other score `dimensions` of the model adds a `score_<dim>` column (or key).
    """
    good = [r for r in results if r.error is None]
    if output and output.endswith(".json"):
        items = [
            {"path": r.path, "score": r.score, **{f"score_{d}": r.dimension_scores[d] for d in dimensions}}
            for r in good
        ]
        Path(output).write_text(json_text(items, indent=1))
        return
    fh = open(output, "w", newline="") if output else sys.stdout  # noqa: SIM115
    try:
        writer = csv.writer(fh)
        writer.writerow(["path", "score", *(f"score_{d}" for d in dimensions)])
        for r in good:
            writer.writerow([r.path, repr(r.score), *(repr(r.dimension_scores[d]) for d in dimensions)])
    finally:
        if output:
            fh.close()


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-score`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="sqa-score", description=__doc__.split("\n")[0])
    parser.add_argument("--checkpoint", required=True, help="export directory (model.pt, config.yaml)")
    parser.add_argument("--output", help="output .csv or .json (default: CSV on stdout)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--domain",
        help="domain name or index for models trained with domain IDs (default: the first domain)",
    )
    parser.add_argument("inputs", nargs="+", help="audio files, folders, CSV manifests or .txt lists")
    args = parser.parse_args(argv)
    try:
        scorer = Scorer(args.checkpoint, args.device, args.batch_size, args.domain)
    except (ExportError, ValueError) as err:
        print(f"sqa-score: {err}", file=sys.stderr)
        return 2
    paths = list(expand_inputs(args.inputs))
    if not paths:
        print("sqa-score: no audio files found in the inputs", file=sys.stderr)
        return 1
    results = list(scorer.score_files(paths))
    write_results(results, args.output, scorer.dimensions[1:])
    failed = [r for r in results if r.error is not None]
    for r in failed:
        print(f"sqa-score: {r.error}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
