"""Text tables of test results: the paper's `R1/R2|R3|Avg` layout, one formatter for every table.

`format_table` renders one run's metrics.json; `sqa-table` (`sqa.reports.results`) renders cells of many
runs with the same `paper_layout`.
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
    UNDEFINED_KEY,
    defined,
)


def paper_layout(parts: Sequence[str]) -> str:
    """Join one text per test set and the average as `R1/R2|R3|Avg` (`R1|Avg` for one set)."""
    *sets, average = parts
    first = "/".join(sets[:-1])
    return (f"{first}|" if first else "") + f"{sets[-1]}|{average}"


def spread_text(mean: float, std: float, count: int, runs: int, sep: str = "±") -> str:
    """`mean±std` of a value `count` of `runs` runs define: `(n=k)` where fewer (or one), `n/a` where none.

    One value has no spread: it prints without ±, rather than as ±0.000.
    """
    if count == 0:
        return "n/a"
    text = f"{mean:.3f}" + (f"{sep}{std:.3f}" if count > 1 else "")
    return text + (f" (n={count})" if count < runs or count == 1 else "")


def markdown(header: list[str], rows: list[list[str]]) -> str:
    """A markdown table; the `|` inside `R1/R2|R3|Avg` cells is escaped."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


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


def _notes(results: Mapping[str, Mapping[str, Mapping]], sets: Sequence[str]) -> list[str]:
    """Footnotes: why values are n/a, and averages that leave sets out."""
    notes = []
    for name in [*sets, AVERAGE_KEY]:
        for level in LEVELS:
            by_reason: dict[str, list[str]] = {}
            for metric, reason in results[name].get(UNDEFINED_KEY, {}).get(level, {}).items():
                by_reason.setdefault(reason, []).append(metric)
            label = "Avg" if name == AVERAGE_KEY else name
            notes += [f"n/a: {label} {level} {', '.join(m)}: {r}" for r, m in by_reason.items()]
    average = results[AVERAGE_KEY]
    for level in LEVELS:
        by_sets: dict[tuple[str, ...], list[str]] = {}
        for metric, used in average.get(AVERAGED_OVER_KEY, {}).get(level, {}).items():
            if used and len(used) < len(sets):
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

    Undefined values print as `n/a` with their reason below the table, as do averages that
    leave sets out; intervals print where they exist. Blocks read back from JSON (null for
    undefined values) render alike.
    """
    sets = [k for k in results if k != AVERAGE_KEY]
    header = paper_layout([*sets, "Avg"])
    lines = [f"{'level':<6} {'metric':<8} {header}"]
    for level in LEVELS:
        for name in METRIC_NAMES:
            cell = paper_layout([metric_cell(results[s], level, name) for s in [*sets, AVERAGE_KEY]])
            lines.append(f"{level:<6} {name:<8} {cell}")
    counts = ", ".join(f"{s}: {results[s]['utt']['n']} clips/{results[s]['sys']['n']} systems" for s in sets)
    lines.append(f"({counts})")
    lines += _notes(results, sets)
    if CI_KEY in results[AVERAGE_KEY]:
        lines.append(interval_note())
    return "\n".join(lines)
