"""Every number an export scores with is finite: its rating scale and its weights in the model's dtype."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

import sqa
from sqa.exports.config import F0_TARGET, MAX_INTEGER_DIGITS, read_export_config
from sqa.exports.format import ExportError, load_export
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.models.ssl import TransformersWav2Vec2
from sqa.scoring import cli as score
from tests.exports.test_export_security import assert_refused, edit_config, export  # noqa: F401


@pytest.mark.parametrize(
    ("score_range", "fragment"),
    [
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
    assert_refused(
        export,
        tmp_path / "none",
        repr(name),
        "is a sparse tensor (torch.sparse_coo); an export holds dense tensors",
    )


def _replace_text(folder: Path, old: str, new: str) -> None:
    """Replace the one `old` in config.yaml's text (for what yaml.safe_dump cannot write)."""
    path = folder / "config.yaml"
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, text
    path.write_text(text.replace(old, new), encoding="utf-8")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c["model"].update(dropout=math.nan),
            "model.dropout must be a probability in [0, 1), got nan",
        ),
        (lambda c: c["model"].update(score_range=[1.0, math.inf]), "model.score_range[1] is inf"),
        (lambda c: c["model"].update(score_range=[-math.inf, 5.0]), "model.score_range[0] is -inf"),
        (lambda c: c["model"].update(score_range=[1.0, math.nan]), "model.score_range[1] is nan"),
        (lambda c: c.update(f0={"_target_": F0_TARGET, "f0_floor": math.nan}), "f0.f0_floor is nan"),
    ],
)
def test_a_non_finite_setting_is_refused_naming_the_file_and_key(export, change, message, tmp_path):  # noqa: F811
    edit_config(export, change)
    assert_refused(export, tmp_path / "none", f"{export / 'config.yaml'}: {message}")


def test_the_largest_float_passes_the_check_and_a_literal_past_it_is_refused(export):  # noqa: F811
    # A YAML literal past the largest float reads as inf. The constructor refuses both scales
    # (too wide); the config check refuses only the infinite one, naming its key.
    _replace_text(export, "  - 5.0\n", "  - 1.7976931348623157e+308\n")
    assert read_export_config(export / "config.yaml")["model"]["score_range"][1] == sys.float_info.max
    _replace_text(export, "1.7976931348623157e+308", "1.8e+308")
    with pytest.raises(
        ExportError, match=r"config\.yaml: model\.score_range\[1\] is inf; an export's settings"
    ):
        read_export_config(export / "config.yaml")


@pytest.mark.parametrize("dropout", [0, 0.0, 0.5, math.nextafter(1.0, 0.0)])
def test_a_dropout_in_0_to_1_is_accepted(export, dropout):  # noqa: F811
    edit_config(export, lambda c: c["model"].update(dropout=dropout))
    assert sqa.load(export).predictor.head[2].p == dropout


@pytest.mark.parametrize("dropout", [math.nextafter(0.0, -1.0), 1.0, 1, 1.5, math.nan, math.inf])
def test_a_dropout_outside_0_to_1_is_refused_by_sqa_load(export, dropout):  # noqa: F811
    edit_config(export, lambda c: c["model"].update(dropout=dropout))
    with pytest.raises(ExportError) as info:
        sqa.load(export)
    config = export / "config.yaml"
    assert str(info.value) == f"{config}: model.dropout must be a probability in [0, 1), got {dropout!r}"


def test_sqa_score_refuses_a_nan_dropout_in_one_line_naming_config_yaml(export, capsys, tmp_path):  # noqa: F811
    edit_config(export, lambda c: c["model"].update(dropout=math.nan))
    assert score.main(["--checkpoint", str(export), str(tmp_path / "x.wav")]) == 2
    config = export / "config.yaml"
    assert capsys.readouterr().err == (
        f"sqa-score: {config}: model.dropout must be a probability in [0, 1), got nan\n"
    )


@pytest.mark.parametrize(("value", "refused"), [(0.0, False), (0.999, False), (1.0, True), (-0.001, True)])
def test_a_wav2vec2_configs_dropouts_are_probabilities(export, value, refused):  # noqa: F811
    backbone = {"_target_": TransformersWav2Vec2.export_target(), "config": {"hidden_dropout": value}}
    edit_config(export, lambda c: c["model"].update(backbone=backbone))
    if refused:
        with pytest.raises(
            ExportError, match=r"model\.backbone\.config\.hidden_dropout must be a probability"
        ):
            read_export_config(export / "config.yaml")
    else:
        assert (
            read_export_config(export / "config.yaml")["model"]["backbone"]["config"]["hidden_dropout"]
            == value
        )


def test_an_integer_of_the_most_digits_is_accepted_and_one_more_is_refused(export, tmp_path):  # noqa: F811
    _replace_text(export, "test: null\n", f"test:\n  seed: {'9' * MAX_INTEGER_DIGITS}\n")
    assert load_export(export)[1]["test"]["seed"] == 10**MAX_INTEGER_DIGITS - 1
    _replace_text(export, "seed: 9", "seed: 19")
    assert_refused(
        export,
        tmp_path / "none",
        f"{export / 'config.yaml'}: test.seed is an integer of {MAX_INTEGER_DIGITS + 1} digits; "
        f"config.yaml integers have at most {MAX_INTEGER_DIGITS}",
    )


def test_sqa_score_names_the_file_and_key_of_a_5000_digit_integer(export, capsys, tmp_path):  # noqa: F811
    # Past 4300 digits Python refuses to convert the integer, with a ValueError naming no file.
    _replace_text(export, "n_mels: 16\n", f"n_mels: {'1' * 5000}\n")
    assert score.main(["--checkpoint", str(export), str(tmp_path / "x.wav")]) == 2
    config = export / "config.yaml"
    assert capsys.readouterr().err == (
        f"sqa-score: {config}: model.backbone.n_mels is an integer of 5000 digits; "
        f"config.yaml integers have at most {MAX_INTEGER_DIGITS}\n"
    )


def test_a_5000_digit_integer_as_a_key_is_refused_by_sqa_load(export):  # noqa: F811
    _replace_text(export, "data: null\n", f"data:\n  ? {'1' * 5000}\n  : x\n")
    with pytest.raises(ExportError, match=r"config\.yaml: a key under data is an integer of 5000 digits"):
        sqa.load(export)
