"""sqa-bench's outputs: bench.json, bench.csv, bench_predictions.csv and run_info.json.

Every row of the table (`Scored`: its corpus, predictor, kind, results, per-clip rows, scale map,
training mean and notes) is written whole into the folder the command claimed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sqa import metrics
from sqa.baselines.bench_config import BenchConfig
from sqa.baselines.corpora import corpus_source
from sqa.core import artefacts
from sqa.core.atomic import json_text, write_output
from sqa.core.provenance import package_versions
from sqa.reports import tables

# What bench.json keeps of each row (its per-clip rows go to bench_predictions.csv).
RECORD_KEYS = ("corpus", "predictor", "kind", "train_mean", "scale_map", "notes", "results")
PREDICTION_COLUMNS = ("predictor", "corpus", "sample_id", "system_id", "test_set", "mos", "raw", "pred")
PACKAGES = ("torch", "numpy", "scipy", "lightning", "distillmos", "speechmos", "onnxruntime")


# One row of the table: corpus, predictor, kind, results, rows (per clip), scale_map, train_mean and
# notes (where its clips are not the corpus's test split as read: clips an export was trained on
# left out, a table without splits split as its exports' records split it).
Scored = dict[str, Any]


def csv_rows(scored: list[Scored]) -> tuple[list[str], list[dict[str, Any]]]:
    """bench.csv: columns and one line per row, every metric of the average with its interval, then notes."""
    columns = ["corpus", "predictor", "kind", "clips", "systems"]
    for level in metrics.LEVELS:
        for name in metrics.METRIC_NAMES:
            columns += [f"{level}_{name}", f"{level}_{name}_lo", f"{level}_{name}_hi"]
    columns += ["undefined", "notes"]
    lines = []
    for row in scored:
        average = row["results"][metrics.AVERAGE_KEY]
        line: dict[str, Any] = {k: row[k] for k in ("corpus", "predictor", "kind")}
        line.update(clips=average["utt"]["n"], systems=average["sys"]["n"])
        for level in metrics.LEVELS:
            for name in metrics.METRIC_NAMES:
                ci = (average.get(metrics.CI_KEY) or {}).get(level, {}).get(name) or [float("nan")] * 2
                value = float(average[level][name])
                line.update(
                    {f"{level}_{name}": value, f"{level}_{name}_lo": ci[0], f"{level}_{name}_hi": ci[1]}
                )
        reasons = tables.bench_reasons(row["results"], metrics.METRIC_NAMES)
        line["undefined"] = "; ".join(
            f"{level} {', '.join(names)}: {reason}"
            for level, by in reasons.items()
            for reason, names in by.items()
        )
        line["notes"] = "; ".join(row["notes"])
        lines.append(line)
    return columns, lines


def write_outputs(
    out: Path,
    config: BenchConfig,
    scored: list[Scored],
    seconds: float,
    *,
    inputs: Sequence[str | Path] = (),
    overwrite: bool = False,
    setting: str = "--overwrite",
) -> None:
    """bench.json, bench.csv, bench_predictions.csv and run_info.json into the claimed `out`.

    Each through `write_output`: never over one of the bench's `inputs`. The claim has refused
    a previous bench's outputs without `overwrite` (`setting` on the command line) and set them
    aside with it, so they are new files, created exclusively; run_info.json, which a failed
    bench leaves and the claim has found to be sqa's, is replaced.
    """
    record = {
        "config": str(config.path.resolve()),
        "bootstrap": config.bootstrap,
        "seed": config.seed,
        "rows": [{k: row[k] for k in RECORD_KEYS} for row in scored],
    }

    def put(name: str, text: str, replace: bool = overwrite) -> None:
        write_output(out / name, text, overwrite=replace, inputs=inputs, setting=setting)

    put("bench.json", json_text(record))
    columns, lines = csv_rows(scored)
    put("bench.csv", artefacts.csv_text(columns, lines))
    predictions = [
        {"predictor": row["predictor"], "corpus": row["corpus"], **clip}
        for row in scored
        for clip in row["rows"]
    ]
    put("bench_predictions.csv", artefacts.csv_text(PREDICTION_COLUMNS, predictions))
    info = {
        "command": "sqa-bench",
        "config": str(config.path.resolve()),
        "corpora": {
            c.name: {
                "corpus": c.options.corpus,
                "source": None if corpus_source(c.options) is None else str(corpus_source(c.options)),
                "test": c.test,
            }
            for c in config.corpora
        },
        "packages": package_versions(PACKAGES),
        "seconds": seconds,
    }
    put("run_info.json", json_text(info), replace=True)
