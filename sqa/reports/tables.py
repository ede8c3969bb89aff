"""Text tables of test results: the paper's `R1/R2|R3|Avg` layout, one formatter for every table.

`format_table` renders one run's metrics.json; `sqa-table` (`sqa.reports.results`) renders cells of many
runs with the same `paper_layout`, and the model card its rows, all over the sets `table_keys` names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sqa.metrics import (
    AVERAGE_KEY,
    AVERAGED_OVER_KEY,
    CI_KEY,
    LEVELS,
    METRIC_NAMES,
    MIN_INTERVAL_POINTS,
    ROLES,
    UNDEFINED_KEY,
    defined,
)


def table_keys(results: Mapping[str, Mapping]) -> list[str]:
    """The test sets of `results`, then `avg` where it averages several sets: over one it repeats that set.

    The sets averaged are those the average's `averaged_over` names (references and anchors are
    left out of it), or every set where it names none.
    """
    sets = [k for k in results if k != AVERAGE_KEY]
    if AVERAGE_KEY not in results:
        return sets
    over = results[AVERAGE_KEY].get(AVERAGED_OVER_KEY) or {}
    averaged = {s for by_metric in over.values() for used in by_metric.values() for s in used} or set(sets)
    return sets + [AVERAGE_KEY] if len(averaged) > 1 else sets


def set_label(key: str) -> str:
    """A test set's name in a table header, `Avg` for the average."""
    return "Avg" if key == AVERAGE_KEY else key


def paper_layout(parts: Sequence[str]) -> str:
    """Join one text per test set and the average as `R1/R2|R3|Avg` (`R1|Avg` for two parts, `R1` for one)."""
    head = ["/".join(parts[:-2])] if len(parts) > 2 else []
    return "|".join([*head, *parts[-2:]])


def spread_text(mean: float, std: float, count: int, runs: int, sep: str = "±") -> str:
    """`mean±std` of a value `count` of `runs` runs define: `(n=k)` where fewer (or one), `n/a` where none.

    One value has no spread: it prints without ±, rather than as ±0.000.
    """
    if count == 0:
        return "n/a"
    text = f"{mean:.3f}" + (f"{sep}{std:.3f}" if count > 1 else "")
    return text + (f" (n={count})" if count < runs or count == 1 else "")


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table; the `|` inside `R1/R2|R3|Avg` cells and headers is escaped."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), "|" + "---|" * len(header), *map(line, rows)])


def plain_table(header: list[str], rows: list[list[str]]) -> str:
    """A terminal table: columns padded to their widest cell, two spaces apart, the header underlined."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [[cell.ljust(width) for cell, width in zip(row, widths, strict=True)] for row in [header, *rows]]
    lines.insert(1, ["-" * width for width in widths])
    return "\n".join("  ".join(line).rstrip() for line in lines)


def metric_cell(block: Mapping[str, Mapping], level: str, name: str, interval_digits: int = 2) -> str:
    """One value to 3 decimals (`n/a` where undefined or absent), then its interval `[lo, hi]` if any."""
    value = block[level].get(name)
    if not defined(value):
        return "n/a"
    text = f"{value:.3f}"
    ci = block.get(CI_KEY, {}).get(level, {}).get(name)
    if ci is not None and defined(ci[0]) and defined(ci[1]):
        text += f" [{ci[0]:.{interval_digits}f}, {ci[1]:.{interval_digits}f}]"
    return text


def _notes(results: Mapping[str, Mapping[str, Mapping]], keys: Sequence[str]) -> list[str]:
    """Footnotes on the table's `keys`: why values are n/a, and averages that leave sets out."""
    notes = []
    for name in keys:
        for level in LEVELS:
            by_reason: dict[str, list[str]] = {}
            for metric, reason in results[name].get(UNDEFINED_KEY, {}).get(level, {}).items():
                by_reason.setdefault(reason, []).append(metric)
            notes += [f"n/a: {set_label(name)} {level} {', '.join(m)}: {r}" for r, m in by_reason.items()]
    if AVERAGE_KEY not in keys:
        return notes
    sets = len(keys) - 1
    for level in LEVELS:
        by_sets: dict[tuple[str, ...], list[str]] = {}
        for metric, used in results[AVERAGE_KEY].get(AVERAGED_OVER_KEY, {}).get(level, {}).items():
            if used and len(used) < sets:
                by_sets.setdefault(tuple(used), []).append(metric)
        notes += [f"Avg {level} {', '.join(m)}: over {', '.join(u)} only" for u, m in by_sets.items()]
    return notes


