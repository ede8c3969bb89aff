"""Command line: score a corpus's test sets with a pretrained speech-MOS baseline, no training.

    sqa-baseline --corpus synthetic [--output ovrl|sig|bak|p808] [--run-dir DIR [--overwrite]]
    sqa-baseline --corpus singmos_pro --root DIR      (16 kHz clips only, as conf/data/singmos_pro.yaml)
    sqa-baseline --corpus singmos_vmc24 --root DIR
    sqa-baseline --corpus csv --manifest FILE         (rows without a split column count as test)

    sqa-baseline --corpus synthetic_mushra                          (0-100, the MUSHRA-style corpus)
    sqa-baseline --corpus csv --manifest FILE --score-range 0 100

    sqa-baseline --model distillmos --corpus synthetic              (Distill-MOS instead of DNSMOS)

`--model` chooses the baseline: `dnsmos` (the default; P.835 OVRL, SIG, BAK or P.808, `--output`)
or `distillmos` (Distill-MOS, one score: `--output mos`). Clips are read by `sqa-score`'s loader
(headers checked first, length-sorted batches of files decoded by `--num-workers` processes) and
scored a batch at a time (`DNSMOS.score_files`, `DistillMOS.score_files`).

Writes `predictions.csv` (sample_id, system_id, test_set, mos, pred), `metrics.json` with 95 %
bootstrap intervals and the scatter plots into the run directory exactly as a training run does,
under the same lock and previous-run rule (`--overwrite` starts over, replacing only sqa's files),
so `sqa-table` and any tool reading a run's files treats the baseline like a trained model, and
prints the metric table. References and anchors are scored on their own rows, outside `avg`.

Both baselines score on 1-5. On a corpus of another scale (`--score-range`), their scores are
mapped onto the corpus's by the least-squares line `a + b·score` fitted on the training split's
clips, and `pred`, the errors and the plots use the mapped scores; correlations are those of the
baseline's own scores (which a line with b > 0 leaves as they are). Without training clips the
errors are undefined there. The line is recorded in `run_info.json` (`scale_map`).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from sqa import metrics
from sqa.baselines import distillmos, dnsmos
from sqa.baselines.corpora import BASELINE_RANGE, CORPORA, DEFAULT_RATE_FILTER, read_corpus
from sqa.baselines.distillmos import DistillMOS
from sqa.baselines.dnsmos import DNSMOS
from sqa.core import artefacts
from sqa.core.atomic import atomic_write_json
from sqa.core.provenance import package_versions
from sqa.core.run_folder import claimed, discard_previous
from sqa.core.run_lock import Options, RunDirError
from sqa.data.corpus import ROLES, Clip, CorpusError
from sqa.data.validate import Problem, format_report
from sqa.reports import tables
from sqa.reports.scale import fit_line

Baseline = DNSMOS | DistillMOS
# Why errors are undefined on a corpus whose scale no line maps the scores onto.
UNMAPPED = "the scores are on another scale, and no training clips map them onto the corpus's"
# Every public name this module had, the corpus reading now in `sqa.baselines.corpora` included.
__all__ = [
    "BASELINES",
    "BASELINE_RANGE",
    "CORPORA",
    "DEFAULT_RATE_FILTER",
    "OPTIONS",
    "Baseline",
    "BaselineModel",
    "evaluate_on_scale",
    "main",
    "read_corpus",
    "run_info",
    "score_clips",
    "score_corpus",
]


class BaselineModel(NamedTuple):
    """A `--model`: its scorer, name in messages, scores and the packages run_info.json records.

    `outputs` are the names `--output` chooses from; the first is the default.
    """

    scorer: type[Baseline]
    name: str
    outputs: tuple[str, ...]
    packages: tuple[str, ...]


# sqa-baseline's settings as its messages name them (no resume: scoring is one step).
OPTIONS = Options("--run-dir", None, "--overwrite")

BASELINES = {
    "dnsmos": BaselineModel(
        DNSMOS, "DNSMOS", dnsmos.OUTPUTS, ("speechmos", "onnxruntime", "numpy", "soundfile", "soxr")
    ),
    "distillmos": BaselineModel(
        DistillMOS, "Distill-MOS", distillmos.OUTPUTS, ("distillmos", "torch", "numpy", "soundfile", "soxr")
    ),
}


def evaluate_on_scale(
    rows: list[dict[str, Any]], line: tuple[float, float] | None, bootstrap: int, seed: int
) -> dict[str, Any]:
    """Metrics of the rows' `raw` (baseline) scores: correlations as they are, errors after `line`.

    `line` None: the corpus is on the baseline's scale (errors as they are) or no line could be
    fitted (errors NaN). Each row's `pred` is set to the score on the corpus's scale.
    """
    raw = [r["raw"] for r in rows]
    on_scale = raw if line is None else [line[0] + line[1] * v for v in raw]
    for row, value in zip(rows, on_scale, strict=True):
        row["pred"] = value
    true, systems, sets = (
        [r["mos"] for r in rows],
        [r["system_id"] for r in rows],
        [r["test_set"] for r in rows],
    )
    results = metrics.evaluate_sets(raw, true, systems, sets, bootstrap=bootstrap, seed=seed, apart=ROLES)
    if line is None:
        return results
    mapped = metrics.evaluate_sets(on_scale, true, systems, sets, bootstrap=bootstrap, seed=seed, apart=ROLES)
    for name, block in results.items():
        for level in metrics.LEVELS:
            for key in metrics.ERROR_METRICS:
                block[level][key] = mapped[name][level][key]
                if metrics.CI_KEY in block:
                    block[metrics.CI_KEY][level][key] = mapped[name][metrics.CI_KEY][level][key]
    return results


def scale_map(train: list[dict[str, Any]]) -> tuple[tuple[float, float] | None, dict[str, Any] | None]:
    """The line `a + b·raw` from scores onto labels, least squares over the training rows, and its record.

    Errors on a corpus of another scale need the scores mapped onto it; (None, None) where no
    line can be fitted (fewer than two training clips, or one score for all of them).
    """
    line = fit_line([r["raw"] for r in train], [r["mos"] for r in train])
    return line, ({"a": line[0], "b": line[1], "train_clips": len(train)} if line else None)


def results_on_scale(
    rows: list[dict[str, Any]],
    line: tuple[float, float] | None,
    score_range: tuple[float, float],
    own_range: tuple[float, float],
    bootstrap: int,
    seed: int,
) -> dict[str, Any]:
    """`evaluate_on_scale`, with the errors NaN where the scales differ and no `line` maps between them.

    `score_range` is the corpus's scale, `own_range` the predictor's.
    """
    results = evaluate_on_scale(rows, line, bootstrap, seed)
    if line is None and tuple(score_range) != tuple(own_range):
        for block in results.values():
            for level in metrics.LEVELS:
                block[level].update({key: math.nan for key in metrics.ERROR_METRICS})
                block.setdefault(metrics.UNDEFINED_KEY, {}).setdefault(level, {}).update(
                    {key: UNMAPPED for key in metrics.ERROR_METRICS}
                )
                if metrics.CI_KEY in block:
                    block[metrics.CI_KEY][level].update({key: None for key in metrics.ERROR_METRICS})
    return results


def score_clips(
    scorer: Baseline, test_sets: dict[str, list[Clip]], output: str, num_workers: int = 0
) -> tuple[list[dict[str, Any]], list[Problem]]:
    """Prediction rows (the score `output` as `raw`) of every readable clip, and a problem for each other one.

    Clips are read and scored in batches (the scorer's `score_files`); rows and problems keep
    the order of the sets and their clips.
    """
    named = [(name, clip) for name, clips in test_sets.items() for clip in clips]
    results = {
        r.index: r for r in scorer.score_files([clip.path for _, clip in named], num_workers=num_workers)
    }
    rows, problems = [], []
    for i, (name, clip) in enumerate(named):
        result = results[i]
        if clip.problems:
            # Cells its reader could not read (a score that is not a number): no label to score against.
            problems += [Problem(str(clip.path), clip.sample_id, what) for what in clip.problems]
            continue
        if result.error is not None:
            what = result.error.removeprefix(f"{clip.path}: ")
            problems.append(Problem(str(clip.path), clip.sample_id, what))
            continue
        rows.append(
            {
                "sample_id": clip.sample_id,
                "wav_path": str(clip.path),
                "system_id": clip.system_id,
                "test_set": name,
                "mos": clip.mos,
                "raw": result.scores[output],
            }
        )
    return rows, problems


def run_info(args: argparse.Namespace, clips: int, seconds: float) -> dict[str, Any]:
    """What a rerun needs: the arguments, package versions, clip count and scoring time."""
    arguments = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    return {
        "baseline": args.model,
        "arguments": arguments,
        "packages": package_versions(BASELINES[args.model].packages),
        "clips": clips,
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-baseline`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="sqa-baseline", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--model", choices=sorted(BASELINES), default="dnsmos", help="the baseline (default: %(default)s)"
    )
    parser.add_argument("--corpus", choices=CORPORA, default="synthetic")
    parser.add_argument("--root", type=Path, help="corpus folder (singmos_pro, singmos_vmc24; synthetic)")
    parser.add_argument("--manifest", type=Path, help="CSV manifest (--corpus csv)")
    parser.add_argument("--seed", type=int, default=0, help="synthetic corpus seed")
    parser.add_argument("--clips-per-system", type=int, default=14, help="synthetic corpus size")
    parser.add_argument(
        "--sample-rate-filter",
        type=int,
        help="keep only clips stored at this rate; 0 keeps all (resampled). Default: 16000 for "
        "singmos_pro, 0 otherwise, as the data configs",
    )
    outputs = sorted({name for model in BASELINES.values() for name in model.outputs})
    parser.add_argument(
        "--output",
        choices=outputs,
        help="the baseline's score used as `pred`: dnsmos ovrl (default), sig, bak or p808; distillmos mos",
    )
    parser.add_argument(
        "--run-dir", type=Path, help="where to write (default: outputs/<model>-<corpus>-<output>)"
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="start over in a run directory holding a previous run's outputs (only sqa's files are replaced)",
    )
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="unreadable clips: raise = report them all and write nothing; skip = score the rest",
    )
    parser.add_argument(
        "--score-range",
        type=float,
        nargs=2,
        metavar=("LOW", "HIGH"),
        help="the corpus's rating scale (csv, singmos_pro, singmos_vmc24; default 1 5)",
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="resamples of the 95 %% intervals (0: none)"
    )
    parser.add_argument(
        "--num-workers", type=int, default=0, help="decoding processes, 0: none (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    if args.num_workers < 0:
        print(f"sqa-baseline: --num-workers must be 0 or more, got {args.num_workers}", file=sys.stderr)
        return 2
    model = BASELINES[args.model]
    name = model.name
    args.output = args.output or model.outputs[0]
    if args.output not in model.outputs:
        print(
            f"sqa-baseline: --output {args.output}: {name} gives {', '.join(model.outputs)}", file=sys.stderr
        )
        return 2
    run_dir = args.run_dir or Path("outputs") / f"{args.model}-{args.corpus}-{args.output}"
    inputs = [path for path in (args.root, args.manifest) if path]
    try:
        # The lock and previous-run rule of train.py: a run directory is one run's.
        with claimed(run_dir, resume=False, overwrite=args.overwrite, inputs=inputs, options=OPTIONS):
            return score_corpus(args, model, run_dir)
    except RunDirError as err:
        print(f"sqa-baseline: {err}", file=sys.stderr)
        return 2


def score_corpus(args: argparse.Namespace, model: BaselineModel, run_dir: Path) -> int:
    """Score the test sets of the corpus `args` names with `model` and write the run into `run_dir`."""
    name = model.name
    try:
        corpus = read_corpus(args)
        test_sets = corpus.test_sets()
        scorer = model.scorer()
    except (CorpusError, ImportError) as err:
        print(f"sqa-baseline: {err}", file=sys.stderr)
        return 2
    if not test_sets:
        print("sqa-baseline: the corpus has no test clips", file=sys.stderr)
        return 2
    start = time.perf_counter()
    rows, problems = score_clips(scorer, test_sets, args.output, args.num_workers)
    seconds = time.perf_counter() - start
    if problems:
        print(format_report(problems), file=sys.stderr)
        if args.on_error == "raise" or not rows:
            return 1
    info = run_info(args, len(rows), seconds)
    info["score_range"] = list(corpus.score_range)
    line = None
    if tuple(corpus.score_range) != BASELINE_RANGE:
        train, _ = score_clips(scorer, {"train": corpus.split("train")}, args.output, args.num_workers)
        line, info["scale_map"] = scale_map(train)
        if line is None:
            print(
                f"sqa-baseline: no training clips to fit {name}'s scale map on: errors undefined",
                file=sys.stderr,
            )
    results = results_on_scale(rows, line, corpus.score_range, BASELINE_RANGE, args.bootstrap, seed=0)
    # Everything is scored: a previous run that --overwrite set aside goes only now.
    discard_previous(run_dir)
    artefacts.write_metrics(run_dir, results)
    artefacts.write_predictions(run_dir, rows)
    # Here, not at the top: without the baseline extra the command stops first, naming it.
    from sqa.reports import plots

    plots.write_test_plots(rows, results, run_dir / "plots", corpus.score_range)
    atomic_write_json(run_dir / "run_info.json", info)
    print(f"{name} {args.output.upper()} on {len(rows)} test clips ({seconds:.1f} s), written to {run_dir}:")
    print(tables.format_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
