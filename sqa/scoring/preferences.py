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
`pair_outcomes` and `calibration` evaluate the probabilities on labelled clips; `read_pairs`
reads `sqa-score --pairs` files.

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sqa.core.spread import check_distribution
from sqa.data.audio import AudioError, os_path
from sqa.exports.format import export_json, run_record
from sqa.scoring.inputs import numbered_csv_rows

PAIR_COLUMNS = ("a", "b")
# Calibration is read in this many equal-width bins of the stated probability.
CALIBRATION_BINS = 5


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


def probability(difference: float | np.ndarray, sigma: float) -> float | np.ndarray:
    """P(A better) = Φ(difference / (√2·σ)) of score differences A - B (any shape) at residual spread σ."""
    z = np.asarray(difference, dtype=np.float64) / (math.sqrt(2.0) * sigma)
    # Φ(z) = ½·(1 + erf(z/√2)); math.erf per element keeps numpy-only code without scipy.
    p = 0.5 * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(z / math.sqrt(2.0)))
    return float(p) if p.ndim == 0 else p


def listener_probability(difference: float, spread_a: float, spread_b: float, distribution: str) -> float:
    """P(a listener rates A above B) = Φ(difference / √(sd_A² + sd_B²)) of clips' rating spreads.

    A spread is a standard deviation ("gaussian") or a Laplace scale b ("laplace", SD √2·b).
    """
    factor = math.sqrt(2.0) if check_distribution(distribution) == "laplace" else 1.0
    sd = factor * math.hypot(spread_a, spread_b)
    return 0.5 * (1.0 + math.erf(difference / (sd * math.sqrt(2.0))))


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
        p = listener_probability(difference, *spreads)
        return Preference(score_a, score_b, difference, p, "listener")
    p = None if sigma is None else float(probability(difference, sigma))
    return Preference(score_a, score_b, difference, p)


def _positive(value: object) -> float | None:
    """`value` as a float when it is a finite positive number, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def residual_sigma(export: str | Path) -> tuple[float | None, str | None]:
    """The export's residual spread σ and a note when it is not the validation RMSE (or is missing).

    Validation RMSE (run_info.json `learning_check.valid.rmse`) first; else the test average's
    utterance RMSE (metrics.json `avg.utt.rmse`), with a note saying so; else (None, why).
    """
    check = run_record(export, "learning_check") or {}
    valid = check.get("valid")
    sigma = _positive(valid.get("rmse")) if isinstance(valid, dict) else None
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


def pair_outcomes(
    pred: Sequence[float], true: Sequence[float], groups: Sequence[Any], apart: Sequence[Any] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted differences, true differences and pair indices (i, j), i < j, of clips in one group.

    Pairs share their `groups` entry (a test set, a song); with `apart` (e.g. systems), only pairs
    whose `apart` entries differ. Pairs tied in `true` are kept (callers leave them out as
    `pair_acc` does).
    """
    pred_a = np.asarray(pred, dtype=np.float64)
    true_a = np.asarray(true, dtype=np.float64)
    group_a = np.asarray(groups, dtype=object)
    i, j = np.triu_indices(pred_a.size, k=1)
    keep = group_a[i] == group_a[j]
    if apart is not None:
        apart_a = np.asarray(apart, dtype=object)
        keep &= apart_a[i] != apart_a[j]
    i, j = i[keep], j[keep]
    return pred_a[i] - pred_a[j], true_a[i] - true_a[j], np.stack([i, j], axis=1)


def preference_accuracy(pred_diff: np.ndarray, true_diff: np.ndarray) -> float:
    """Share of pairs untied in true_diff (n,) ordered alike by pred_diff (n,); a tied prediction counts ½."""
    untied = true_diff != 0
    if not untied.any():
        return math.nan
    agree = np.sign(pred_diff[untied]) == np.sign(true_diff[untied])
    tied = pred_diff[untied] == 0
    return float((agree.sum() + 0.5 * tied.sum()) / untied.sum())


def calibration(p: np.ndarray, outcome: np.ndarray, bins: int = CALIBRATION_BINS) -> list[dict[str, float]]:
    """Per equal-width bin of stated probabilities p (n,): pairs, mean p, share of outcome (n,) true, gap.

    Bins without pairs are left out.
    """
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.searchsorted(edges, p, side="right") - 1, 0, bins - 1)
    out = []
    for b in range(bins):
        member = index == b
        if not member.any():
            continue
        stated, observed = float(p[member].mean()), float(outcome[member].mean())
        out.append(
            {
                "low": float(edges[b]),
                "high": float(edges[b + 1]),
                "pairs": int(member.sum()),
                "stated": stated,
                "observed": observed,
                "gap": observed - stated,
            }
        )
    return out


def evaluate_preferences(
    pred: Sequence[float],
    true: Sequence[float],
    groups: Sequence[Any],
    sigma: float,
    apart: Sequence[Any] | None = None,
) -> dict[str, Any]:
    """Accuracy and calibration of preferences between clips of one group (pairs as in `pair_outcomes`).

    Pairs tied in `true` are left out; each pair enters the calibration both ways round.
    Returns {pairs, accuracy, max_gap, bins}.
    """
    pred_diff, true_diff, _ = pair_outcomes(pred, true, groups, apart)
    untied = true_diff != 0
    p = np.asarray(probability(pred_diff[untied], sigma), dtype=np.float64).reshape(-1)
    better = true_diff[untied] > 0
    # Each pair both ways round (A, B and B, A): which clip is A is arbitrary, so the bins are symmetric.
    bins = calibration(np.concatenate([p, 1.0 - p]), np.concatenate([better, ~better]))
    return {
        "pairs": int(untied.sum()),
        "accuracy": preference_accuracy(pred_diff, true_diff),
        "max_gap": max((abs(b["gap"]) for b in bins), default=math.nan),
        "bins": bins,
    }
