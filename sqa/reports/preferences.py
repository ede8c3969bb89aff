"""How well preferences between clips hold on labelled clips: accuracy and calibration.

`pair_outcomes` forms the pairs (clips of one group, e.g. a test set and a song; optionally of
different systems), `preference_accuracy` counts the pairs ordered alike (as `pair_acc` does),
`calibration` compares stated probabilities with observed shares in equal-width bins, and
`song_preferences` is a test phase's preferences.json: same-song renditions by different
systems, per test set and pooled. The probabilities themselves are `sqa.core.spread`'s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sqa.core.spread import listener_probability, probability

# Calibration is read in this many equal-width bins of the stated probability.
CALIBRATION_BINS = 5
# A test phase's evaluation of same-song pairs (`song_preferences`), beside its metrics.json.
PREFERENCES_FILE = "preferences.json"


def _codes(values: Sequence[Any]) -> np.ndarray:
    """Integer codes (n,) of hashable `values` (tuples too): equal values, equal codes."""
    seen: dict[Any, int] = {}
    return np.array([seen.setdefault(v, len(seen)) for v in values], dtype=np.int64)


def pair_outcomes(
    pred: Sequence[float], true: Sequence[float], groups: Sequence[Any], apart: Sequence[Any] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Predicted differences, true differences and pair indices (i, j), i < j, of clips in one group.

    Pairs share their `groups` entry (a test set, a (test set, song) tuple); with `apart` (e.g.
    systems), only pairs whose `apart` entries differ. Pairs tied in `true` are kept (callers
    leave them out as `pair_acc` does).
    """
    pred_a = np.asarray(pred, dtype=np.float64)
    true_a = np.asarray(true, dtype=np.float64)
    group_a = _codes(groups)
    # Pairs are formed within each group, never over all n² pairs of a large test set.
    index = [np.empty((0, 2), dtype=np.int64)]
    for code in np.unique(group_a):
        members = np.flatnonzero(group_a == code)
        a, b = np.triu_indices(members.size, k=1)
        index.append(np.stack([members[a], members[b]], axis=1))
    pairs = np.concatenate(index)
    pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
    if apart is not None:
        apart_a = _codes(apart)
        pairs = pairs[apart_a[pairs[:, 0]] != apart_a[pairs[:, 1]]]
    i, j = pairs[:, 0], pairs[:, 1]
    return pred_a[i] - pred_a[j], true_a[i] - true_a[j], pairs


def preference_accuracy(pred_diff: np.ndarray, true_diff: np.ndarray) -> float:
    """Share of pairs untied in true_diff (n,) ordered alike by pred_diff (n,); a tied prediction counts ½."""
    untied = true_diff != 0
    if not untied.any():
        return math.nan
    agree = np.sign(pred_diff[untied]) == np.sign(true_diff[untied])
    tied = pred_diff[untied] == 0
    return float((agree.sum() + 0.5 * tied.sum()) / untied.sum())


def calibration(p: np.ndarray, outcome: np.ndarray, bins: int = CALIBRATION_BINS) -> list[dict[str, float]]:
    """Per equal-width bin of stated probabilities p (n,): pairs, mean p, mean outcome (n,), gap.

    An outcome is 1 or 0 (A better or not) or an observed rate. Bins without pairs are left out.
    """
    # arange / bins: edges such as 0.6 exactly, as linspace does not give them.
    edges = np.arange(bins + 1) / bins
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


def rated_above(ratings_a: Sequence[float], ratings_b: Sequence[float]) -> float:
    """Share of (rating of A, rating of B) pairs with A's higher, a tie ½: listeners' preference, observed."""
    signs = np.sign(np.subtract.outer(np.asarray(ratings_a, np.float64), np.asarray(ratings_b, np.float64)))
    return float((signs.mean() + 1.0) / 2.0)


@dataclass(frozen=True)
class Listener:
    """A listener's preference's inputs: clips' spreads (n,), their distribution, each clip's ratings."""

    spreads: Sequence[float]
    distribution: str
    ratings: Sequence[Sequence[float]]


def evaluate_preferences(
    pred: Sequence[float],
    true: Sequence[float],
    groups: Sequence[Any],
    sigma: float | None,
    apart: Sequence[Any] | None = None,
    listener: Listener | None = None,
) -> dict[str, Any]:
    """Accuracy and calibration of preferences between clips of one group (pairs as in `pair_outcomes`).

    Pairs tied in `true` are left out (`tied` counts them); each pair enters the calibration both
    ways round. The stated probability is the MOS one at residual spread `sigma`, against whether
    A's true MOS is higher; with `listener`, a listener's from both clips' spreads, against the
    share of the clips' rating pairs with A's higher (`rated_above`). Returns {pairs, tied,
    accuracy, max_gap, bins}, NaN where undefined: no untied pair, or no σ (and no `listener`).
    """
    pred_diff, true_diff, index = pair_outcomes(pred, true, groups, apart)
    untied = true_diff != 0
    i, j = index[untied].T
    bins: list[dict[str, float]] = []
    if listener is not None:
        spreads = np.asarray(listener.spreads, dtype=np.float64)
        p = listener_probability(pred_diff[untied], spreads[i], spreads[j], listener.distribution)
        observed = [rated_above(listener.ratings[a], listener.ratings[b]) for a, b in zip(i, j, strict=True)]
        bins = _both_ways(p, np.asarray(observed, dtype=np.float64))
    elif sigma is not None:
        bins = _both_ways(probability(pred_diff[untied], sigma), (true_diff[untied] > 0).astype(np.float64))
    return {
        "pairs": int(untied.sum()),
        "tied": int((~untied).sum()),
        "accuracy": preference_accuracy(pred_diff, true_diff),
        "max_gap": max((abs(b["gap"]) for b in bins), default=math.nan),
        "bins": bins,
    }


