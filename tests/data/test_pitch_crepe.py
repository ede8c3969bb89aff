"""f0.method=crepe against torchcrepe's own prediction, and on tones of known pitch."""

import numpy as np
import pytest
import soxr
import torch

from sqa.data.pitch import F0Extractor

torchcrepe = pytest.importorskip("torchcrepe")

THRESHOLD = 0.21


def sung_tone(sample_rate: int, seconds: float = 1.0, silence: float = 0.5) -> np.ndarray:
    """A 220 Hz voice-like tone (five harmonics, 5.5 Hz vibrato of ±30 cents), then silence."""
    t = np.arange(int(16000 * seconds)) / 16000
    f0 = 220.0 * 2 ** (0.3 / 12 * np.sin(2 * np.pi * 5.5 * t))
    phase = 2 * np.pi * np.cumsum(f0) / 16000
    wav = sum(0.3 / k * np.sin(k * phase) for k in range(1, 6)) * np.minimum(1.0, t / 0.05)
    wav = np.concatenate([wav, np.zeros(int(16000 * silence))])
    return wav if sample_rate == 16000 else soxr.resample(wav, 16000, sample_rate)


def torchcrepe_reference(wav: np.ndarray, sample_rate: int) -> np.ndarray:
    """torchcrepe.predict at the input rate (it resamples) and its At threshold; NaN (unvoiced) -> 0."""
    np.random.seed(0)  # the seed the extractor gives torchcrepe's dither
    f0, periodicity = torchcrepe.predict(
        torch.from_numpy(wav.astype(np.float32))[None],
        sample_rate,
        hop_length=sample_rate // 50,  # 20 ms
        fmin=40.0,
        fmax=799.0,
        model="tiny",
        return_periodicity=True,
        batch_size=512,
    )
    f0 = torchcrepe.threshold.At(THRESHOLD)(f0, periodicity)[0].numpy()
    return np.nan_to_num(f0, nan=0.0)


@pytest.mark.parametrize("sample_rate", [16000, 44100])
def test_crepe_f0_is_torchcrepes_prediction_at_dios_frames(sample_rate):
    wav = sung_tone(sample_rate)
    f0 = F0Extractor("crepe", crepe_threshold=THRESHOLD).compute(wav, sample_rate)
    reference = torchcrepe_reference(wav, sample_rate)
    dio = F0Extractor("dio").compute(wav, sample_rate)
    assert f0.shape == dio.shape == (76,)  # 1.5 s at 20 ms: frames at 0, 20, ..., 1500 ms
    assert reference.shape == f0.shape
    np.testing.assert_allclose(f0, reference, rtol=1e-6)
    assert (f0[5:45] > 0).all() and (f0[-10:] == 0).all()  # both voiced and unvoiced frames compared


def test_crepe_finds_a_220_hz_tone_and_silence_is_unvoiced():
    t = np.arange(16000) / 16000
    wav = np.concatenate([0.3 * np.sin(2 * np.pi * 220.0 * t), np.zeros(8000)])
    f0 = F0Extractor("crepe")(wav, 16000)
    assert np.median(f0[5:45]) == pytest.approx(220.0, rel=0.01)
    assert (f0[5:45] > 0).all()
    assert (f0[-10:] == 0).all()


def test_crepe_is_reproducible_and_leaves_numpy_random_state_alone():
    wav = sung_tone(16000, seconds=0.5, silence=0.0)
    extractor = F0Extractor("crepe")
    np.random.seed(123)
    first = extractor.compute(wav, 16000)
    after = np.random.random()
    np.random.seed(123)
    second = extractor.compute(wav, 16000)
    np.testing.assert_array_equal(first, second)  # torchcrepe's dither is seeded
    assert np.random.random() == after


def test_cache_key_separates_methods_and_crepe_models(tmp_path):
    wav = sung_tone(16000, seconds=0.5, silence=0.0)
    keys = {
        F0Extractor(method, crepe_model=model, cache_dir=str(tmp_path))._cache_path(wav, 16000)
        for method, model in [("dio", "tiny"), ("fcpe", "tiny"), ("crepe", "tiny"), ("crepe", "full")]
    }
    assert len(keys) == 4
    # dio's settings (its cache key and exports) are those written before crepe existed.
    assert set(F0Extractor("dio", crepe_model="full").settings()) == {
        "method",
        "frame_period_ms",
        "f0_floor",
        "f0_ceil",
    }
    crepe = F0Extractor("crepe", crepe_model="full", crepe_threshold=0.3)
    rebuilt = F0Extractor(**{k: v for k, v in crepe.export_config().items() if k != "_target_"})
    assert rebuilt.settings() == crepe.settings()


def test_crepe_refuses_unknown_model_and_hops_of_fractional_samples():
    with pytest.raises(ValueError, match="crepe_model"):
        F0Extractor("crepe", crepe_model="large")
    with pytest.raises(ValueError, match="16 kHz samples"):
        F0Extractor("crepe", frame_period_ms=10.01)


def test_an_export_with_a_crepe_extractor_passes_the_checks_and_rebuilds_it(tmp_path):
    from sqa.exports.format import export_predictor, load_export
    from sqa.models.backbone import LogMelBackbone
    from sqa.models.predictor import MOSPredictor

    model = MOSPredictor(LogMelBackbone(), pitch="midi").eval()
    extractor = F0Extractor("crepe", crepe_model="full", crepe_threshold=0.3)
    export_predictor(model, tmp_path / "exp", 16000, [], f0_extractor=extractor)
    _, _, f0 = load_export(tmp_path / "exp")
    assert f0.settings() == extractor.settings()
