"""The Python API: `sqa.load(path).score(audio, sample_rate)` against `sqa-score` on the same audio."""

from __future__ import annotations

import csv
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest
import soundfile as sf
import torch
from omegaconf import OmegaConf

import sqa
from sqa.exports.format import export_predictor, load_export
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.reports import learning
from sqa.scoring import cli as score
from sqa.scoring.scorer import ClipWarning, LearningWarning
from tests.conftest import REPO


def stereo(seconds: float, rate: int, seed: int = 0) -> np.ndarray:
    """A (2, N) float64 clip: a tone on one channel, noise on the other."""
    t = np.arange(int(seconds * rate)) / rate
    noise = np.random.default_rng(seed).uniform(-0.2, 0.2, t.size)
    return np.stack([0.3 * np.sin(2 * np.pi * 330 * t), noise])


def cli_scores(export, paths, tmp_path) -> list[dict[str, str]]:
    out = tmp_path / "cli.csv"
    assert score.main(["--checkpoint", str(export), "--output", str(out), *map(str, paths)]) == 0
    with out.open() as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="module")
def predictor(default_export):
    return sqa.load(default_export)


def test_every_input_form_matches_sqa_score_on_the_file(predictor, default_export, tmp_path):
    clip = stereo(1.5, 44100)
    sf.write(tmp_path / "clip.wav", clip.T, 44100, subtype="FLOAT")
    sf.write(tmp_path / "mono.wav", clip[1], 22050, subtype="FLOAT")
    from_file, mono_file = (
        float(r["score"])
        for r in cli_scores(default_export, [tmp_path / "clip.wav", tmp_path / "mono.wav"], tmp_path)
    )
    # (samples, channels), as soundfile.read returns it; (channels, samples) would be a batch.
    forms = {
        "numpy float64": clip.T,
        "numpy float32": clip.T.astype(np.float32),
        "torch float32": torch.from_numpy(clip.T).float(),
        "torch float64": torch.from_numpy(clip.T),
    }
    for name, audio in forms.items():
        assert predictor.score(audio, 44100) == pytest.approx(from_file, abs=1e-4), name
    assert predictor.score(clip[1], 22050) == pytest.approx(mono_file, abs=1e-4)
    assert predictor.score(torch.from_numpy(clip[1]), 22050) == pytest.approx(mono_file, abs=1e-4)
    many = predictor.score([clip.T, clip[1][None]], 44100)
    assert many[0] == pytest.approx(from_file, abs=1e-4) and isinstance(many[1], float)
    # The resampling matters: the same samples declared at another rate score differently.
    assert abs(predictor.score(clip.T, 16000) - from_file) > 1e-3


def test_half_precision_is_accepted(predictor):
    clip = stereo(1.0, 16000).T.astype(np.float16)
    assert predictor.score(torch.from_numpy(clip), 16000) == pytest.approx(
        predictor.score(clip.astype(np.float32), 16000), abs=1e-6
    )


def test_several_dimensions_give_a_dict_per_clip(tmp_path):
    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), dimensions=["mos", "lyrics"]).eval()
    export_predictor(model, tmp_path / "exp", 16000, ["a"])
    clip = stereo(1.0, 16000)[0]
    scores = sqa.load(tmp_path / "exp").score([clip, clip], 16000)
    with torch.no_grad():
        reference = model(torch.from_numpy(clip).float()[None], torch.tensor([clip.size])).scores[0]
    assert list(scores[0]) == ["mos", "lyrics"] and scores[0] == scores[1]
    assert [scores[0]["mos"], scores[0]["lyrics"]] == pytest.approx(reference.tolist(), abs=1e-5)


@pytest.mark.parametrize(
    "audio, rate, error, message",
    [
        (np.zeros(1000, dtype=np.int16), 16000, TypeError, "scale integer PCM"),
        (torch.zeros(1000, dtype=torch.int32), 16000, TypeError, "floating-point"),
        (np.zeros((4, 4)), 16000, ValueError, "shape (4, 4) is neither: rows are clips"),
        (np.zeros((1, 2, 1000)), 16000, ValueError, "1-D, (1, samples) or (samples, channels)"),
        (np.zeros(1000), 0, ValueError, "sample_rate must be an integer in 1..384000 Hz, got 0"),
        ([np.zeros(1000), np.zeros(0)], 16000, ValueError, "audio[1]: the clip holds no samples"),
    ],
)
def test_bad_audio_gets_a_clear_error(predictor, audio, rate, error, message):
    with pytest.raises(error, match=re.escape(message)):
        predictor.score(audio, rate)


def test_silent_and_tiny_clips_warn(predictor):
    with pytest.warns(ClipWarning, match="silent"):
        predictor.score(np.zeros(16000), 16000)
    with pytest.warns(ClipWarning, match="only 1 samples"):
        predictor.score(np.ones(1) * 0.1, 16000)


