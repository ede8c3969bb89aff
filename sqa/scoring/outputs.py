"""What `sqa-score` writes: one row per clip (and per system, ranked), as CSV or JSON, checked first."""

from __future__ import annotations

import csv
import io
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqa.core import ownership
from sqa.core.artefacts import spreadsheet_safe
from sqa.core.atomic import atomic_write_text, json_text, output_refusal
from sqa.core.spread import INTERVAL_LEVELS, interval
from sqa.scoring.inputs import SYSTEM_COLUMNS, Inputs

if TYPE_CHECKING:
    from sqa.scoring.results import ScoreResult
    from sqa.scoring.systems import Ranking

OUTPUT_SUFFIXES = (".csv", ".json")
# After `score`, for an export with a spread: that of a listener's rating and its 90 % interval.
SPREAD_COLUMNS = ("spread", "lo90", "hi90")
# After a system's means under `--by-system`: its comparison with the system ranked below it.
NEXT_COLUMNS = ("next_diff", "next_lo", "next_hi", "next_p", "next_significant", "next_pairing")


def check_output(output: Path, overwrite: bool, inputs: Sequence[str]) -> str | None:
    """Why `output` must not be written (None if it may): wrong suffix, no folder, an input, exists."""
    if output.suffix.lower() not in OUTPUT_SUFFIXES:
        return f"{output}: the output must end in .csv or .json"
    if not output.parent.is_dir():
        return f"{output}: the folder {output.parent} does not exist"
    refusal = output_refusal(output, overwrite=overwrite, inputs=inputs, setting="--overwrite")
    if refusal is not None:
        return refusal
    try:
        # Creating a file is the only faithful test (permissions, ACLs, read-only mounts, root).
        with tempfile.TemporaryFile(dir=output.parent):
            pass
    except OSError as err:
        return f"{output}: the folder {output.parent} is not writable ({err.strerror})"
    return None


def systems_output(output: Path) -> Path:
    """Where `--by-system` writes its ranking of systems: scores.csv -> scores.systems.csv."""
    return output.with_name(f"{output.stem}.systems{output.suffix}")


def table_text(rows: list[dict[str, Any]], output: Path | None) -> str:
    """`rows` as JSON when `output` ends in .json, else as CSV (floats in full precision, formulas quoted)."""
    if output is not None and output.suffix.lower() == ".json":
        return json_text(rows, indent=1) + "\n"
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(
        {k: repr(v) if isinstance(v, float) else spreadsheet_safe(v) for k, v in row.items()} for row in rows
    )
    return buffer.getvalue()


def emit(rows: list[dict[str, Any]], output: Path | None, overwrite: bool = False) -> str | None:
    """Write `rows` to `output` atomically (or to stdout as CSV when None); None, or why it failed.

    The output is claimed when it is written: without `overwrite`, a file that appeared since
    the check is never replaced. If the write fails, the rows go to a new file in the system's
    temporary folder, and if that fails too (a full disk, `ulimit -f`), to stdout as CSV; the
    message says where they went, so that no score is lost, and no partial file is left.
    """
    text = table_text(rows, output)
    try:
        if output is None:
            _print(text)
        else:
            # In a run directory, a table sqa created (not one replacing a file of the user's) is
            # recorded as sqa's once written, so that overwrite=true may replace it.
            new = not os.path.lexists(output) or output.name in ownership.owned(output.parent)
            # `check_output` applied `output_refusal`, the rule of every output, before scoring;
            # this is the write `write_output` makes (exclusive unless `overwrite`), here with the
            # fallbacks below where it fails.
            atomic_write_text(output, text, exclusive=not overwrite)
            if new:
                ownership.record_where_recorded(output.parent, [output.name])
        return None
    except OSError as err:
        failed = f"{output or 'stdout'}: not written ({_reason(err)})"
    try:
        kept = _save_in_temp(text, output)
    except OSError as err:
        failed += f", nor to a new file in {tempfile.gettempdir()} ({_reason(err)})"
    else:
        return f"{failed}; the scores were saved to {kept}"
    if output is None:
        return f"{failed}; the scores are lost"
    try:
        _print(table_text(rows, None))
    except OSError as err:
        return f"{failed}, nor to stdout ({_reason(err)}); the scores are lost"
    return f"{failed}; the scores were printed to stdout as CSV"


def _reason(err: OSError) -> str:
    return "it appeared while scoring" if isinstance(err, FileExistsError) else err.strerror or str(err)