def _both_ways(p: float | np.ndarray, observed: np.ndarray) -> list[dict[str, float]]:
    """`calibration` of stated p (n,) against observed rates (n,), and of each pair as (B, A)."""
    # Which clip is A is arbitrary, so the bins are made symmetric.
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    return calibration(np.concatenate([p, 1.0 - p]), np.concatenate([observed, 1.0 - observed]))


def _finite(value: float) -> float | None:
    """`value`, or None (JSON null) where it is NaN."""
    return None if math.isnan(value) else float(value)


def song_preferences(
    rows: Sequence[dict[str, Any]], sigma: float | None, sigma_source: str, distribution: str | None = None
) -> dict[str, Any] | None:
    """preferences.json's record of test prediction rows: same-song pairs per test set and pooled (`all`).

    Pairs are clips of one test set and one `song` by different systems (rows without a song or a
    label are left out; None where no row has both). The probability is the MOS one at residual
    spread `sigma` (`sigma_source` says where it comes from, or why there is none); rows with a
    `spread` of a predictor of `distribution`, and `ratings` for every clip, are evaluated as a
    listener's preference instead (`evaluate_preferences`). A null number says why under `undefined`.
    """
    # An empty song (predictions.csv's cell of a clip without one) is none.
    sung = [r for r in rows if r.get("song") and not math.isnan(r["mos"])]
    if not sung:
        return None
    listener = None
    if distribution is not None and all("spread" in r and r.get("ratings") for r in sung):
        listener = Listener([r["spread"] for r in sung], distribution, [r["ratings"] for r in sung])
        sigma = None
        sigma_source = (
            f"not used: the predictor has a spread ({distribution}), so P is a listener's from both clips' "
            "spreads, observed as the share of the clips' rating pairs with A rated higher (ties 1/2)"
        )
    sets = sorted({r["test_set"] for r in sung})
    record: dict[str, Any] = {
        "pairs": "clips of one test set and song by different systems; pairs tied in the true MOS left out",
        "basis": "listener" if listener else "mos",
        "sigma": sigma,
        "sigma_source": sigma_source,
        "calibration_bins": CALIBRATION_BINS,
        "sets": {},
    }
    for name in [*sets, None]:
        members = [k for k, r in enumerate(sung) if name is None or r["test_set"] == name]
        subset = None if listener is None else _subset(listener, members)
        block = _song_block([sung[k] for k in members], sigma, sigma_source, subset)
        if name is None:
            record["all"] = block
        else:
            record["sets"][name] = block
    return record


def _subset(listener: Listener, members: Sequence[int]) -> Listener:
    """`listener` of the clips `members` only."""
    return Listener(
        [listener.spreads[k] for k in members], listener.distribution, [listener.ratings[k] for k in members]
    )


def _song_block(
    rows: Sequence[dict[str, Any]], sigma: float | None, sigma_source: str, listener: Listener | None
) -> dict[str, Any]:
    """One set's (or the pool's) same-song evaluation: clips, songs, pairs, accuracy, max_gap, bins."""
    result = evaluate_preferences(
        [r["pred"] for r in rows],
        [r["mos"] for r in rows],
        [(r["test_set"], r["song"]) for r in rows],
        sigma,
        apart=[r["system_id"] for r in rows],
        listener=listener,
    )
    block = {"clips": len(rows), "songs": len({(r["test_set"], r["song"]) for r in rows}), **result}
    block["accuracy"], block["max_gap"] = _finite(result["accuracy"]), _finite(result["max_gap"])
    undefined = {}
    if not result["pairs"]:
        why = "every pair is tied in the true MOS" if result["tied"] else "no song is sung by two systems"
        undefined = {"accuracy": why, "max_gap": why}
    elif block["max_gap"] is None:
        undefined["max_gap"] = sigma_source
    if undefined:
        block["undefined"] = undefined
    return block


def describe(record: dict[str, Any]) -> str:
    """A `song_preferences` record in one line: pooled pairs, accuracy, largest calibration gap, σ."""
    pooled = record["all"]
    undefined = pooled.get("undefined", {})
    figures = ", ".join(
        f"{key} undefined ({undefined[key]})" if key in undefined else f"{key} {pooled[key]:.3f}"
        for key in ("accuracy", "max_gap")
    )
    if record["basis"] == "listener":
        basis = "P from the clips' spreads"
    elif record["sigma"] is not None:
        basis = f"sigma {record['sigma']:.4g}, {record['sigma_source']}"
    else:
        basis = "no sigma"
    return (
        f"same-song pairs of different systems: {pooled['pairs']} untied pairs, {figures} over "
        f"{record['calibration_bins']} bins ({basis})"
    )
