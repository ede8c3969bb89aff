"""`sqa-score`'s command line: its arguments, their defaults and the checks of their values.

Imports nothing heavy: `sqa-score --help` and argument errors come back without loading torch.
"""

from __future__ import annotations

import argparse
import math
import os

from sqa.data.audio import MAX_AUDIO_SAMPLES, chunk_seconds_problem
from sqa.scoring.systems import DEFAULT_RESAMPLES, MAX_RESAMPLES


def default_workers() -> int:
    """Half the CPU cores (at least 1, at most 4) decode while the rest run the model."""
    return min(4, max(1, (os.cpu_count() or 1) // 2))


def argument_parser() -> argparse.ArgumentParser:
    """The parser of `sqa-score`'s command line (docs/scoring.md)."""
    parser = argparse.ArgumentParser(
        prog="sqa-score",
        description="Score audio files, folders or manifests with an exported sqa checkpoint.",
        epilog="Documentation: docs/scoring.md",
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        help=(
            "export directory, run directory holding export/, or model.pt; or distillmos (Distill-MOS, "
            "ready without training: its weights come from the installed distillmos package)"
        ),
    )
    parser.add_argument("--output", help="output .csv or .json (default: CSV on stdout)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    parser.add_argument(
        "--batch-size", type=int, default=8, help="clips (or windows) per forward pass (default: %(default)s)"
    )
    parser.add_argument(
        "--num-workers",
        type=int,
        default=default_workers(),
        help="decoding processes, 0: none (default: %(default)s)",
    )
    parser.add_argument(
        "--device", default="auto", help="auto (the GPU when present; the default), cpu, cuda, cuda:1, ..."
    )
    parser.add_argument(
        "--domain",
        help="domain name or index for models trained with domain IDs (default: the first domain, said "
        "in one line), 'mean': the mean of the scores as every domain, or 'neighbours': each clip's "
        "domain looked up from its nearest training clips (the export's datastore); refused for a "
        "model without",
    )
    parser.add_argument(
        "--mode",
        choices=("parametric", "knn", "fusion"),
        default="parametric",
        help="the overall score: the model's head (parametric, the default), the labels of the nearest "
        "training clips (knn), or their mix with the weight chosen on validation (fusion); knn and "
        "fusion need an export with a datastore (docs/scoring.md#retrieval)",
    )
    parser.add_argument(
        "--chunk-seconds",
        type=float,
        help="score clips longer than this in windows of about this length, combined weighted by frames",
    )
    parser.add_argument(
        "--pooling",
        help="masked_mean or s3prl_padded_mean: how frame scores become a clip's score (default: the "
        "export's own; imports record their authors' s3prl_padded_mean; masked_mean: a clip's frames)",
    )
    parser.add_argument(
        "--vocal-only",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="trim each clip to its vocal span (leading and trailing silence, noise floor and unpitched "
        "sound left out) before scoring; a clip without vocal activity gets a null score and a reason "
        "(docs/scoring.md#vocal-activity); default: as the export was trained (its vocal_only)",
    )
    parser.add_argument(
        "--by-system",
        action="store_true",
        help="also rank the systems by mean score, each with a 95 %% bootstrap interval and compared "
        "with the next (paired by item where they render the same items), in <output>.systems.csv|json "
        "and on stderr; system: the manifest's system_id (or system), else the folder under the folder "
        "given (audio/<system>/...), else <sys> of a <sys>-<utt> file name; a clip without one stops "
        "sqa-score before scoring (exit code 2) (docs/scoring.md#systems)",
    )
    parser.add_argument(
        "--resamples",
        type=int,
        metavar="N",
        help=f"bootstrap resamples of --by-system's intervals, 1 to {MAX_RESAMPLES} (default: "
        f"{DEFAULT_RESAMPLES})",
    )
    parser.add_argument(
        "--max-samples",
        type=int,
        default=MAX_AUDIO_SAMPLES,
        help="refuse a file whose header declares more samples (frames x channels, or resampled to "
        "the model's rate) before decoding it (default: %(default)s)",
    )
    parser.add_argument(
        "--timeline",
        metavar="DIR",
        help="also write each clip's score over time to DIR: <name>.csv (start_s, end_s, score, vocal) "
        "and <name>.png (docs/scoring.md#timelines)",
    )
    parser.add_argument(
        "--window-seconds", type=float, help="timeline window length (default: 50 frames, 1 s at 20 ms)"
    )
    parser.add_argument(
        "--hop-seconds", type=float, help="timeline window hop (default: 25 frames, 0.5 s at 20 ms)"
    )
    parser.add_argument(
        "--pairs",
        metavar="CSV",
        help="score pairs of audio paths (columns a, b; relative to the CSV's folder) instead of INPUTs: "
        "per pair the difference a - b and the probability that a is better (docs/scoring.md#preferences)",
    )
    parser.add_argument("inputs", nargs="*", help="audio files, folders, CSV manifests or .txt lists")
    return parser


def argument_problems(args: argparse.Namespace) -> list[str]:
    """What is wrong with the parsed arguments `args`, a line each, before anything is loaded."""
    problems = []
    if args.batch_size < 1:
        problems.append(f"--batch-size must be at least 1, got {args.batch_size}")
    if args.max_samples < 1:
        problems.append(f"--max-samples must be at least 1, got {args.max_samples}")
    if args.num_workers < 0:
        problems.append(f"--num-workers must be 0 or more, got {args.num_workers}")
    if args.chunk_seconds is not None and (problem := chunk_seconds_problem(args.chunk_seconds)):
        problems.append(f"--chunk-seconds {problem}")
    if args.by_system and not args.output:
        problems.append("--by-system writes a second table beside --output: give --output")
    if args.resamples is not None and not args.by_system:
        problems.append("--resamples sets the intervals of --by-system: give --by-system")
    elif args.resamples is not None and not 1 <= args.resamples <= MAX_RESAMPLES:
        problems.append(f"--resamples must be 1 to {MAX_RESAMPLES}, got {args.resamples}")
    if args.pairs is None and not args.inputs:
        problems.append("give INPUTs to score, or --pairs CSV")
    if args.pairs is not None and (args.inputs or args.by_system or args.timeline):
        problems.append(
            "--pairs scores the pairs of its CSV only: leave out INPUTs, --by-system and --timeline"
        )
    for name in ("window_seconds", "hop_seconds"):
        value = getattr(args, name)
        if value is not None and not (math.isfinite(value) and value > 0):
            problems.append(f"--{name.replace('_', '-')} must be a positive number of seconds, got {value}")
        elif value is not None and args.timeline is None:
            problems.append(f"--{name.replace('_', '-')} sets the windows of --timeline: give --timeline DIR")
    return problems
