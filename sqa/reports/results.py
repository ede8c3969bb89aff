"""Results tables: read run directories and print the paper's layout with mean ± std over seeds.

    sqa-table --cell "SSL=runs/t3/ssl/*" --cell "SSL+MIDI=runs/t3/midi/*" [--markdown]
              [--csv out.csv [--overwrite]]
    sqa-table --paper --cell "SSL=runs/t3/ssl/*" [--paper-rows recipes/singmos_pro/paper_rows.json:table3]

Each cell is a label and a glob of run directories (one per seed) holding `metrics.json`. Rows
are cells; columns are utterance- and system-level RMSE, LCC and SRCC, each as `R1/R2|R3|Avg`
over the test sets the header names (no Avg where there is one set: `tables.table_keys`); every
cell must have the same test sets. The table prints for a terminal, `--markdown` as markdown.
A value undefined in some runs (null in metrics.json) is summarised over the others and marked
`(n=k)`, as is a value of a single run (no ±); `n/a` where no run defines it. `--paper-rows`
prints the paper's published rows first and, under each cell labelled like one of them, the
difference run − paper. A cell whose runs were tested on different clips (carved with different
split seeds, or by versions that carved with each run's seed) or holds a run whose learning
check failed (run_info.json) gets a mark after its run count and a note below the table naming
the runs. `--csv` writes the table atomically, never over a file the table reads and over an
existing file only with `--overwrite`; a text cell a spreadsheet would run as a formula is quoted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from sqa.core import artefacts
from sqa.core.atomic import write_output
from sqa.metrics import defined
from sqa.reports.tables import markdown, paper_layout, plain_table, set_label, spread_text, table_keys

COLUMNS = [(level, name) for level in ("utt", "sys") for name in ("rmse", "lcc", "srcc")]
# The SingMOS-Pro paper's Tables 2 and 3.
PAPER_COLUMNS = [(level, name) for level in ("utt", "sys") for name in ("mse", "lcc", "srcc")]


def load_runs(pattern: str) -> list[dict]:
    """metrics.json of every run directory matching `pattern` (sorted); all must have the same test sets."""
    return _same_sets(artefacts.runs_with_metrics(pattern))


def _same_sets(run_dirs: list[Path]) -> list[dict]:
    """The metrics of `run_dirs`; ValueError naming a file whose test sets differ from the first's."""
    runs = [artefacts.read_metrics(run_dir) for run_dir in run_dirs]
    for run, run_dir in zip(runs[1:], run_dirs[1:], strict=True):
        if list(run) != list(runs[0]):
            raise ValueError(
                f"{artefacts.metrics_file(run_dir)}: test sets {list(run)} differ from {list(runs[0])} "
                f"in {artefacts.metrics_file(run_dirs[0])}"
            )
    return runs


# What the table reads in each run directory (`--csv` never writes over one of them).
TABLE_INPUTS = (artefacts.METRICS_FILE, artefacts.PREDICTIONS_FILE, "run_info.json")

# The marks of `cell_notes`, after a cell's run count.
DIFFERENT_CLIPS, NO_BETTER = "*", "!"


def test_clips(run_dir: Path) -> frozenset[tuple[str, str]] | None:
    """The (test_set, sample_id) pairs of a run's predictions.csv; None without one (nothing to compare)."""
    if not (run_dir / artefacts.PREDICTIONS_FILE).is_file():
        return None
    return frozenset((row["test_set"], row["sample_id"]) for row in artefacts.read_predictions(run_dir))


def learned_nothing(run_dir: Path) -> bool:
    """Whether the run's learning check (run_info.json) found it no better than the constant predictor."""
    try:
        info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    check = info.get("learning_check") if isinstance(info, dict) else None
    return isinstance(check, dict) and check.get("verdict") == "no_better"


def cell_notes(label: str, run_dirs: list[Path]) -> tuple[str, list[str]]:
    """The marks (`DIFFERENT_CLIPS`, `NO_BETTER`) of a cell's runs and a note for each, naming them."""
    marks, notes = "", []
    clips = [(d, test_clips(d)) for d in run_dirs]
    known = [(d, c) for d, c in clips if c is not None]
    differ = [d for d, c in known[1:] if c != known[0][1]]
    if differ:
        marks += DIFFERENT_CLIPS
        notes.append(
            f"{DIFFERENT_CLIPS} {label}: {', '.join(map(str, differ))} tested on other clips than "
            f"{known[0][0]} (each run carved its own test split): the ± mixes seeds with test sets; "
            f"pin one split: data.test_split_csv={known[0][0] / 'test_split.csv'}"
        )
    failed = [d for d in run_dirs if learned_nothing(d)]
    if failed:
        marks += NO_BETTER
        notes.append(
            f"{NO_BETTER} {label}: {', '.join(map(str, failed))} predicted no better than the constant "
            "training mean (run_info.json learning_check); its numbers are in the mean"
        )
    return marks, notes


