"""Command line: every predictor of a config on every corpus of it, in one table (`sqa-bench`).

    sqa-bench CONFIG [--out DIR] [--overwrite] [--markdown] [--num-workers N] [--on-error raise|skip]

The config (`sqa.baselines.bench_config`) lists corpora and predictors: exports (scored as eval.py
scores them, `sqa.training.evaluation.tested`) and zero-shot baselines (scored as sqa-baseline
scores them, `sqa.baselines.cli.score_clips`). For each corpus the table has the constant
predictor's row, then one row per predictor, marked:

- `constant`: the mean of the corpus's own training labels for every test clip (the same row
  for every predictor, exports trained elsewhere included: the reference a model of this
  corpus has to beat, using no test label; n/a where the corpus has no training clips);
- `in-corpus` / `cross-corpus`: an export on the corpus it was trained on, or on another;
- `zero-shot`: Distill-MOS or DNSMOS.

An export is scored only on clips it was not trained on, a table without a split column split as
the exports' records split it, and a row marked in-corpus or cross-corpus by those records, not
by file names (`sqa.baselines.bench_training`); what cannot be told is refused before scoring.

A predictor whose scale differs from the corpus's (both baselines score on 1-5; an export on
its training corpus's scale) is mapped onto it exactly as sqa-baseline maps a baseline: by the
least-squares line fitted on the corpus's training clips; correlations are those of its own
scores, errors those of the mapped ones (undefined, with the reason, without training clips).
Metrics are `sqa.metrics.evaluate_sets` of every row's predictions, with bootstrap intervals
from the config's seed (the same resamples of a corpus's clips for every row).

Writes bench.json (every row's metric blocks per test set and averaged, its scale map, training
mean and notes), bench.csv (one line per row) and bench_predictions.csv (every clip of every
row) into `--out` (`sqa.baselines.bench_outputs`), claimed as a run directory is: a previous
bench's outputs are replaced only with `--overwrite`, and only files sqa wrote.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from sqa import metrics
from sqa.baselines.bench_config import (
    CONSTANT,
    BenchConfig,
    BenchConfigError,
    BenchPredictor,
    RecipeBounds,
    read_config,
)
from sqa.baselines.bench_outputs import Scored, write_outputs
from sqa.baselines.bench_training import (
    KIND_IN,
    BenchError,
    export_clips,
    export_kind,
    split_by_record,
    training,
)
from sqa.baselines.cli import BASELINES, results_on_scale, scale_map, score_clips
from sqa.baselines.corpora import BASELINE_RANGE, corpus_source, read_corpus
from sqa.core.extras import require
from sqa.core.run_folder import claimed, discard_previous
from sqa.core.run_lock import Options, RunDirError
from sqa.data.audio import AudioError
from sqa.data.corpus import ROLES, Corpus, CorpusError
from sqa.data.validate import CorpusProblems, Problem, format_report
from sqa.exports.bounds import MAX_ARCH_LIST, MAX_BOOTSTRAP, MAX_CONFIG_BYTES, MAX_INTEGER_DIGITS
from sqa.exports.errors import ExportError
from sqa.exports.format import load_export
from sqa.reports import learning, tables
from sqa.training.frame_cache import FrameStore

OPTIONS = Options("--out", None, "--overwrite")
KIND_CONSTANT, KIND_ZERO_SHOT = "constant", "zero-shot"
SKIP = " (--on-error skip scores the rest)"
# A recipe is held to the bounds of an export's config.yaml: its size, its integers' digits, its
# lists' entries (corpora, predictors) and the bootstrap's resamples.
RECIPE_BOUNDS = RecipeBounds(
    file_bytes=MAX_CONFIG_BYTES,
    integer_digits=MAX_INTEGER_DIGITS,
    entries=MAX_ARCH_LIST,
    bootstrap=MAX_BOOTSTRAP,
)


class UnreadableClips(BenchError):
    """Clips of a corpus could not be scored, and the command was not told to skip them."""


def tested_corpus(corpus: Corpus, test: str) -> Corpus:
    """`corpus` with the clips of split `test` as its test clips (`all`: every clip, none left to train)."""
    if test == "test":
        return corpus
    if test == "all":
        clips = [replace(c, split="test") for c in corpus.clips]
    else:
        clips = [
            replace(c, split="test") if c.split == test else c for c in corpus.clips if c.split != "test"
        ]
    return Corpus(clips, corpus.domains, corpus.score_range, corpus.systems)


def train_mean(corpus: Corpus) -> float | None:
    """The mean label of the corpus's training clips (the constant predictor), None without any."""
    labels = [c.mos for c in corpus.split("train") if not c.problems]
    return float(np.mean(labels)) if labels else None


