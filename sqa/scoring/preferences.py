"""Which of two clips is better, and how sure: score differences turned into probabilities.

A clip's prediction misses its true MOS by a residual of spread σ (the export's validation RMSE).
Two clips' residuals, taken as independent and normal, make the difference of their
predictions miss the difference of their true MOS by a normal error of spread √2·σ, so

    P(A better than B) = Φ((score_A - score_B) / (√2·σ)).

σ is the RMSE of the selected checkpoint over every validation clip, recorded in the export's
run_info.json (`learning_check.valid.rmse`); an export without it (older runs, imports) falls
back to its test RMSE (metrics.json, utterance level, average over test sets), said in
`sigma_note`, and one with neither gives no probability. The RMSE includes any constant bias,
which cancels in a difference, so σ errs large and the probabilities towards ½.
The probabilities are `sqa.core.spread.probability` and `listener_probability`, σ is
`sqa.exports.residual.residual_sigma`; `read_pairs` reads `sqa-score --pairs` files;
`sqa.reports.preferences` evaluates the probabilities on labelled clips and on a test phase's
same-song pairs (preferences.json).

An export with a spread (`sqa.models.uncertainty`) predicts, per clip, the spread s of one
listener's rating about its score, rater disagreement and model error together, and answers a
different question: whether a listener rates A above B. Two ratings drawn independently about
the clips' scores differ by spread √(s_A² + s_B²), so

    P(a listener rates A above B) = Φ((score_A - score_B) / √(s_A² + s_B²)).

Rater noise, which a MOS averages away, stays in a single rating, so this probability lies nearer
½ than the MOS one for the same difference; a Laplace scale b enters as its standard deviation
√2·b (a normal of the same variance stands for the difference of two Laplace ratings). Ratings
by one listener share that listener's bias, which cancels in their difference, so for one
listener rating both clips the probability errs towards ½ too.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from sqa.core.reading import ReadError
from sqa.core.spread import listener_probability, probability
from sqa.data.audio import AudioError, os_path
from sqa.scoring.inputs import numbered_csv_rows
from sqa.scoring.results import SpreadScore

PAIR_COLUMNS = ("a", "b")


@dataclass(frozen=True)
class Preference:
    """Scores of A and B, their difference A - B, and P(A better) (None without a recorded σ).

    `basis` says what P(A better) is of: "mos" (A's MOS above B's, from the residual σ) or
    "listener" (a listener's rating of A above one of B, from the clips' predicted spreads).
    """

    score_a: float
    score_b: float
    difference: float
    p_a_better: float | None
    basis: str = "mos"


def preference(
    score_a: float,
    score_b: float,
    sigma: float | None,
    spreads: tuple[float, float, str] | None = None,
) -> Preference:
    """The `Preference` of overall scores A and B: from `spreads` (s_A, s_B, distribution) if given, else σ.

    With spreads, P is a listener's (`listener_probability`, basis "listener"); without, the
    MOS's Φ(diff / (√2·σ)) (basis "mos"), None when σ is None.
    """
    difference = score_a - score_b
    if spreads is not None:
        p = float(listener_probability(difference, *spreads))
        return Preference(score_a, score_b, difference, p, "listener")
    p = None if sigma is None else float(probability(difference, sigma))
    return Preference(score_a, score_b, difference, p)


def check_sigma(sigma: float | None) -> None:
    """Refuse a σ given by hand that is not a positive finite number (None: the export's)."""
    if sigma is not None and not (isinstance(sigma, int | float) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a positive number, got {sigma!r}")


def preference_of(
    a: SpreadScore, b: SpreadScore, sigma: float | None, export_sigma: float | None, distribution: str | None
) -> Preference:
    """The `Preference` of two scored clips: a σ given by hand, else their spreads, else the export's σ.

    A σ given by hand asks the MOS question, whatever the export; an export with a spread
    (`distribution`) answers a listener's. A clip without a score (no vocal activity under
    `vocal_only`) is a ValueError.
    """
    for name, clip in zip("ab", (a, b), strict=True):
        if clip.score is None:
            raise ValueError(f"clip {name} has no score (no vocal activity); no preference can be given")
    if sigma is not None:
        return preference(a.score, b.score, sigma)
    spreads = None if distribution is None else (a.spread, b.spread, distribution)
    return preference(a.score, b.score, export_sigma, spreads)


def preference_note(sigma: float | None, note: str | None) -> str | None:
    """What `prefer` says once of `residual_sigma`'s (σ, note): the note, and the way out where σ is None."""
    if sigma is not None or note is None:
        return note
    return (
        f"{note}: preferences give the score difference only, no probability; pass sigma= (the "
        "residual spread of its scores) to get one"
    )


@dataclass
class Pairs:
    """Pairs (a, b) of audio paths read from a pairs CSV, each with its line, and the rows that failed."""

    pairs: list[tuple[str, str]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_pairs(path: Path) -> Pairs:
    """The pairs of a CSV with columns `a` and `b` (audio paths; relative ones from the CSV's folder).

    Only a regular file is read (a FIFO, device or folder is a ValueError, never waited on). A
    missing or repeated column is a ValueError naming the file and its columns; a row with an
    empty cell, more cells than the header names, or a path that is not a regular file is a
    problem naming the file, its line and the column.
    """
    try:
        columns, rows = numbered_csv_rows(path)
    except ReadError as err:
        raise ValueError(str(err)) from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not UTF-8 text ({err}); save the pairs as UTF-8") from err
    except (csv.Error, OSError) as err:
        raise ValueError(f"{path}: cannot read the pairs CSV ({err})") from err
    missing = [c for c in PAIR_COLUMNS if c not in columns]
    if missing:
        raise ValueError(
            f"{path}: a pairs CSV needs columns a and b (audio paths); it lacks {', '.join(missing)} "
            f"(columns: {', '.join(columns) or 'none'})"
        )
    repeated = sorted({c for c in columns if columns.count(c) > 1 and c in PAIR_COLUMNS})
    if repeated:
        raise ValueError(f"{path}: column {repeated[0]} appears more than once; name each of a and b once")
    out = Pairs()
    if not rows:
        out.problems.append(f"{path}: the pairs CSV holds no rows")
    for line, row in rows:
        if row.get(None):  # csv.DictReader's key for cells beyond the header's columns
            out.problems.append(
                f"{path}, line {line}: {len(columns) + len(row[None])} cells; the header names {len(columns)}"
            )
            continue
        found = []
        for column in PAIR_COLUMNS:
            cell = (row.get(column) or "").strip()
            entry = Path(cell) if Path(cell).is_absolute() else path.parent / cell
            if not cell:
                out.problems.append(f"{path}, line {line}: column {column} is empty")
            elif not entry.is_file():
                out.problems.append(f"{path}, line {line}: column {column}: {entry} is not a file")
            else:
                try:
                    os_path(entry)
                except AudioError as err:
                    out.problems.append(f"{path}, line {line}: column {column}: {err}")
                    continue
                found.append(str(entry))
        if len(found) == len(PAIR_COLUMNS):
            out.pairs.append((found[0], found[1]))
            out.lines.append(line)
    return out
