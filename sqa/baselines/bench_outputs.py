"""sqa-bench's outputs: bench.json, bench.csv, bench_predictions.csv and run_info.json.

Every row of the table (`Scored`: its corpus, predictor, kind, results, per-clip rows, scale map
and training mean) is written whole into the folder the command claimed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqa import metrics
from sqa.baselines.bench_config import BenchConfig
from sqa.baselines.corpora import corpus_source
from sqa.core import artefacts
from sqa.core.atomic import atomic_write_json, atomic_write_text
from sqa.core.provenance import package_versions
from sqa.reports import tables

PREDICTION_COLUMNS = ("predictor", "corpus", "sample_id", "system_id", "test_set", "mos", "raw", "pred")
PACKAGES = ("torch", "numpy", "scipy", "lightning", "distillmos", "speechmos", "onnxruntime")


# One row of the table: corpus, predictor, kind, results, rows (per clip), scale_map, train_mean.
Scored = dict[str, Any]


def csv_rows(scored: list[Scored]) -> tuple[list[str], list[dict[str, Any]]]:
    """bench.csv: columns and one line per row, every metric of the average with its interval."""
    columns = ["corpus", "predictor", "kind", "clips", "systems"]
    for level in metrics.LEVELS:
        for name in metrics.METRIC_NAMES:
            columns += [f"{level}_{name}", f"{level}_{name}_lo", f"{level}_{name}_hi"]
    columns.append("undefined")
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
        lines.append(line)
    return columns, lines


def write_outputs(out: Path, config: BenchConfig, scored: list[Scored], seconds: float) -> None:
    """bench.json, bench.csv, bench_predictions.csv and run_info.json into the claimed `out`."""
    record = {
        "config": str(config.path.resolve()),
        "bootstrap": config.bootstrap,
        "seed": config.seed,
        "rows": [
            {k: row[k] for k in ("corpus", "predictor", "kind", "train_mean", "scale_map", "results")}
            for row in scored
        ],
    }
    atomic_write_json(out / "bench.json", record)
    columns, lines = csv_rows(scored)
    atomic_write_text(out / "bench.csv", artefacts.csv_text(columns, lines))
    predictions = [
        {"predictor": row["predictor"], "corpus": row["corpus"], **clip}
        for row in scored
        for clip in row["rows"]
    ]
    atomic_write_text(out / "bench_predictions.csv", artefacts.csv_text(PREDICTION_COLUMNS, predictions))
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
    atomic_write_json(out / "run_info.json", info)
