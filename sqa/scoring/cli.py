"""Command line: score audio files, folders or manifests with an exported checkpoint.

    sqa-score --checkpoint <export dir | run dir | model.pt> [--output scores.csv|scores.json] INPUT...

INPUT is an audio file, a folder (searched recursively for audio files), a CSV manifest with a
`wav_path` (or `path`) column (relative paths resolve against the CSV's folder; its other columns are passed
through to the output, renamed `manifest_<name>` where they clash with an output column) or a
.txt list of paths. Output columns: `path, score` (the overall MOS), `spread, lo90, hi90` for a
model with a spread (that of a listener's rating, and its 90 % interval), `score_<dim>` for each
other score dimension of the model, `reason` where a clip has a null score (with `--vocal-only`, no
vocal activity: a warning, not a failure), then the manifest columns. The output is checked before anything is
scored and written atomically at the end; an existing file is replaced only with `--overwrite`,
an input never. Every input that cannot be scored is reported on stderr and the exit code is 1;
the rest is still scored and written. With `--by-system [--resamples N]`, the systems ranked by
mean score with bootstrap intervals and each compared with the next (`sqa.scoring.systems`) go to
<output>.systems.csv|json and stderr; a clip whose system cannot be told stops it before anything
is loaded, in one line, exit code 2. Exit code 2: bad arguments, output path or export.

    sqa-score --checkpoint E --timeline DIR [--window-seconds 1] [--hop-seconds 0.5] INPUT...

also writes each clip's score over time to DIR: `<name>.csv` (start_s, end_s, score, vocal) and
`<name>.png` (`sqa.scoring.timeline`); a file in DIR that sqa did not write is never replaced.

    sqa-score --checkpoint E --pairs pairs.csv [--output preferences.csv]

scores the pairs of audio paths in columns `a`, `b` of pairs.csv and writes per pair: line, a, b,
score_a, score_b, difference (a - b) and p_a_better (`sqa.scoring.preferences`: for a model with
a spread, the probability that a listener rates a above b; else that a's MOS is above b's).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from sqa.core.extras import MissingExtraError
from sqa.core.signals import stop_on_signals
from sqa.scoring.cli_arguments import argument_parser, argument_problems, default_workers
from sqa.scoring.inputs import expand_inputs
from sqa.scoring.outputs import check_output, clip_rows, emit, system_rows, systems_output
from sqa.scoring.systems import DEFAULT_RESAMPLES, Layout, clip_layout, rank_systems, unknown_systems
from sqa.scoring.timeline import check_timeline_folder, safe_stems

if TYPE_CHECKING:
    import numpy as np

    from sqa.scoring.results import ScoreResult
    from sqa.scoring.scorer import Scorer

# Every public name of this module (`default_workers` now defined in cli_arguments): each stays
# `sqa.scoring.cli.<name>`.
__all__ = ["default_workers", "main"]


def _fail(messages: Sequence[str], code: int) -> int:
    for message in messages:
        print(f"sqa-score: {message}", file=sys.stderr)
    return code


def _warning_line(message: Warning | str, *_: object, **__: object) -> None:
    """`warnings.showwarning` as one line on stderr, without Python's source line."""
    _fail([f"warning: {message}"], 0)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-score`; returns the exit code, or exits 130 / 143 on SIGINT / SIGTERM.

    A signal ends it with one line and no traceback, its decoding workers shut down; outputs are
    written only at the end (atomically), so none is written half, and what was there is as it was.
    """
    whole = "no output is left half-written (each is written whole, or not at all)"
    with stop_on_signals("sqa-score", whole):
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    """`sqa-score` itself (see `main`)."""
    args = argument_parser().parse_args(argv)
    problems = argument_problems(args)
    if problems:
        return _fail(problems, 2)
    if args.pairs is not None:
        return _score_pairs(args)
    inputs = expand_inputs(args.inputs)
    output = Path(args.output) if args.output else None
    layout = None
    if args.by_system:
        # Told from the paths alone, so that a clip without a system stops the run before minutes of scoring.
        layout = clip_layout(inputs.paths, inputs.tops, inputs.columns)
        unknown = unknown_systems(inputs.paths, layout.systems)
        if unknown is not None:
            return _fail([f"--by-system: {unknown}; nothing was scored"], 2)
    outputs = [] if output is None else [output, systems_output(output)] if layout else [output]
    named = [*args.inputs, *inputs.paths]
    problems = [p for p in (check_output(o, args.overwrite, named) for o in outputs) if p is not None]
    stems = safe_stems(inputs.paths)
    if args.timeline is not None:
        problems.append(check_timeline_folder(Path(args.timeline), stems, args.overwrite, outputs))
    problems = [p for p in problems if p is not None]
    if problems:
        return _fail(problems, 2)

    scorer = _load_scorer(args)
    if isinstance(scorer, str):
        return _fail([scorer], 2)
    if not inputs.paths:
        return _fail([*inputs.problems, "nothing to score; no output written"], 1)
    results: list[ScoreResult | None] = [None] * len(inputs.paths)
    # Each scored file's frame scores, kept for its timeline: the network runs once per file.
    frames: dict[int, np.ndarray] | None = {} if args.timeline is not None else None
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=len(results), unit="clip", file=sys.stderr)
    try:
        with warnings.catch_warnings():
            # A warning while scoring (a decoding worker died, chunked scores may move) is one line.
            warnings.showwarning = _warning_line
            # As batches finish, for the progress bar; the rows are put back in input order by index.
            for result in scorer.score_files(inputs.paths, args.num_workers, ordered=False, frames=frames):
                results[result.index] = result
                if bar is not None:
                    bar.update()
    except MissingExtraError as err:  # e.g. the f0 extractor of a model with a pitch branch
        return _fail([str(err)], 2)
    finally:
        if bar is not None:
            bar.close()
    done = [r for r in results if r is not None]
    systems = layout.systems if layout is not None else None
    rows = clip_rows(done, inputs, scorer.dimensions[1:], systems, scorer.distribution)
    messages = [*inputs.problems, *(r.error for r in done if r.error is not None)]
    messages += [f"warning: {r.path}: {r.warning}" for r in done if r.warning is not None]
    unwritten = 0
    if rows:
        lost = [emit(rows, output, args.overwrite)]
        if layout is not None:
            lost.append(_write_ranking(done, layout, rows, scorer.dimensions[1:], output, args))
        messages += [m for m in lost if m is not None]
        unwritten = sum(m is not None for m in lost)
    elif output is not None:
        messages.append(f"no input could be scored; {output} was not written")
    failed = len(inputs.problems) + sum(r.error is not None for r in done)
    if failed:
        messages.append(f"{failed} input(s) could not be scored; {len(rows)} clip(s) scored")
    if args.timeline is not None:
        scored = [(stems[r.index], r.path, frames[r.index]) for r in done if r.score is not None]
        lost = _write_timelines(scorer, args, scored)
        messages += lost
        unwritten += len(lost)
    return _fail(messages, 1 if failed or unwritten else 0)


def _write_ranking(
    done: list[ScoreResult],
    layout: Layout,
    rows: list[dict],
    dimensions: Sequence[str],
    output: Path,
    args: argparse.Namespace,
) -> str | None:
    """Rank the readable clips' systems, print the ranking and write the systems table; None, or why not."""
    readable = [r for r in done if r.error is None]
    ranking = rank_systems(
        [r.score for r in readable],
        [layout.systems[r.index] for r in readable],
        [layout.items[r.index] for r in readable],
        args.resamples or DEFAULT_RESAMPLES,
    )
    _fail(ranking.lines(), 0)
    return emit(system_rows(rows, dimensions, ranking), systems_output(output), args.overwrite)


def _load_scorer(args: argparse.Namespace) -> Scorer | str:
    """The export of `args` loaded for scoring, its notes printed as one line each; or why it failed."""
    # Imported only now, so that --help and argument errors come back without loading torch.
    from sqa.exports.format import ExportError
    from sqa.scoring.named import is_named, loaded_line
    from sqa.scoring.scorer import Scorer
    from sqa.scoring.scorer_warnings import DomainWarning, LearningWarning

    try:
        with warnings.catch_warnings():
            # Printed below as one line, not as Python's warning with its source line.
            warnings.simplefilter("ignore", LearningWarning)
            warnings.simplefilter("ignore", DomainWarning)
            scorer = Scorer(
                args.checkpoint,
                args.device,
                args.batch_size,
                args.domain,
                args.chunk_seconds,
                max_samples=args.max_samples,
                pooling=args.pooling,
                vocal_only=args.vocal_only,
                mode=args.mode,
            )
    except (ExportError, ValueError, MissingExtraError) as err:
        return str(err)
    if is_named(args.checkpoint):
        # A built-in name is never a folder of the same name (docs/scoring.md): say which scores.
        _fail([loaded_line(args.checkpoint)], 0)
    if scorer.learning_warning is not None:
        _fail([f"warning: {scorer.learning_warning}"], 0)
    if scorer.domain_note is not None:
        _fail([scorer.domain_note], 0)
    return scorer


def _write_timelines(
    scorer: Scorer, args: argparse.Namespace, clips: list[tuple[str, str, np.ndarray]]
) -> list[str]:
    """Write the timeline of each (stem, path, frame scores) of `clips` into --timeline; what was not written.

    The frame scores are those the scoring pass kept: the file is decoded again, not scored again.
    """
    from sqa.data.audio import load_audio
    from sqa.scoring.timeline import write_timeline

    folder = Path(args.timeline)
    lost = []
    for stem, path, frames in clips:
        try:
            wav = load_audio(path, scorer.sample_rate, scorer.max_samples)
            timeline = scorer.timeline_of(wav, frames, args.window_seconds, args.hop_seconds)
            write_timeline(folder, stem, timeline, path, scorer.predictor.score_range, args.overwrite)
        except (OSError, ValueError, MissingExtraError) as err:
            lost.append(f"{path}: timeline not written ({err})")
    return lost


def _score_pairs(args: argparse.Namespace) -> int:
    """`sqa-score --pairs`: the preference of each pair of the CSV; returns the exit code."""
    from sqa.scoring.preferences import preference, read_pairs

    output = Path(args.output) if args.output else None
    try:
        pairs = read_pairs(Path(args.pairs))
    except ValueError as err:
        return _fail([str(err)], 2)
    paths = list(dict.fromkeys(path for pair in pairs.pairs for path in pair))
    if output is not None and (problem := check_output(output, args.overwrite, [args.pairs, *paths])):
        return _fail([problem], 2)
    scorer = _load_scorer(args)
    if isinstance(scorer, str):
        return _fail([scorer], 2)
    if scorer.sigma_note is not None and scorer.distribution is None:
        _fail([f"warning: {scorer.sigma_note}"], 0)
    with warnings.catch_warnings():
        warnings.showwarning = _warning_line
        results = {r.path: r for r in scorer.score_files(paths, args.num_workers)}
    messages = list(pairs.problems)
    warned = [
        f"warning: {r.path}: {r.warning}" for r in results.values() if r.score is not None and r.warning
    ]
    rows = []
    for line, (a, b) in zip(pairs.lines, pairs.pairs, strict=True):
        unscored = [
            f"{args.pairs}, line {line}: column {column}: {results[path].error or results[path].warning}"
            for column, path in zip("ab", (a, b), strict=True)
            if results[path].score is None
        ]
        if unscored:
            messages += unscored
            continue
        spreads = None
        if scorer.distribution is not None:
            spreads = (results[a].spread, results[b].spread, scorer.distribution)
        pref = preference(results[a].score, results[b].score, scorer.sigma, spreads)
        rows.append(
            {
                "line": line,
                "a": a,
                "b": b,
                "score_a": pref.score_a,
                "score_b": pref.score_b,
                "difference": pref.difference,
                "p_a_better": pref.p_a_better,
            }
        )
    failed = len(messages)
    if rows:
        lost = emit(rows, output, args.overwrite)
        if lost is not None:
            messages.append(lost)
    elif output is not None:
        messages.append(f"no pair could be scored; {output} was not written")
    if failed:
        messages.append(f"{failed} problem(s) in {args.pairs}; {len(rows)} pair(s) scored")
    return _fail([*warned, *messages], 1 if messages else 0)


if __name__ == "__main__":
    sys.exit(main())
