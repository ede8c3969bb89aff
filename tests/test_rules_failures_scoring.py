"""Rules of docs/failures.md and docs/scoring.md that no other test pinned on both sides.

Each test holds a threshold at its value and just past it, or a rule against its nearest
plausible alternative; the table in docs/testing.md names the rule each one pins.
"""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from sqa import metrics
from sqa.data.arguments import check_arguments
from sqa.data.audio import MAX_AUDIO_SAMPLES, AudioError, check_audio_size, downmix_resample, load_audio
from sqa.data.corpus import Corpus
from sqa.data.validate import ON_SCREEN, CorpusProblems, Problem
from sqa.exports.config import MAX_INTEGER_DIGITS, read_export_config
from sqa.exports.format import ExportError
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli, cli_arguments
from sqa.scoring.clips import clip_warning
from tests.test_metrics import sets_of_systems

# --- failures.md, Exports from anyone: `model.score_range` ------------------------------------


@pytest.mark.parametrize(
    "score_range",
    [
        [-500_000.0, 500_001.0],  # ends within ±1e6, but 1,000,001 wide
        [-1e6, 1e6],  # the widest pair of ends allowed, twice the width allowed
        [-1e6 - 10, -1e6],  # 10 wide, its low end past -1e6
    ],
)
def test_a_scale_wider_than_1e6_or_with_a_low_end_past_minus_1e6_is_refused(score_range):
    with pytest.raises(
        ValueError, match=r"score_range must be 0\.001 to 1e\+06 wide with ends within ±1e\+06"
    ):
        MOSPredictor(LogMelBackbone(n_mels=16, channels=8), score_range=score_range)


def test_a_scale_exactly_1e6_wide_between_the_end_bounds_is_accepted():
    predictor = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), score_range=[-500_000.0, 500_000.0])
    assert predictor.score_range == (-500_000.0, 500_000.0)


# --- failures.md, Exports from anyone: integers have at most 100 digits -----------------------


def test_config_integers_have_at_most_100_digits(default_export, tmp_path):
    assert MAX_INTEGER_DIGITS == 100
    text = (default_export / "config.yaml").read_text()
    assert "test: null\n" in text
    path = tmp_path / "config.yaml"
    path.write_text(text.replace("test: null\n", f"test:\n  seed: {'9' * 100}\n"))
    assert read_export_config(path)["test"]["seed"] == 10**100 - 1
    path.write_text(text.replace("test: null\n", f"test:\n  seed: 1{'0' * 100}\n"))
    with pytest.raises(ExportError) as err:
        read_export_config(path)
    assert str(err.value) == (
        f"{path}: test.seed is an integer of 101 digits; config.yaml integers have at most 100"
    )


# --- failures.md, Audio: a sample is at most 2^31 in magnitude --------------------------------

LIMIT = float(2**31)
JUST_ABOVE = float(np.nextafter(np.float32(LIMIT), np.float32(np.inf)))  # 2^31 + 256 in float32


@pytest.mark.parametrize("value", [LIMIT, -LIMIT])
def test_samples_of_magnitude_2_31_are_processed(value):
    out = downmix_resample(np.full((160, 1), value, dtype=np.float32), 16000, 16000, "a")
    assert out.shape == (160,) and out[0] == value


@pytest.mark.parametrize("value", [JUST_ABOVE, -JUST_ABOVE, -3e38])
def test_samples_past_2_31_in_magnitude_either_way_are_refused(value):
    with pytest.raises(AudioError) as err:
        downmix_resample(np.full((160, 1), value, dtype=np.float32), 16000, 16000, "a")
    assert str(err.value) == (
        f"a: samples as large as {abs(value):.3g}; audio must be in [-1, 1] or a sane range "
        "(at most 2147483648, int32 PCM's full scale)"
    )


# --- failures.md, Audio: header rate 1..384,000 Hz and the 2^28-sample default ----------------


@pytest.mark.parametrize(("rate", "frames", "expected"), [(384_000, 3840, 160), (1, 2, 32000)])
def test_files_at_the_lowest_and_highest_header_rates_are_read(rate, frames, expected, tmp_path):
    path = tmp_path / f"r{rate}.wav"
    sf.write(path, np.full(frames, 0.1, dtype=np.float32), rate, subtype="FLOAT")
    assert load_audio(path, 16000).shape == (expected,)


def test_the_default_sample_limit_is_2_28_and_exact():
    assert (
        MAX_AUDIO_SAMPLES
        == 268_435_456
        == cli_arguments.argument_parser().parse_args(["--checkpoint", "e", "x.wav"]).max_samples
    )
    check_audio_size("x.wav", 16000, 2**28, 1, 16000)  # at the limit: no error
    check_audio_size("x.wav", 16000, 2**27, 2, 16000)  # frames x channels at the limit
    with pytest.raises(AudioError) as err:
        check_audio_size("x.wav", 16000, 2**27 + 1, 2, 16000)
    assert "(268435458 samples decoded" in str(err.value)
    with pytest.raises(AudioError) as err:
        check_audio_size("x.wav", 1, 150000, 1, 16000)
    assert str(err.value) == (
        "x.wav: 150000 frames x 1 channels at 1 Hz (2400000000 samples decoded or resampled to 16000 Hz) "
        "exceeds the limit of 268435456 samples"
    )


# --- failures.md, Degenerate metrics: intervals need 8 points ---------------------------------