def _print(text: str) -> None:
    """Write `text` to stdout now and whole, so that a failure (a closed pipe, a full disk) is raised here.

    Written to the descriptor directly where there is one: a write cut short by a file size limit
    (stdout redirected to a file under `ulimit -f`) passes through Python's buffered stdout
    without an error, leaving part of the table.
    """
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    sys.stdout.flush()
    data = memoryview(text.encode(sys.stdout.encoding or "utf-8", sys.stdout.errors or "strict"))
    while data:
        data = data[os.write(fd, data) :]


def _save_in_temp(text: str, output: Path | None) -> str:
    """A new file in the system's temporary folder holding `text`; removed again if writing fails."""
    name = output.stem if output is not None else "stdout"
    fd, kept = tempfile.mkstemp(prefix=f"sqa-score-{name}-", suffix=output.suffix if output else ".csv")
    try:
        # Bytes as atomic_write_text writes them: a name read with surrogate escapes is kept as is.
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8", "surrogateescape"))
    except OSError:
        os.unlink(kept)
        raise
    return kept


def clip_rows(
    results: Sequence[ScoreResult],
    inputs: Inputs,
    dimensions: Sequence[str],
    systems: Sequence[str | None] | None,
    distribution: str | None = None,
) -> list[dict[str, Any]]:
    """One row per readable clip, in input order: path, score, [spread, lo90, hi90], score_<dim>, ...

    ... then [reason], [system_id] (each input's of `systems`, under `--by-system`; the manifest's
    system columns then left out) and the manifest columns. `distribution` (an export with a spread, see
    `Scorer.distribution`) adds the spread of a listener's rating and its 90 % interval, as
    predictions.csv has them (`sqa.core.spread.interval`). A clip without a score (no vocal
    activity) has null scores (an empty CSV cell, JSON null); where there is one, a `reason`
    column says why for it and is empty for the others.
    """
    unscored = any(r.error is None and r.score is None for r in results)
    spreads = list(SPREAD_COLUMNS) if distribution is not None else []
    reserved = ["path", "score", *spreads, *(f"score_{d}" for d in dimensions)]
    if unscored:
        reserved.append("reason")
    if systems is not None:
        reserved.append("system_id")
    rows = []
    for r in results:
        if r.error is not None:
            continue
        row: dict[str, Any] = {"path": r.path, "score": r.score}
        if distribution is not None:
            row.update(dict.fromkeys(SPREAD_COLUMNS))
        if distribution is not None and r.spread is not None:
            low, high = interval(r.score, r.spread, INTERVAL_LEVELS["90"], distribution)
            row.update(spread=r.spread, lo90=float(low), hi90=float(high))
        row.update({f"score_{d}": r.dimension_scores[d] for d in dimensions})
        if unscored:
            row["reason"] = r.warning if r.score is None else ""
        if systems is not None:
            row["system_id"] = systems[r.index]
        for key, value in inputs.columns[r.index].items():
            if systems is not None and key in SYSTEM_COLUMNS:
                continue
            row[f"manifest_{key}" if key in reserved else key] = value
        rows.append(row)
    names = list(dict.fromkeys(k for row in rows for k in row))
    return [{k: row.get(k, "") for k in names} for row in rows]


def system_rows(
    rows: list[dict[str, Any]], dimensions: Sequence[str], ranking: Ranking
) -> list[dict[str, Any]]:
    """One row per system of `ranking`, best first: system_id, n, score, lo, hi, score_<dim>, next_*.

    score is the mean over the system's scored clips (n; clips without a score, for no vocal
    activity, are left out) and lo, hi its 95 % bootstrap interval; score_<dim> the means of the
    clip `rows` (with system_id). next_diff, next_lo, next_hi, next_p, next_significant and
    next_pairing compare it with the system ranked below it (`sqa.scoring.systems.Comparison`);
    null for the last, for a system without a scored clip and where an interval needs more clips.
    """
    columns = [f"score_{d}" for d in dimensions]
    scored: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        if row["score"] is not None:
            scored.setdefault(row["system_id"], []).append(row)
    below = {c.above: c for c in ranking.comparisons}
    table = []
    for s in ranking.systems:
        members = scored.get(s.system_id, [])
        row = {"system_id": s.system_id, "n": s.n, "score": s.score, "lo": s.lo, "hi": s.hi}
        row.update({d: sum(m[d] for m in members) / len(members) if members else None for d in columns})
        row.update(dict.fromkeys(NEXT_COLUMNS))
        c = below.get(s.system_id)
        if c is not None:
            significant = None if c.lo is None else c.significant
            row.update(next_diff=c.diff, next_lo=c.lo, next_hi=c.hi, next_p=c.p)
            row.update(next_significant=significant, next_pairing=c.pairing)
        table.append(row)
    return table