def test_float_audio_far_above_full_scale_warns_in_the_api_and_for_files(predictor, tmp_path):
    t = np.arange(16000) / 16000
    pcm_scale = (20000 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    with pytest.warns(ClipWarning, match=r"peak 20000 is far above full scale.*divide by 32768"):
        predictor.score(pcm_scale, 16000)
    # Just above full scale (a float file may overshoot a little) and the rescaled clip: no warning.
    for clip in (pcm_scale / 32768, pcm_scale / 20000 * 1.9):
        with warnings.catch_warnings():
            warnings.simplefilter("error", ClipWarning)
            predictor.score(clip, 16000)
    sf.write(tmp_path / "loud.wav", pcm_scale, 16000, subtype="FLOAT")
    (result,) = predictor.score_files([tmp_path / "loud.wav"])
    assert result.score is not None and "far above full scale" in result.warning


def test_to_moves_and_refuses_an_unavailable_device(default_export):
    scorer = sqa.load(default_export)
    assert scorer.to("cpu") is scorer and next(scorer.predictor.parameters()).device.type == "cpu"
    with pytest.raises(ValueError, match="is not available"):
        scorer.to(f"cuda:{torch.cuda.device_count()}")


def test_a_domain_is_refused_for_a_model_without_domain_ids_in_the_api_and_sqa_score(
    default_export, tmp_path, capsys
):
    for domain in ("d", 0):
        message = (
            f"domain {domain!r}: this model has no domain embedding (it was trained without domain IDs), "
            "so it scores every clip alike; leave the domain out"
        )
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            sqa.load(default_export, domain=domain)
    wav = tmp_path / "clip.wav"
    sf.write(wav, stereo(1.0, 16000)[0], 16000)
    args = ["--checkpoint", str(default_export), "--device", "cpu", "--num-workers", "0"]
    assert score.main([*args, "--domain", "d", str(wav)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("sqa-score: domain 'd': this model has no domain embedding")
    # A model with domain IDs takes one, by name or index, and each scores differently.
    torch.manual_seed(0)
    model = MOSPredictor(LogMelBackbone(), num_domains=2, domain_dim=4)
    export = export_predictor(model, tmp_path / "domains", 16000, ["p1", "p2"])
    clip = stereo(1.0, 16000)[0]
    assert sqa.load(export).score(clip, 16000) == sqa.load(export, domain="p1").score(clip, 16000)
    assert sqa.load(export, domain=1).score(clip, 16000) == sqa.load(export, domain="p2").score(clip, 16000)
    assert sqa.load(export, domain="p2").score(clip, 16000) != sqa.load(export).score(clip, 16000)
    assert score.main([*args[:1], str(export), *args[2:], "--domain", "p2", str(wav)]) == 0
    # An export whose config.yaml omits `domains` (written by hand or by another tool) names none:
    # index 0 is its first embedding, and a name or another index is refused.
    first = sqa.load(export).score(clip, 16000)
    config = OmegaConf.load(export / "config.yaml")
    del config["domains"]
    OmegaConf.save(config, export / "config.yaml")
    assert sqa.load(export, domain=0).score(clip, 16000) == first
    with pytest.raises(ValueError, match=r"^domain index 1 out of range for domains \[\]$"):
        sqa.load(export, domain=1)
    with pytest.raises(ValueError, match=r"^unknown domain 'p1'; the export knows \[\]$"):
        sqa.load(export, domain="p1")


def test_run_directory_and_model_pt_load_the_same_predictor(default_export, tmp_path):
    clip = stereo(1.0, 16000)[0]
    expected = sqa.load(default_export).score(clip, 16000)
    assert sqa.load(default_export / "model.pt").score(clip, 16000) == expected
    run = tmp_path / "run"
    run.mkdir()
    (run / "export").symlink_to(default_export)
    with pytest.raises(sqa.ExportError, match="symbolic link"):
        sqa.load(run)


def test_torch_hub_loads_from_a_local_clone(default_export):
    clip = stereo(1.0, 16000)[0]
    hub = torch.hub.load(str(REPO), "load", str(default_export), source="local")
    assert hub.score(clip, 16000) == sqa.load(default_export).score(clip, 16000)


def test_help_does_not_import_torch():
    code = "import sys, contextlib, io\nfrom sqa.scoring import cli as score\n" + (
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    score.main(['--help'])\nprint('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.parametrize(
    ("rmse", "low", "said"),
    [(1.0, -0.1, "This model predicts no better"), (1.0, 0.2, "This model ranks clips"), (0.5, 0.2, None)],
)
def test_loading_an_export_says_its_learning_check_only_when_it_did_not_beat_the_constant(
    default_export, tmp_path, rmse, low, said
):
    # At the constant's RMSE the levels are no better (an SRCC interval above 0: it still ranks);
    # below it, with an SRCC interval above 0, better. The check as a run records it: a training mean
    # of 3.0 misses each of the 8 test labels by 1.0 (the constant's RMSE), the model's test average
    # has RMSE `rmse` and an SRCC interval [low, 0.8].
    tested = {"avg": {"utt": {"rmse": rmse, "srcc": 0.6}, "ci": {"utt": {"srcc": [low, 0.8]}}}}
    check = learning.check(3.0, None, tested, [2.0, 4.0] * 4, ["test"] * 8)
    assert check["test"]["constant_rmse"] == 1.0
    model = load_export(default_export)[0]
    export = export_predictor(model, tmp_path / "export", 16000, ["d"], run_info={"learning_check": check})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scorer = sqa.load(export)
    sentence = learning.sentence(check)
    assert sentence.startswith(said or "This model beats")
    assert [(w.category, str(w.message)) for w in caught] == ([(LearningWarning, sentence)] if said else [])
    assert scorer.learning_warning == (sentence if said else None)
