"""The candidates table of docs/results.md: every candidate's test SRCC and RMSE per run, and the winner's.

    python recipes/real/table.py runs/real/ward2018-quality/seed*  runs/real/sisec18/seed*
    python recipes/real/table.py old/*/* --other new/*/* --other-name cross-validation

Reads each run directory's run_info.json (`candidates`, `learning_check`) and prints one Markdown
row per run: each candidate's test utterance SRCC and RMSE, which one the run chose, that
one's SRCC, and the constant (training-mean) predictor's test RMSE. The last rows average each
column over the runs of a corpus (the corpus is the run directory's parent folder). `--other`
runs (the same corpora and run names, chosen another way) add what each of them chose and its
test SRCC, beside the run's own choice.
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


def table(
    rows: Sequence[dict[str, Any]], other: Sequence[dict[str, Any]] = (), other_name: str = "other"
) -> str:
    """The Markdown table: a column per single candidate (ensembles under `ensemble`), per-corpus means.

    `other` are the rows of runs chosen another way, matched by corpus and run: their choice and
    its SRCC join each row. A run without its match is a ValueError naming it.
    """
    names = list(dict.fromkeys(n for r in rows for n in r["tests"] if not n.startswith("ensemble")))
    by_run = {(o["corpus"], o["run"]): o for o in other}
    if other:
        missing = [f"{r['corpus']}/{r['run']}" for r in rows if (r["corpus"], r["run"]) not in by_run]
        if missing:
            raise ValueError(f"--other has no run {missing[0]} (runs are matched by corpus and run name)")
    head = [
        "corpus",
        "run",
        *(f"{n} SRCC / RMSE" for n in names),
        "ensemble SRCC",
        "chosen",
        "chosen SRCC",
        *((f"{other_name} chose", f"{other_name} SRCC") if other else ()),
        "constant RMSE",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def ensemble(r: dict[str, Any]) -> float | None:
        found = [v[0] for n, v in r["tests"].items() if n.startswith("ensemble")]
        return found[0] if found else None

    def chose(r: dict[str, Any]) -> float | None:
        """What the run of another choice chose: its winner's test SRCC."""
        o = by_run[(r["corpus"], r["run"])]
        return o["tests"][o["winner"]][0]

    for r in rows:
        cells = [
            f"{_cell(r['tests'][n][0])} / {_cell(r['tests'][n][1])}" if n in r["tests"] else "" for n in names
        ]
        theirs = f" {by_run[(r['corpus'], r['run'])]['winner']} | {_cell(chose(r))} |" if other else ""
        lines.append(
            f"| {r['corpus']} | {r['run']} | {' | '.join(cells)} | {_cell(ensemble(r))} | {r['winner']} |"
            f" {_cell(r['tests'][r['winner']][0])} |{theirs} {_cell(r['constant'])} |"
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
        theirs = f" | {_cell(mean([chose(r) for r in group]))} |" if other else ""
        lines.append(
            f"| {corpus} | mean of {len(group)} | {' | '.join(cells)} | {_cell(joined)} |"
            f" | {_cell(chosen)} |{theirs} {_cell(mean([r['constant'] for r in group]))} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: print the table of the run directories given."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument(
        "--other", nargs="+", type=Path, default=[], help="runs of the same corpora chosen another way"
    )
    parser.add_argument("--other-name", default="other", help="what the other runs' columns are called")
    args = parser.parse_args(argv)
    try:
        rows = [run_row(r) for r in args.runs]
        text = table(rows, [run_row(r) for r in args.other], args.other_name)
    except (OSError, ValueError, KeyError) as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
