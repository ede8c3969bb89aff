"""Every number an export scores with is finite: its rating scale and its weights in the model's dtype."""

from __future__ import annotations

import pytest
import torch

from sqa.exports.format import load_export
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from tests.exports.test_export_security import assert_refused, edit_config, export  # noqa: F401


@pytest.mark.parametrize(
    ("score_range", "fragment"),
    [
        ([float("-inf"), float("inf")], "both finite"),
        ([0.0, float("nan")], "both finite"),
        ([-1e308, 1e308], "wide with ends within"),
        ([0.0, 5e-324], "wide with ends within"),
        ([0.0, 9.9e-4], "wide with ends within"),
        ([1e6, 1e6 + 10], "wide with ends within"),
    ],
)
def test_an_export_with_an_unusable_score_range_is_refused(export, score_range, fragment, tmp_path):  # noqa: F811
    edit_config(export, lambda c: c["model"].update(score_range=score_range))
    assert_refused(export, tmp_path / "none", "score_range must be", fragment)


@pytest.mark.parametrize("score_range", [[0.0, 1e-3], [-1e6, 0.0], [0.0, 1e6], [1.0, 5.0], [0.0, 100.0]])
def test_scales_at_the_limits_are_accepted(score_range):
    predictor = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), score_range=score_range)
    assert predictor.score_range == tuple(score_range)


def _rewrite_weight(folder, name: str, value: torch.Tensor) -> None:
    state = torch.load(folder / "model.pt", weights_only=True)
    state[name] = value
    torch.save(state, folder / "model.pt")


def test_float64_weights_that_overflow_float32_are_refused(export, tmp_path):  # noqa: F811
    state = torch.load(export / "model.pt", weights_only=True)
    name = "head.3.weight"
    big = state[name].double()
    big[0, 0] = 1e300
    _rewrite_weight(export, name, big)
    assert_refused(export, tmp_path / "none", repr(name), "NaN or infinite values once cast to torch.float32")
    # Finite in float32 after the cast: accepted, and cast as load_state_dict does.
    fine = state[name].double()
    fine[0, 0] = 3e38
    _rewrite_weight(export, name, fine)
    predictor, _, _ = load_export(export)
    assert predictor.head[3].weight.dtype == torch.float32


def test_a_sparse_weight_is_refused_with_its_name(export, tmp_path):  # noqa: F811
    state = torch.load(export / "model.pt", weights_only=True)
    name = "head.3.weight"
    _rewrite_weight(export, name, state[name].to_sparse())
    assert_refused(export, tmp_path / "none", repr(name), "torch.sparse_coo tensor; weights must be dense")