def test_ranking_metric_intervals_need_8_points_not_7():
    results = metrics.evaluate_sets(*sets_of_systems({"t7": 7, "t8": 8}), bootstrap=200)
    for name in ("lcc", "srcc", "ktau", "pair_acc"):
        assert metrics.defined(results["t7"]["sys"][name]), name
        assert results["t7"]["ci"]["sys"][name] is None, name
        assert results["t8"]["ci"]["sys"][name] is not None, name
    assert results["t7"]["ci"]["sys"]["rmse"] is not None


# --- failures.md, Bad corpora: the first 20 problems on screen --------------------------------


@pytest.mark.parametrize(("count", "tail"), [(20, None), (21, "  ... and 1 more")])
def test_the_report_lists_20_problems_and_counts_the_rest(count, tail):
    assert ON_SCREEN == 20
    problems = [Problem(f"c{i}.wav", f"c{i}", "audio file not found") for i in range(count)]
    lines = str(CorpusProblems(problems)).splitlines()
    assert lines[0] == f"{count} problem(s) in the corpus:"
    assert lines[1:21] == [f"  c{i}.wav [c{i}]: audio file not found" for i in range(20)]
    if tail is None:
        assert len(lines) == 21
    else:
        assert lines[21] == f"{tail} (all of them: data_problems.txt in the run directory)"


# --- failures.md, Configuration errors: both sides of each argument's rule --------------------

VALID = {
    "sample_rate": 16000,
    "batch_size": 4,
    "eval_batch_size": 4,
    "num_workers": 0,
    "max_train_seconds": None,
    "preload": False,
    "vocal_only": False,
    "seed": 0,
    "train_domains": None,
    "on_error": "raise",
    "bucketing": False,
    "max_batch_seconds": None,
    "dimensions": ["mos"],
    "judges": False,
    "valid_share": 0.1,
    "test_share": 0.1,
    "split_by": "clip",
    "split_seed": None,
}
CORPUS = Corpus([], ["d1"])


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("sample_rate", 1),
        ("batch_size", 1),
        ("eval_batch_size", 1),
        ("num_workers", 0),
        ("max_train_seconds", 0.01),
        ("max_batch_seconds", 1),
        ("preload", True),
        ("vocal_only", True),
        ("bucketing", True),
        ("judges", True),
        ("seed", -3),
        ("split_seed", 7),
        ("split_seed", None),
        ("train_domains", ["d1"]),
        ("on_error", "skip"),
        ("dimensions", ["mos", "lyrics"]),
    ],
)
def test_data_arguments_at_their_bounds_are_accepted(name, value):
    check_arguments(CORPUS, {**VALID, name: value})


@pytest.mark.parametrize(
    ("name", "value", "kind"),
    [
        ("sample_rate", 0, "a positive integer"),
        ("sample_rate", 16000.0, "a positive integer"),
        ("num_workers", -1, "an integer >= 0"),
        ("max_train_seconds", 0, "a positive number of seconds or null"),
        ("max_batch_seconds", True, "a positive number of seconds or null"),
        ("bucketing", 1, "true or false"),
        ("vocal_only", "yes", "true or false"),
        ("judges", "yes", "true or false"),
        ("seed", "1", "an integer"),
        ("seed", True, "an integer"),
        ("split_seed", "0", "an integer or null"),
        ("split_seed", False, "an integer or null"),
        ("dimensions", [], "a non-empty list of names"),
        ("dimensions", "mos", "a non-empty list of names"),
    ],
)
def test_data_arguments_past_their_bounds_are_refused_by_name(name, value, kind):
    with pytest.raises(ValueError) as err:
        check_arguments(CORPUS, {**VALID, name: value})
    assert str(err.value) == f"{name} must be {kind}, got {value!r}"


# --- scoring.md, Command line: --num-workers default ------------------------------------------


@pytest.mark.parametrize(
    ("cores", "workers"), [(None, 1), (1, 1), (2, 1), (3, 1), (4, 2), (8, 4), (9, 4), (64, 4)]
)
def test_decoding_workers_default_to_half_the_cores_at_most_4(cores, workers, monkeypatch):
    monkeypatch.setattr(cli_arguments.os, "cpu_count", lambda: cores)
    assert cli.default_workers() == workers


# --- scoring.md, Behaviour: the clip warnings' thresholds -------------------------------------


def _warning(peak: float, samples: int = 16000) -> str | None:
    wav = np.zeros(samples)  # float64: the thresholds themselves, not their float32 roundings
    wav[samples // 2] = peak
    return clip_warning(wav, 16000, 400)


@pytest.mark.parametrize("peak", [2.0, -2.0, 1e-4, -1e-4, 0.5])
def test_peaks_from_minus_80_dbfs_to_plus_6_dbfs_give_no_warning(peak):
    assert _warning(peak) is None


@pytest.mark.parametrize("peak", [float(np.nextafter(2.0, 3.0)), -2.5])
def test_a_peak_past_plus_6_dbfs_either_way_warns_of_integer_pcm(peak):
    assert _warning(peak).startswith(f"peak {abs(peak):g} is far above full scale (1.0)")


@pytest.mark.parametrize("peak", [float(np.nextafter(1e-4, 0.0)), -9e-5, 0.0])
def test_a_peak_below_minus_80_dbfs_is_silent(peak):
    assert _warning(peak) == "silent (peak below -80 dBFS): scored, but the score says nothing about singing"


def test_clips_shorter_than_400_samples_warn_and_400_do_not():
    assert LogMelBackbone().min_samples == 400  # the default predictor's receptive field
    clip = 0.1 * np.sin(np.arange(400) / 5.0)
    assert clip_warning(clip, 16000, 400) is None
    assert clip_warning(clip[:399], 16000, 400) == (
        "only 399 samples (24.9 ms), shorter than the model's 400-sample receptive field: "
        "padded with silence before scoring"
    )
