"""`sqa-compare`'s command line: its arguments, the runs of each side, and the checks of both."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from sqa import metrics
from sqa.core import artefacts
from sqa.core.atomic import output_refusal


def _predictions_file(path: str) -> Path:
    """The predictions.csv that `path` (the file or its run directory) names, resolved."""
    return (Path(path) / artefacts.PREDICTIONS_FILE if Path(path).is_dir() else Path(path)).resolve()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line, with the runs of each side as `a` and `b`."""
    parser = argparse.ArgumentParser(
        prog="sqa-compare",
        usage=(
            "%(prog)s [options] A B\n       %(prog)s [options] A1 A2 ... -- B1 B2 ...\n"
            "       %(prog)s [options] --a A1 A2 ... --b B1 B2 ..."
        ),
        description=(
            "Compare two settings on the same test clips: groups of runs (seeds), or two single runs."
        ),
        epilog=(
            "Several runs a side (seeds): B - A of the means over runs, by Welch's t against the "
            "seed-to-seed and the clip-resampling variance. One run on a side: the paired clip "
            "bootstrap alone, seed-to-seed variance not included. Method: docs/guide.md."
        ),
    )
    parser.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="run A then run B, or A's runs, --, then B's (each a predictions.csv or its run directory)",
    )
    parser.add_argument(
        "--a", nargs="+", metavar="RUN", help="the runs of setting A (the reference), a seed each"
    )
    parser.add_argument("--b", nargs="+", metavar="RUN", help="the runs of setting B, a seed each")
    parser.add_argument("--metric", default="srcc", choices=metrics.METRIC_NAMES)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the comparison as JSON to this file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --json file")
    argv = sys.argv[1:] if argv is None else list(argv)
    # `--` ends A's runs: what follows is read as `--b`, so that options may also follow B's runs.
    split = "--" in argv and "--a" not in argv and "--b" not in argv
    if split:
        argv[argv.index("--")] = "--b"
    args = parser.parse_args(argv)
    usage = "give two runs (A B), or several a side: A1 A2 A3 -- B1 B2 B3 or --a A1 A2 A3 --b B1 B2 B3"
    if split:
        args.a = args.runs
    elif args.a or args.b:
        if args.runs:
            parser.error(usage)
    elif len(args.runs) == 2:
        args.a, args.b = args.runs[:1], args.runs[1:]
    if not (args.a and args.b):
        parser.error(usage)
    if args.resamples < 1:
        parser.error("--resamples must be at least 1")
    for side, paths in (("A", args.a), ("B", args.b)):
        files = [_predictions_file(p) for p in paths]
        twice = next((p for i, p in enumerate(paths) if files[i] in files[:i]), None)
        if twice is not None:
            parser.error(f"{twice} is given twice for {side}: each run counts once")
    # The files the comparison reads: `--json` never writes over one of them.
    args.inputs = [_predictions_file(p) for p in [*args.a, *args.b]]
    refusal = args.json and output_refusal(args.json, overwrite=args.overwrite, inputs=args.inputs)
    if refusal:
        # One line, before any resampling; not argparse's usage, which says nothing of it.
        parser.exit(2, f"sqa-compare: --json {refusal}\n")
    return args
