"""The residual spread σ of an export's scores: how far a prediction misses its clip's true MOS.

Preferences turn score differences into probabilities with it (`sqa.scoring.preferences`), and a
test phase's same-song evaluation states which σ it used (`sqa.reports.preferences`). σ is the
selected checkpoint's validation RMSE, recorded in run_info.json (`learning_check.valid.rmse`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqa.exports.format import export_json, run_record

# Where σ comes from when it is the validation RMSE (`check_sigma`).
VALID_RMSE_SOURCE = "the selected checkpoint's RMSE over every validation clip (learning_check.valid.rmse)"


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
    block: Any = export_json(export, "metrics.json")
    # Any level may be missing or of another type in a metrics.json sqa did not write.
    for key in ("avg", "utt", "rmse"):
        block = block.get(key) if isinstance(block, dict) else None
    sigma = _positive(block)
    if sigma is not None:
        return sigma, (
            f"this export records no validation RMSE (run_info.json learning_check.valid.rmse; older "
            f"runs and imports lack it): preference probabilities use its test RMSE {sigma:.4g} instead"
        )
    return None, (
        "this export records neither a validation RMSE (run_info.json) nor a test RMSE (metrics.json)"
    )
