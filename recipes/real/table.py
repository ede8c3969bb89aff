"""The candidates table of docs/results.md: every candidate's test SRCC and RMSE per run, and the winner's.

    python recipes/real/table.py runs/real/ward2018-quality/seed*  runs/real/sisec18/seed*

Reads each run directory's run_info.json (`candidates`, `learning_check`) and prints one Markdown
row per run: each candidate's test utterance SRCC and RMSE, which one validation chose, that
one's SRCC, and the constant (training-mean) predictor's test RMSE. The last rows average each
column over the runs of a corpus (the corpus is the run directory's parent folder).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def run_row(run_dir: Path) -> dict[str, Any]:
    """One run's candidates: {name: (utt srcc, utt rmse)}, the winner and the constant's test RMSE."""
    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    record = info.get("candidates")
    if not record:
        raise ValueError(f"{run_dir}: run_info.json records no candidates (a run that trained one model)")
    tests = {e["name"]: (e["test"]["utt"]["srcc"], e["test"]["utt"]["rmse"]) for e in record["entries"]}
    check = info.get("learning_check") or {}
    return {
        "corpus": run_dir.parent.name,
        "run": run_dir.name,
        "tests": tests,
        "winner": record["winner"],
        "constant": (check.get("test") or {}).get("constant_rmse"),
    }


def _cell(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def table(rows: Sequence[dict[str, Any]]) -> str:
    """The Markdown table: a column per single candidate (ensembles under `ensemble`), per-corpus means."""
    names = list(dict.fromkeys(n for r in rows for n in r["tests"] if not n.startswith("ensemble")))
    head = [
        "corpus",
        "run",
        *(f"{n} SRCC / RMSE" for n in names),
        "ensemble SRCC",
        "chosen",
        "chosen SRCC",
        "constant RMSE",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def ensemble(r: dict[str, Any]) -> float | None:
        found = [v[0] for n, v in r["tests"].items() if n.startswith("ensemble")]
        return found[0] if found else None

    for r in rows:
        cells = [
            f"{_cell(r['tests'][n][0])} / {_cell(r['tests'][n][1])}" if n in r["tests"] else "" for n in names
        ]
        lines.append(
            f"| {r['corpus']} | {r['run']} | {' | '.join(cells)} | {_cell(ensemble(r))} | {r['winner']} |"
            f" {_cell(r['tests'][r['winner']][0])} | {_cell(r['constant'])} |"
        )
    for corpus in dict.fromkeys(r["corpus"] for r in rows):
        group = [r for r in rows if r["corpus"] == corpus]

        def mean(values: list[float | None]) -> float | None:
            known = [v for v in values if v is not None and math.isfinite(v)]
            return statistics.mean(known) if len(known) == len(values) and known else None

        cells = [
            f"{_cell(mean([r['tests'].get(n, (None, None))[0] for r in group]))} /"
            f" {_cell(mean([r['tests'].get(n, (None, None))[1] for r in group]))}"
            for n in names
        ]
        chosen = mean([r["tests"][r["winner"]][0] for r in group])
        joined = mean([ensemble(r) for r in group])
        lines.append(
            f"| {corpus} | mean of {len(group)} | {' | '.join(cells)} | {_cell(joined)} |"
            f" | {_cell(chosen)} | {_cell(mean([r['constant'] for r in group]))} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print the table of the run directories given."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    args = parser.parse_args(argv)
    try:
        rows = [run_row(r) for r in args.runs]
    except (OSError, ValueError, KeyError) as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