def interval_note() -> str:
    """What `[lo, hi]` means and when a value has none (`MIN_INTERVAL_POINTS`), for table footnotes."""
    by_need: dict[int, list[str]] = {}
    for name in METRIC_NAMES:
        by_need.setdefault(MIN_INTERVAL_POINTS.get(name, 2), []).append(name.upper())
    needs = "; ".join(
        f"{' and '.join([', '.join(names[:-1]), names[-1]] if len(names) > 1 else names)} {need}"
        for need, names in sorted(by_need.items())
    )
    return (
        "[lo, hi]: bootstrap 95 % intervals, resampling clips (utterance level) or systems (system "
        f"level). A value gets one only from this many clips or systems: {needs} (resamples of fewer "
        "repeat so few distinct points that a correlation is ±1 or undefined)."
    )


def format_table(results: Mapping[str, Mapping[str, Mapping]]) -> str:
    """Render results as the paper's `R1/R2|R3|Avg` table, one row per level and metric.

    The average has no column where it averages one set (`table_keys`). Undefined values print
    as `n/a` with their reason below the table, as do averages that leave sets out; intervals
    print where they exist. Blocks read back from JSON (null for undefined values) render alike.
    """
    keys = table_keys(results)
    sets = [k for k in keys if k != AVERAGE_KEY]
    lines = [f"{'level':<6} {'metric':<8} {paper_layout([set_label(k) for k in keys])}"]
    for level in LEVELS:
        for name in METRIC_NAMES:
            cell = paper_layout([metric_cell(results[k], level, name) for k in keys])
            lines.append(f"{level:<6} {name:<8} {cell}")
    counts = ", ".join(f"{s}: {results[s]['utt']['n']} clips/{results[s]['sys']['n']} systems" for s in sets)
    lines.append(f"({counts})")
    lines += _notes(results, keys)
    if CI_KEY in results[AVERAGE_KEY]:
        lines.append(interval_note())
    return "\n".join(lines)


# The metrics of the bench table (metrics.json and the bench's files hold every metric).
BENCH_METRICS = ("rmse", "lcc", "srcc", "ktau")
# What each kind of row is, for the bench table's legend.
BENCH_KINDS = {
    "constant": "the mean of the corpus's own training labels for every clip",
    "in-corpus": "an export tested on the corpus it was trained on",
    "cross-corpus": "an export tested on another corpus",
    "zero-shot": "a pretrained predictor, not trained on any of these corpora",
}


def bench_row(corpus: str, predictor: str, kind: str, results: Mapping[str, Mapping]) -> list[str]:
    """One row of the bench table: the average block of `results` (references and anchors left out)."""
    average = results[AVERAGE_KEY]
    cells = [metric_cell(average, level, name) for level in LEVELS for name in BENCH_METRICS]
    return [corpus, predictor, kind, f"{average['utt']['n']}/{average['sys']['n']}", *cells]


def bench_reasons(
    results: Mapping[str, Mapping], names: Sequence[str] = BENCH_METRICS
) -> dict[str, dict[str, list[str]]]:
    """{level: {reason: metrics}} of the average's undefined `names`, the reasons taken from its sets.

    The sets are those the average is over: references and anchors (ROLES) are not.
    """
    average = results[AVERAGE_KEY]
    sets = [block for key, block in results.items() if key not in (AVERAGE_KEY, *ROLES)]
    out: dict[str, dict[str, list[str]]] = {}
    for level in LEVELS:
        for name in names:
            if defined(average[level].get(name)):
                continue
            found = {block.get(UNDEFINED_KEY, {}).get(level, {}).get(name) for block in sets} - {None}
            for reason in sorted(found) or ["undefined in every set"]:
                out.setdefault(level, {}).setdefault(reason, []).append(name)
    return out


def bench_table(rows: Sequence[Mapping], markdown_table: bool = False) -> str:
    """The bench table: one row per (corpus, predictor), each `{corpus, predictor, kind, results}`.

    Values are each row's average over its test sets (weighted as `metrics.evaluate_sets`
    weights them; references and anchors are left out), with their intervals; n/a cells are
    explained below, with the kinds of rows and the intervals.
    """
    header = ["corpus", "predictor", "kind", "clips/systems"]
    header += [f"{level} {name.upper()}" for level in LEVELS for name in BENCH_METRICS]
    body = [bench_row(r["corpus"], r["predictor"], r["kind"], r["results"]) for r in rows]
    lines = [markdown(header, body) if markdown_table else plain_table(header, body), ""]
    for row in rows:
        for level, reasons in bench_reasons(row["results"]).items():
            lines += [
                f"n/a: {row['corpus']} / {row['predictor']} {level} {', '.join(names)}: {reason}"
                for reason, names in reasons.items()
            ]
    kinds = [kind for kind in BENCH_KINDS if any(r["kind"] == kind for r in rows)]
    lines += [f"{kind}: {BENCH_KINDS[kind]}" for kind in kinds]
    lines.append(
        "Each value averages the corpus's test sets (clips weight utterance level, systems system "
        "level); references and anchors are left out."
    )
    if any(CI_KEY in r["results"][AVERAGE_KEY] for r in rows):
        lines.append(interval_note())
    return "\n".join(lines)