def _row(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Prediction rows in the baselines' form: the predictor's own score as `raw`."""
    keys = ("sample_id", "wav_path", "system_id", "test_set", "mos")
    return [{**{k: r[k] for k in keys if k in r}, "raw": r["pred"]} for r in rows]


def _check(problems: list[Problem], what: str, on_error: str) -> None:
    """Report unreadable clips; stop (`raise`) unless `on_error` is `skip`."""
    if problems:
        print(format_report(problems), file=sys.stderr)
        if on_error == "raise":
            raise UnreadableClips(f"{what}: {len(problems)} clip(s) could not be scored{SKIP}")


def score_zero_shot(
    predictor: BenchPredictor, scorer: Any, corpus: Corpus, name: str, args: argparse.Namespace
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, tuple[float, float] | None]:
    """Test rows of a baseline on `corpus` and the line onto its scale (sqa-baseline's steps)."""
    rows, problems = score_clips(scorer, corpus.test_sets(), predictor.output, args.num_workers)
    _check(problems, f"{predictor.name} on {name}", args.on_error)
    if tuple(corpus.score_range) == BASELINE_RANGE:
        return rows, None, None
    train, _ = score_clips(scorer, {"train": corpus.split("train")}, predictor.output, args.num_workers)
    line, record = scale_map(train)
    return rows, record, line


def export_rows(
    export: Path, corpus: Corpus, args: argparse.Namespace, what: str, frames: FrameStore | None = None
) -> tuple[list[dict[str, Any]], tuple[float, float]]:
    """The test rows of `corpus` scored by the export at `export` as eval.py scores them, and its scale.

    Exports over the same frozen backbone (a pretrained network under several heads) read its
    frames of each clip from one cache of `frames`: one pass per clip for all of them.
    """
    # Here, not at the top: a bench of zero-shot predictors runs without the train extra.
    require("lightning", "train", "an export's rows in sqa-bench")
    from sqa.training.evaluation import DEFAULT_EVAL_BATCH_SIZE, tested

    predictor, config, f0_extractor = load_export(export)
    batch_size = int((config.get("data") or {}).get("eval_batch_size") or DEFAULT_EVAL_BATCH_SIZE)
    try:
        module = tested(
            predictor,
            corpus,
            config,
            f0_extractor,
            batch_size,
            num_workers=args.num_workers,
            on_error=args.on_error,
            frame_store=frames,
        )
    except CorpusProblems as err:
        print(format_report(err.problems), file=sys.stderr)
        raise UnreadableClips(f"{what}: {len(err.problems)} clip(s) could not be scored{SKIP}") from None
    low, high = predictor.score_range
    return _row(module.test_predictions), (float(low), float(high))


def score_export(
    predictor: BenchPredictor, corpus: Corpus, name: str, args: argparse.Namespace, frames: FrameStore
) -> tuple[list[dict[str, Any]], dict[str, Any] | None, tuple[float, float] | None, tuple[float, float]]:
    """Test rows of an export on `corpus`, the line onto its scale where the export's differs, its scale."""
    what = f"{predictor.name} on {name}"
    rows, own = export_rows(predictor.export, corpus, args, what, frames)
    if tuple(corpus.score_range) == own:
        return rows, None, None, own
    train = [replace(c, split="test") for c in corpus.split("train")]
    line, record = None, None
    if train:
        as_test = Corpus(train, corpus.domains, corpus.score_range, corpus.systems)
        scored = export_rows(predictor.export, as_test, args, f"{what} (training clips)", frames)
        line, record = scale_map(scored[0])
    return rows, record, line, own


def constant_row(corpus: Corpus, config: BenchConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The constant predictor's rows and results on the corpus's test clips (`learning.constant_results`)."""
    mean = train_mean(corpus)
    clips = [(name, c) for name, group in corpus.test_sets().items() for c in group if not c.problems]
    value = float("nan") if mean is None else mean
    rows = [
        {"sample_id": c.sample_id, "system_id": c.system_id, "test_set": name, "mos": c.mos, "raw": value}
        for name, c in clips
    ]
    for row in rows:
        row["pred"] = row["raw"]
    results = learning.constant_results(
        value,
        [r["mos"] for r in rows],
        [r["system_id"] for r in rows],
        [r["test_set"] for r in rows],
        bootstrap=config.bootstrap,
        seed=config.seed,
        apart=ROLES,
    )
    if mean is None:
        for block in results.values():
            block[metrics.UNDEFINED_KEY] = {
                level: {m: "the corpus has no training clips to take a mean of" for m in metrics.METRIC_NAMES}
                for level in metrics.LEVELS
            }
    return rows, results


def unread_corpus(config: BenchConfig, i: int, err: CorpusError) -> str:
    """Why corpus `i` could not be read: `err`, or, for a manifest outside the recipe's folder, only the rule.

    A recipe may come from anyone: a file it names outside its folder (`/etc/passwd`, `../x.csv`)
    is named, but nothing of it (the columns `err` lists, a cell) is quoted.
    """
    entry = config.corpora[i]
    manifest = entry.options.manifest if entry.options.corpus == "csv" else None
    folder = config.path.parent.resolve()
    if manifest is None or Path(manifest).resolve().is_relative_to(folder):
        return f"{config.path}: corpora[{i}] ({entry.name}): {err}"
    return (
        f"{config.path}: corpora[{i}].manifest: {manifest} is no manifest sqa-bench reads (a CSV table "
        f"with the columns wav_path, score and system_id); it lies outside the recipe's folder {folder}, "
        "so none of its content is shown: copy it beside the recipe to see what is wrong"
    )


@dataclass(frozen=True)
class Planned:
    """A corpus of the table as its rows score it: its clips and notes, and each export's.

    `exports` maps an export's name to its mark, the clips it is scored on and their notes.
    """

    corpus: Corpus
    notes: list[str]
    exports: dict[str, tuple[str, Corpus, list[str]]]


def planned(config: BenchConfig) -> dict[str, Planned]:
    """Every corpus of the table as each row scores it, checked whole before anything is scored."""
    read: dict[str, Corpus] = {}
    for i, entry in enumerate(config.corpora):
        try:
            read[entry.name] = read_corpus(entry.options)
        except CorpusError as err:
            raise BenchError(unread_corpus(config, i, err)) from None
    records = {p.name: training(p) for p in config.predictors if p.export is not None}
    plans: dict[str, Planned] = {}
    for i, entry in enumerate(config.corpora):
        kinds = {name: export_kind(read[entry.name], record) for name, record in records.items()}
        own = [record for name, record in records.items() if kinds[name] == KIND_IN]
        corpus, notes = split_by_record(read[entry.name], entry.name, own)
        corpus = tested_corpus(corpus, entry.test)
        if not corpus.test_sets():
            raise BenchError(
                f"{config.path}: corpora[{i}].test: corpus {entry.name} has no {entry.test} clips"
            )
        exports = {
            name: (kinds[name], *export_clips(record, corpus, entry.name)) for name, record in records.items()
        }
        plans[entry.name] = Planned(corpus, notes, exports)
    for i, predictor in enumerate(config.predictors):
        named = predictor.trained_on
        if named is not None and plans[named].exports[predictor.name][0] != KIND_IN:
            raise BenchError(
                f"{config.path}: predictors[{i}].trained_on: {named} is not the corpus {predictor.name} was "
                f"trained on: not every clip of it is one of {records[predictor.name].where} with the same "
                "label; leave trained_on out, the record marks the rows"
            )
    return plans


def bench(config: BenchConfig, args: argparse.Namespace) -> list[Scored]:
    """Every row of the table: each corpus's constant, then every predictor on it."""
    plans = planned(config)
    scorers = {p.name: BASELINES[p.zero_shot].scorer() for p in config.predictors if p.zero_shot}
    frames = FrameStore()
    out: list[Scored] = []
    for entry in config.corpora:
        plan = plans[entry.name]
        rows, results = constant_row(plan.corpus, config)
        out.append(
            {
                "corpus": entry.name,
                "predictor": CONSTANT,
                "kind": KIND_CONSTANT,
                "results": results,
                "rows": rows,
                "scale_map": None,
                "train_mean": train_mean(plan.corpus),
                "notes": plan.notes,
            }
        )
        for predictor in config.predictors:
            corpus, notes = plan.corpus, plan.notes
            if predictor.zero_shot:
                rows, record, line = score_zero_shot(
                    predictor, scorers[predictor.name], corpus, entry.name, args
                )
                kind, own = KIND_ZERO_SHOT, BASELINE_RANGE
            else:
                kind, corpus, left_out = plan.exports[predictor.name]
                notes = notes + left_out
                rows, record, line, own = score_export(predictor, corpus, entry.name, args, frames)
            if not rows:
                raise BenchError(f"{predictor.name} on {entry.name}: no clip could be scored")
            results = results_on_scale(rows, line, corpus.score_range, own, config.bootstrap, config.seed)
            out.append(
                {
                    "corpus": entry.name,
                    "predictor": predictor.name,
                    "kind": kind,
                    "results": results,
                    "rows": rows,
                    "scale_map": record,
                    "train_mean": None,
                    "notes": notes,
                }
            )
    return out


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-bench`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="sqa-bench", description=__doc__.split("\n")[0])
    parser.add_argument("config", type=Path, help="the YAML file of corpora and predictors")
    parser.add_argument("--out", type=Path, help="where to write (default: outputs/bench-<config name>)")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a previous bench's outputs in --out (only files sqa wrote there)",
    )
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--num-workers", type=int, default=0, help="decoding processes, 0: none")
    parser.add_argument(
        "--on-error",
        choices=("raise", "skip"),
        default="raise",
        help="unreadable clips: raise = report them and stop; skip = score the rest",
    )
    args = parser.parse_args(argv)
    if args.num_workers < 0:
        print(f"sqa-bench: --num-workers must be 0 or more, got {args.num_workers}", file=sys.stderr)
        return 2
    try:
        config = read_config(args.config, RECIPE_BOUNDS)
    except BenchConfigError as err:
        print(f"sqa-bench: {err}", file=sys.stderr)
        return 2
    out = args.out or Path("outputs") / f"bench-{args.config.stem}"
    inputs = [config.path]
    inputs += [corpus_source(c.options) for c in config.corpora if corpus_source(c.options) is not None]
    inputs += [p.export for p in config.predictors if p.export is not None]
    start = time.perf_counter()
    try:
        with claimed(out, resume=False, overwrite=args.overwrite, inputs=inputs, options=OPTIONS):
            scored = bench(config, args)
            # Everything is scored: a previous bench that --overwrite set aside goes only now.
            discard_previous(out)
            seconds = time.perf_counter() - start
            write_outputs(
                out,
                config,
                scored,
                seconds,
                inputs=inputs,
                overwrite=args.overwrite,
                setting=OPTIONS.overwrite,
            )
    except (
        BenchError,
        RunDirError,
        CorpusError,
        AudioError,
        ExportError,
        ImportError,
        FileExistsError,
    ) as err:
        print(f"sqa-bench: {err}", file=sys.stderr)
        return 1 if isinstance(err, UnreadableClips) else 2
    counts = f"{len(config.predictors)} predictor(s) on {len(config.corpora)} corpora"
    print(f"sqa-bench: {counts}, written to {out}:")
    print(tables.bench_table(scored, markdown_table=args.markdown))
    # What the table's clips are where they are not the corpora's test splits as read.
    for note in dict.fromkeys(note for row in scored for note in row["notes"]):
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
