"""Results tables: read run directories and print the paper's layout with mean ± std over seeds.

    sqa-table --cell "SSL=runs/t3/ssl/*" --cell "SSL+MIDI=runs/t3/midi/*" [--csv out.csv]

Each cell is a label and a glob of run directories (one per seed) holding `metrics.json`. Rows
are cells; columns are utterance- and system-level RMSE, LCC and SRCC, each as `R1/R2|R3|Avg`.
A value undefined in some runs (null in metrics.json) is summarised over the others and marked
`(n=k)`, as is a value of a single run (no ±); `n/a` where no run defines it.
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import math
import sys
from pathlib import Path

import numpy as np

from sqa.metrics import AVERAGE_KEY, defined

COLUMNS = [(level, name) for level in ("utt", "sys") for name in ("rmse", "lcc", "srcc")]


def load_runs(pattern: str) -> list[dict]:
    """metrics.json of every run directory matching `pattern` (sorted)."""
    runs = []
    for directory in sorted(glob.glob(pattern)):
        path = Path(directory) / "metrics.json"
        if path.is_file():
            runs.append(json.loads(path.read_text()))
    return runs


def summarise(runs: list[dict]) -> dict[tuple[str, str], list[tuple[float, float, int]]]:
    """Per column: (mean, std, count) over the runs defining the value, per test set, then `avg`.

    (nan, nan, 0) where no run defines it; the std is NaN for a single value.
    """
    sets = [k for k in runs[0] if k != AVERAGE_KEY] + [AVERAGE_KEY]
    out = {}
    for level, name in COLUMNS:
        column = []
        for s in sets:
            values = np.array([run[s][level][name] for run in runs if defined(run[s][level].get(name))])
            std = values.std(ddof=1) if values.size > 1 else math.nan
            column.append((values.mean() if values.size else math.nan, std, int(values.size)))
        out[(level, name)] = column
    return out


def paper_cell(stats: list[tuple[float, float, int]], runs: int) -> str:
    """`R1/R2|R3|Avg` with mean±std in each place; `(n=k)` where fewer than `runs` (or one) define it."""
    parts = []
    for mean, std, count in stats:
        if count == 0:
            parts.append("n/a")
            continue
        # One value has no spread: say so rather than print ±0.000.
        text = f"{mean:.3f}" + (f"±{std:.3f}" if count > 1 else "")
        parts.append(text + (f" (n={count})" if count < runs or count == 1 else ""))
    return "/".join(parts[:-2]) + "|" + parts[-2] + "|" + parts[-1]


def build_table(cells: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows (label, number of runs, one `R1/R2|R3|Avg` string per column)."""
    header = ["setting", "runs"] + [f"{level.upper()} {name.upper()}" for level, name in COLUMNS]
    rows = []
    for label, pattern in cells:
        runs = load_runs(pattern)
        if not runs:
            raise FileNotFoundError(f"no run directory with metrics.json matches {pattern!r} ({label})")
        stats = summarise(runs)
        rows.append([label, str(len(runs))] + [paper_cell(stats[c], len(runs)) for c in COLUMNS])
    return header, rows


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table; the `|` inside `R1/R2|R3|Avg` cells is escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-table`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="sqa-table", description=__doc__.split("\n")[0])
    parser.add_argument("--cell", action="append", required=True, help="LABEL=GLOB of run directories")
    parser.add_argument("--csv", help="also write the table as CSV to this file")
    args = parser.parse_args(argv)
    cells = []
    for item in args.cell:
        label, sep, pattern = item.partition("=")
        if not sep:
            parser.error(f"--cell needs LABEL=GLOB, got {item!r}")
        cells.append((label, pattern))
    try:
        header, rows = build_table(cells)
    except FileNotFoundError as err:
        print(f"sqa-table: {err}", file=sys.stderr)
        return 1
    print(markdown(header, rows))
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