def summarise(runs: list[dict]) -> dict[tuple[str, str], list[tuple[float, float, int]]]:
    """Per column: (mean, std, count) over the runs defining the value, per test set, then `avg` if shown.

    (nan, nan, 0) where no run defines it; the std is NaN for a single value.
    """
    sets = table_keys(runs[0])
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
    return paper_layout([spread_text(mean, std, count, runs) for mean, std, count in stats])


def table_header(columns: list[tuple[str, str]], keys: list[str]) -> list[str]:
    """Setting, runs, then one `LEVEL METRIC set1/set2|set3|Avg` per column: the header names the sets."""
    sets = paper_layout([set_label(k) for k in keys])
    return ["setting", "runs"] + [f"{level.upper()} {name.upper()} {sets}" for level, name in columns]


def shared_keys(keys_by_label: list[tuple[str, list[str]]]) -> list[str]:
    """The table keys every cell has; ValueError naming a cell whose test sets differ from the first's."""
    (first, keys), *others = keys_by_label
    for label, other in others:
        if other != keys:
            raise ValueError(
                f"cell {label!r} has test sets {other}, cell {first!r} {keys}: a column must mean the "
                "same sets in every row; make a table per corpus"
            )
    return keys


def build_table(cells: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows (label, number of runs, one `R1/R2|R3|Avg` string per column)."""
    rows, keys = [], []
    for label, pattern in cells:
        runs = load_runs(pattern)
        if not runs:
            raise FileNotFoundError(f"no run directory with metrics.json matches {pattern!r} ({label})")
        stats = summarise(runs)
        rows.append([label, str(len(runs))] + [paper_cell(stats[c], len(runs)) for c in COLUMNS])
        keys.append((label, table_keys(runs[0])))
    return table_header(COLUMNS, shared_keys(keys)), rows


def paper_layout_cell(values: list[float | None]) -> str:
    """The paper's `R1/R2|R3|Avg` with 2 decimals; a missing value prints as "?"."""
    return paper_layout(["?" if v is None else f"{v:.2f}" for v in values])


def paper_means(runs: list[dict], level: str, name: str) -> list[float | None]:
    """Mean over the runs defining `level`.`name` in each set of `table_keys` (None: no run does)."""
    sets = table_keys(runs[0])
    means = []
    for s in sets:
        values = [run[s][level].get(name) for run in runs]
        values = [v for v in values if v is not None and not math.isnan(v)]
        means.append(sum(values) / len(values) if values else None)
    return means


def paper_values(
    cells: list[tuple[str, str]],
) -> tuple[list[tuple[str, int, list[list[float | None]]]], list[str]]:
    """Per cell (label, runs, per paper column the means over seeds `[t1, t2, t3, avg]`), and the keys."""
    out, keys = [], []
    for label, pattern in cells:
        run_dirs = artefacts.runs_with_metrics(pattern)
        if not run_dirs:
            raise FileNotFoundError(f"no run directory with metrics.json matches {pattern!r} ({label})")
        runs = _same_sets(run_dirs)
        for run, run_dir in zip(runs, run_dirs, strict=True):
            if any("mse" not in block.get(level, {}) for block in run.values() for level in ("utt", "sys")):
                raise ValueError(
                    f"{artefacts.metrics_file(run_dir)} has no 'mse' (written before sqa recorded "
                    "it); re-evaluate the run to print the paper's layout"
                )
        out.append((label, len(runs), [paper_means(runs, *c) for c in PAPER_COLUMNS]))
        keys.append((label, table_keys(runs[0])))
    return out, shared_keys(keys)


def build_paper_table(cells: list[tuple[str, str]]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the SingMOS-Pro paper's layout (`--paper`), means over seeds.

    Columns are utterance and system MSE, LCC and SRCC (the paper's "RMSE" column is an MSE),
    each `R1/R2|R3|Avg` with 2 decimals.
    """
    values, keys = paper_values(cells)
    rows = [[label, str(runs)] + [paper_layout_cell(c) for c in columns] for label, runs, columns in values]
    return table_header(PAPER_COLUMNS, keys), rows


def difference_cell(run: list[float | None], paper: list[float | None]) -> str:
    """`R1/R2|R3|Avg` of run − paper with a sign and 2 decimals; "?" where either is missing."""
    return paper_layout(
        ["?" if r is None or p is None else f"{r - p:+.2f}" for r, p in zip(run, paper, strict=True)]
    )


def paper_comparison(cells: list[tuple[str, str]], spec: str) -> tuple[list[str], list[list[str]], str]:
    """The paper's rows of `spec` (FILE:TABLE), then each run's row followed by run − paper.

    A run's cell is compared with the paper's row of the same setting (its label, e.g. "SSL");
    a label the paper has no row for gets no difference row.
    """
    published, source = read_paper_rows(spec)
    by_setting = {setting: columns for setting, columns in published}
    rows = [
        [f"paper: {setting}", "-"] + [paper_layout_cell(c) for c in columns] for setting, columns in published
    ]
    values, keys = paper_values(cells)
    for label, runs, columns in values:
        rows.append([label, str(runs)] + [paper_layout_cell(column) for column in columns])
        if label in by_setting:
            diffs = [difference_cell(r, p) for r, p in zip(columns, by_setting[label], strict=True)]
            rows.append([f"{label} − paper", "-"] + diffs)
    return table_header(PAPER_COLUMNS, keys), rows, source


def read_paper_rows(spec: str) -> tuple[list[tuple[str, list[list[float | None]]]], str]:
    """Published rows `FILE:TABLE`: (setting, per paper column `[t1, t2, t3, avg]`), and the source note.

    FILE is JSON: {"source": str, "<table>": [{"setting": str, "utt": {"mse": [t1, t2, t3, avg],
    "lcc": [...], "srcc": [...]}, "sys": {...}}, ...]}; a value not filled in is null.
    """
    path, sep, table = spec.rpartition(":")
    if not sep:
        raise ValueError(f"--paper-rows needs FILE:TABLE, got {spec!r}")
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: cannot read paper rows ({err})") from err
    if not isinstance(data, dict) or not isinstance(data.get(table), list):
        raise ValueError(f"{path}: no list of rows under {table!r}")
    rows = []
    for i, row in enumerate(data[table]):
        where = f"{path}: {table}[{i}]"
        columns = []
        for level, name in PAPER_COLUMNS:
            values = row.get(level, {}).get(name) if isinstance(row, dict) else None
            if not (isinstance(values, list) and len(values) == 4):
                raise ValueError(f"{where}: {level}.{name} must be a list [test1, test2, test3, avg]")
            if not all(v is None or (isinstance(v, int | float) and not isinstance(v, bool)) for v in values):
                raise ValueError(f"{where}: {level}.{name} holds something other than numbers or null")
            columns.append(values)
        rows.append((str(row.get("setting", "?")), columns))
    return rows, str(data.get("source", ""))


def main(argv: list[str] | None = None) -> int:
    """Entry point of `sqa-table`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="sqa-table", description=__doc__.split("\n")[0])
    parser.add_argument("--cell", action="append", required=True, help="LABEL=GLOB of run directories")
    parser.add_argument("--csv", help="also write the table as CSV to this file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --csv file")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument(
        "--paper", action="store_true", help="the paper's layout: utt/sys MSE, LCC, SRCC, 2 decimals"
    )
    parser.add_argument(
        "--paper-rows",
        metavar="FILE:TABLE",
        help="with --paper: the paper's own rows of TABLE from FILE above the runs', and each run − paper",
    )
    args = parser.parse_args(argv)
    if args.paper_rows and not args.paper:
        parser.error("--paper-rows needs --paper")
    cells = []
    for item in args.cell:
        label, sep, pattern = item.partition("=")
        if not sep:
            parser.error(f"--cell needs LABEL=GLOB, got {item!r}")
        cells.append((label, pattern))
    try:
        source = ""
        if args.paper_rows:
            header, rows, source = paper_comparison(cells, args.paper_rows)
        else:
            header, rows = build_paper_table(cells) if args.paper else build_table(cells)
    except (FileNotFoundError, ValueError) as err:
        print(f"sqa-table: {err}", file=sys.stderr)
        return 1
    notes: list[str] = []
    # Every file the table reads: `--csv` never writes over one of them.
    read: list[str | Path] = [args.paper_rows.rpartition(":")[0]] if args.paper_rows else []
    for label, pattern in cells:
        run_dirs = artefacts.runs_with_metrics(pattern)
        read += [d / name for d in run_dirs for name in TABLE_INPUTS]
        marks, cell_lines = cell_notes(label, run_dirs)
        notes += cell_lines
        for row in rows:
            if marks and row[0] == label:
                row[1] += marks
    if args.csv:
        # Written before the table prints, so that a refused --csv leaves stdout empty.
        text = artefacts.csv_text(header, [dict(zip(header, row, strict=True)) for row in rows])
        try:
            write_output(args.csv, text, overwrite=args.overwrite, inputs=read, setting="--overwrite")
        except OSError as err:
            print(f"sqa-table: --csv {err}", file=sys.stderr)
            return 1
    print((markdown if args.markdown else plain_table)(header, rows))
    if notes:
        print("\n" + "\n".join(notes))
    if source:
        print(f"\nPaper rows: {source}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
