"""The residual spread σ an export states for preferences: its sources, their order, and bad values."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sqa import metrics
from sqa.exports.format import export_predictor
from sqa.exports.residual import check_sigma, residual_sigma
from sqa.models.backbone import LogMelBackbone
from sqa.models.interface import Predictor
from sqa.models.predictor import MOSPredictor
from sqa.reports import learning


def run_export(
    folder: Path,
    valid_rmse: float | None = None,
    test_rmse: float | None = None,
    model: Predictor | None = None,
) -> Path:
    """An export of `model` (None: a small log-mel one) into `folder`, as a run writes it.

    Its test results are off every label by `test_rmse` (None: untested); its learning check
    (run_info.json) records the validation RMSE `valid_rmse` (None: no learning check, as an import
    or an earlier run's export has none).
    """
    labels, sets = [2.0, 4.0], ["test", "test"]
    tested = None
    if test_rmse is not None:
        tested = metrics.evaluate_sets([x + test_rmse for x in labels], labels, ["a", "b"], sets)
    info = None
    if valid_rmse is not None:
        info = {"learning_check": learning.check(3.0, (valid_rmse, labels), tested or {}, labels, sets)}
    model = model or MOSPredictor(LogMelBackbone(n_mels=16, channels=8))
    return export_predictor(model, folder, 16000, ["d"], metrics=tested, run_info=info)


def export_with(tmp_path: Path, valid_rmse: object = None, test_rmse: object = None) -> Path:
    """An export folder whose run_info.json and metrics.json hold the given RMSEs (None: left out)."""
    # Kept by hand: records no run writes (bad values, other shapes), forged input for the reader.
    folder = tmp_path / "export"
    folder.mkdir()
    (folder / "config.yaml").write_text("{}\n")
    (folder / "model.pt").write_bytes(b"")
    if valid_rmse is not None:
        info = {"learning_check": {"valid": {"rmse": valid_rmse}}}
        (folder / "run_info.json").write_text(json.dumps(info))
    if test_rmse is not None:
        (folder / "metrics.json").write_text(json.dumps({"avg": {"utt": {"rmse": test_rmse}}}))
    return folder


def test_the_validation_rmse_comes_before_the_test_rmse(tmp_path):
    assert residual_sigma(run_export(tmp_path / "export", valid_rmse=0.41, test_rmse=0.75)) == (0.41, None)


def test_without_a_validation_rmse_the_test_rmse_is_used_and_said(tmp_path):
    sigma, note = residual_sigma(run_export(tmp_path / "export", test_rmse=0.75))
    assert sigma == 0.75
    assert note == (
        "this export records no validation RMSE (run_info.json learning_check.valid.rmse; older runs "
        "and imports lack it): preference probabilities use its test RMSE 0.75 instead"
    )


def test_without_either_rmse_there_is_no_sigma_and_a_reason(tmp_path):
    assert residual_sigma(run_export(tmp_path / "export")) == (
        None,
        "this export records neither a validation RMSE (run_info.json) nor a test RMSE (metrics.json)",
    )


@pytest.mark.parametrize("bad", [0, 0.0, -0.2, "0.4", True, math.inf])
def test_a_validation_rmse_that_is_not_a_finite_positive_number_falls_through_to_the_test_rmse(tmp_path, bad):
    sigma, note = residual_sigma(export_with(tmp_path, valid_rmse=bad, test_rmse=0.73))
    assert sigma == 0.73 and note is not None


def test_the_smallest_positive_rmse_is_a_sigma_and_an_integer_one_is_a_float():
    assert check_sigma({"valid": {"rmse": 1e-300}}) == 1e-300
    one = check_sigma({"valid": {"rmse": 1}})
    assert one == 1.0 and type(one) is float
    assert check_sigma({"valid": {"rmse": math.nan}}) is None
    assert check_sigma({"valid": [0.4]}) is None and check_sigma(None) is None


@pytest.mark.parametrize(
    "metrics", [{}, {"avg": {}}, {"avg": {"utt": {}}}, {"avg": [0.7]}, {"avg": {"utt": [0.7]}}, [0.7]]
)
def test_a_metrics_json_missing_a_level_or_of_another_shape_gives_no_sigma_and_the_reason(tmp_path, metrics):
    folder = export_with(tmp_path)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    sigma, note = residual_sigma(folder)
    assert sigma is None and note.startswith("this export records neither a validation RMSE")
