"""Scale shift: test labels far from the training labels, and the linear map that corrects a model for it.

A model learns the training corpus's scale: the mean and spread of its labels. A test set rated
by other listeners, in another test, or of other material (another song, another corpus) can sit
far from it; the model's errors then measure the shift as much as the model. `label_shift`
flags a test set whose label mean lies at least `SHIFT_SDS` training standard deviations from the
training mean, or whose standard deviation is under 1/`SPREAD_RATIO` or over `SPREAD_RATIO` times
the training one. `fit_line` is the least-squares map y ≈ a + b·score that a few labelled clips of
the new corpus give (as the DNSMOS baseline maps its scores onto a corpus's scale); correlations
are unchanged by it when b > 0, errors are not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

SHIFT_SDS = 1.0
SPREAD_RATIO = 2.0


def fit_line(pred: Sequence[float], true: Sequence[float]) -> tuple[float, float] | None:
    """(a, b) of the least-squares line true ≈ a + b·pred; None with fewer than two distinct `pred`."""
    x, y = np.asarray(pred, dtype=np.float64), np.asarray(true, dtype=np.float64)
    if x.size < 2 or np.ptp(x) == 0:
        return None
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def label_shift(mean: float, sd: float, sets: Mapping[str, Sequence[float]]) -> dict[str, dict[str, Any]]:
    """Per test set: its label mean and SD against the training labels' `mean` and `sd`, and whether shifted.

    `shift_sds` is (set mean − training mean) / training SD; `spread_ratio` the set's SD over the
    training SD (None where the training SD is 0 or a set has one label).
    """
    out = {}
    for name, labels in sets.items():
        x = np.asarray(labels, dtype=np.float64)
        set_mean, set_sd = float(x.mean()), float(x.std())
        shift = (set_mean - mean) / sd if sd > 0 else None
        ratio = set_sd / sd if sd > 0 and x.size > 1 else None
        flagged = (shift is not None and abs(shift) >= SHIFT_SDS) or (
            ratio is not None and not 1 / SPREAD_RATIO <= ratio <= SPREAD_RATIO
        )
        out[name] = {
            "clips": int(x.size),
            "mean": set_mean,
            "sd": set_sd,
            "shift_sds": shift,
            "spread_ratio": ratio,
            "shifted": bool(flagged),
        }
    return out


def describe(name: str, shift: Mapping[str, Any], train_mean: float, train_sd: float) -> str:
    """One line on a shifted test set: its label mean and SD against the training labels'."""
    return (
        f"test set {name!r}: its labels (mean {shift['mean']:.3g}, SD {shift['sd']:.3g}) sit far from the "
        f"training labels (mean {train_mean:.3g}, SD {train_sd:.3g}); its errors measure this scale shift "
        "too (eval.py map_clips=N fits a linear map on N labelled clips of it)"
    )
