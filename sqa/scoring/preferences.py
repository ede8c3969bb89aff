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
`read_pairs` reads `sqa-score --pairs` files; `sqa.reports.preferences` evaluates the
probabilities on labelled clips and on a test phase's same-song pairs (preferences.json).

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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sqa.core.spread import check_distribution
from sqa.data.audio import AudioError, os_path
from sqa.exports.format import export_json, run_record
from sqa.scoring.inputs import numbered_csv_rows

PAIR_COLUMNS = ("a", "b")
# Where σ comes from when it is the validation RMSE (`check_sigma`).
VALID_RMSE_SOURCE = "the selected checkpoint's RMSE over every validation clip (learning_check.valid.rmse)"


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


def _normal_cdf(z: float | np.ndarray) -> float | np.ndarray:
    """Φ(z) of standard normal quantiles z (any shape): a float for a scalar, else an array."""
    # Φ(z) = ½·(1 + erf(z/√2)); math.erf per element keeps numpy-only code without scipy.
    p = 0.5 * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(np.asarray(z, np.float64) / math.sqrt(2.0)))
    return float(p) if p.ndim == 0 else p


def probability(difference: float | np.ndarray, sigma: float) -> float | np.ndarray:
    """P(A better) = Φ(difference / (√2·σ)) of score differences A - B (any shape) at residual spread σ."""
    return _normal_cdf(np.asarray(difference, dtype=np.float64) / (math.sqrt(2.0) * sigma))


def listener_probability(
    difference: float | np.ndarray,
    spread_a: float | np.ndarray,
    spread_b: float | np.ndarray,
    distribution: str,
) -> float | np.ndarray:
    """P(a listener rates A above B) = Φ(difference / √(sd_A² + sd_B²)) of clips' rating spreads (any shape).

    A spread is a standard deviation ("gaussian") or a Laplace scale b ("laplace", SD √2·b).
    """
    factor = math.sqrt(2.0) if check_distribution(distribution) == "laplace" else 1.0
    sd = factor * np.hypot(spread_a, spread_b)
    return _normal_cdf(np.asarray(difference, dtype=np.float64) / sd)


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


def _positive(value: object) -> float | None:
    """`value` as a float when it is a finite positive number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def check_sigma(check: Mapping[str, Any] | None) -> float | None:
    """The validation RMSE of a learning check (run_info.json `learning_check`), None where it has none."""
    valid = (check or {}).get("valid")
    return _positive(valid.get("rmse")) if isinstance(valid, dict) else None


def residual_sigma(export: str | Path) -> tuple[float | None, str | None]:
    """The export's residual spread σ and a note when it is not the validation RMSE (or is missing).

    Validation RMSE (run_info.json `learning_check.valid.rmse`) first; else the test average's
    utterance RMSE (metrics.json `avg.utt.rmse`), with a note saying so; else (None, why).
    """
    sigma = check_sigma(run_record(export, "learning_check"))
    if sigma is not None:
        return sigma, None
    test = export_json(export, "metrics.json")
    block = test.get("avg", {}).get("utt", {}) if isinstance(test, dict) else {}
    sigma = _positive(block.get("rmse")) if isinstance(block, dict) else None
    if sigma is not None:
        return sigma, (
            f"this export records no validation RMSE (run_info.json learning_check.valid.rmse; older "
            f"runs and imports lack it): preference probabilities use its test RMSE {sigma:.4g} instead"
        )
    return None, (
        "this export records neither a validation RMSE (run_info.json) nor a test RMSE (metrics.json): "
        "preferences give the score difference only, no probability; pass sigma= (the residual "
        "spread of its scores) to get one"
    )


@dataclass
class Pairs:
    """Pairs (a, b) of audio paths read from a pairs CSV, each with its line, and the rows that failed."""

    pairs: list[tuple[str, str]] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def read_pairs(path: Path) -> Pairs:
    """The pairs of a CSV with columns `a` and `b` (audio paths; relative ones from the CSV's folder).

    A missing column is a ValueError naming the file and its columns; a row with an empty cell or
    a path that is not a file is a problem naming the file, its line and the column.
    """
    try:
        columns, rows = numbered_csv_rows(path)
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
    out = Pairs()
    if not rows:
        out.problems.append(f"{path}: the pairs CSV holds no rows")
    for line, row in rows:
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
