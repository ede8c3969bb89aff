import json

import numpy as np
import pytest
import soundfile as sf

from sqa.data.corpus import CorpusError
from sqa.data.synthetic import BATCHES, generate, load_synthetic


def test_layout_batches_test_sets_and_mixed_rates(synthetic_root):
    corpus = load_synthetic(synthetic_root, seed=0)
    assert corpus.domains == list(BATCHES)
    assert list(corpus.test_sets()) == ["test1", "test2", "test3"]
    for test_set, clips in corpus.test_sets().items():
        assert len({c.system_id for c in clips}) >= 8, test_set
    rates = {sf.info(str(c.path)).samplerate for c in corpus.clips}
    assert rates == {16000, 24000, 44100}
    sys_info = json.loads((synthetic_root / "info" / "sys_info.json").read_text())
    assert {v["tag"]["domain_id"] for v in sys_info.values()} == {0, 1, 2, 3, 4}


def test_mos_is_the_mean_of_five_integer_ratings(synthetic_root):
    scores = json.loads((synthetic_root / "info" / "score.json").read_text())["utterance"]
    for entry in scores.values():
        ratings = entry["score"]["scores"]
        assert len(ratings) == 5 and all(isinstance(r, int) and 1 <= r <= 5 for r in ratings)
        assert entry["score"]["mos"] == pytest.approx(np.mean(ratings))


def test_quality_follows_degradation_severity(synthetic_root):
    corpus = load_synthetic(synthetic_root, seed=0)
    sys_info = json.loads((synthetic_root / "info" / "sys_info.json").read_text())
    by_model: dict[str, list[float]] = {}
    for clip in corpus.clips:
        by_model.setdefault(sys_info[clip.system_id]["model"], []).append(clip.mos)
    means = {k: np.mean(v) for k, v in by_model.items()}
    assert means["clean-0"] > 3.8
    worst = [k for k in ("noise-3", "bits-4", "lowpass-1200") if k in means]
    assert worst and all(means[k] < means["clean-0"] - 1.5 for k in worst)


def test_generation_is_deterministic_and_never_overwrites(tmp_path):
    a = generate(tmp_path / "a", seed=7, clips_per_system=3, systems_per_batch=(3, 3, 3, 2, 2))
    b = generate(tmp_path / "b", seed=7, clips_per_system=3, systems_per_batch=(3, 3, 3, 2, 2))
    for name in ("split.json", "score.json", "sys_info.json"):
        assert (a / "info" / name).read_text() == (b / "info" / name).read_text()
    wav = sorted((a / "wav").iterdir())[4]
    assert wav.read_bytes() == (b / "wav" / wav.name).read_bytes()
    with pytest.raises(CorpusError, match="refusing to overwrite"):
        generate(a, seed=7)
    with pytest.raises(CorpusError, match="different corpus"):
        load_synthetic(a, seed=8, clips_per_system=3, systems_per_batch=(3, 3, 3, 2, 2))


def test_whole_phrase_detune_is_visible_in_the_pitch_histogram():
    import torch

    from sqa.data import singing
    from sqa.data.pitch import F0Extractor
    from sqa.models.pitch_features import pitch_histogram

    extractor = F0Extractor()
    bins = np.arange(120)

    def off_grid_cents(kind: str, param: float, clip: int) -> float:
        rng = np.random.default_rng([99, clip, int(param)])
        f0, voiced, _ = singing.melody(rng, singing.SYNTH_RATE, kind, param)
        track = torch.tensor(extractor(singing.sing(rng, f0, voiced), singing.SYNTH_RATE))[None]
        hist = pitch_histogram(track, torch.tensor([track.shape[1]]))[0].numpy()
        # Circular mean of the histogram over one semitone (10 bins): 0 cents on the 12-tone grid.
        angle = np.angle(np.sum(hist * np.exp(2j * np.pi * bins / 10)))
        return abs(angle) / (2 * np.pi) * 100

    clean = [off_grid_cents("clean", 0.0, i) for i in range(12)]
    detuned = [off_grid_cents("detune", 45.0, i) for i in range(12)]
    assert np.median(clean) < 15 and np.median(detuned) > 30
    assert np.mean([d > c for d in detuned for c in clean]) > 0.85


def test_lyrics_and_melody_follow_their_own_degradations(synthetic_root):
    from sqa.data.synthetic import DIMENSION_BATCHES, PITCH_KINDS, SPECTRAL_KINDS

    corpus = load_synthetic(synthetic_root, seed=0)
    sys_info = json.loads((synthetic_root / "info" / "sys_info.json").read_text())
    for clip in corpus.clips:
        assert set(clip.extra_scores) == ({"lyrics", "melody"} if clip.domain in DIMENSION_BATCHES else set())
    labelled = [c for c in corpus.clips if c.extra_scores]
    kind = {c.sample_id: sys_info[c.system_id]["type"] for c in labelled}

    def mean(dim, kinds):
        return np.mean([c.extra_scores[dim] for c in labelled if kind[c.sample_id] in kinds])

    # Pitch errors cost melody, spectral damage costs lyrics, each far more than the other.
    assert mean("melody", PITCH_KINDS) < mean("lyrics", PITCH_KINDS) - 1.0
    assert mean("lyrics", SPECTRAL_KINDS) < mean("melody", SPECTRAL_KINDS) - 1.0


def test_judges_come_from_a_pool_per_batch_with_their_own_leniency(synthetic_root):
    corpus = load_synthetic(synthetic_root, seed=0)
    deviations: dict[str, list[float]] = {}
    for clip in corpus.clips:
        assert len(clip.ratings) == 5 and all(j.startswith(clip.domain) for j in clip.ratings)
        assert np.mean(list(clip.ratings.values())) == pytest.approx(clip.mos)
        for judge, rating in clip.ratings.items():
            deviations.setdefault(judge, []).append(rating - clip.mos)
    assert 40 <= len(deviations) <= 60
    biases = [np.mean(v) for v in deviations.values()]
    assert max(biases) - min(biases) > 0.5


def test_lengths_clip_counts_and_set_sizes_reach_every_code_path(synthetic_root):
    from hydra import compose, initialize_config_dir

    from tests.conftest import REPO

    # The default run's crop length, as `data=synthetic` composes it (with the shared base).
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        max_train_seconds = compose("train").data.max_train_seconds
    corpus = load_synthetic(synthetic_root, seed=0)
    seconds = {c.sample_id: sf.info(str(c.path)).duration for c in corpus.clips}
    assert min(seconds.values()) < 1.5 and max(seconds.values()) > 12
    # A few training clips longer than the training crop (few: they cost the most per step),
    # and long test clips, scored whole.
    long_train = [c for c in corpus.split("train") if seconds[c.sample_id] > max_train_seconds]
    assert 3 <= len(long_train) <= 8
    assert any(seconds[c.sample_id] > max_train_seconds for c in corpus.split("test"))
    # Unequal clips per system, so clip-weighted and system-weighted averages differ.
    clips_per_set, systems_per_set = {}, {}
    for name, clips in corpus.test_sets().items():
        per_system: dict[str, int] = {}
        for c in clips:
            per_system[c.system_id] = per_system.get(c.system_id, 0) + 1
        assert len(set(per_system.values())) > 1, name
        clips_per_set[name], systems_per_set[name] = len(clips), len(per_system)
    assert len(set(systems_per_set.values())) > 1
    assert len({clips_per_set[n] / systems_per_set[n] for n in clips_per_set}) == len(clips_per_set)
