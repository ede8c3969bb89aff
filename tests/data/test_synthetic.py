import json

import numpy as np
import pytest
import soundfile as sf
from scipy import stats

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


SMALL = {"seed": 7, "clips_per_system": 4, "systems_per_batch": (6, 6, 5, 4, 4)}


@pytest.fixture(scope="module")
def plain_and_options(tmp_path_factory):
    """The same small corpus generated plainly and with per-recipe rater noise and shared songs."""
    root = tmp_path_factory.mktemp("options")
    plain = generate(root / "plain", **SMALL)
    rich = generate(root / "rich", **SMALL, rater_spread=(0.2, 1.0), songs=True)
    return plain, rich


def test_rater_noise_differs_by_recipe_is_recorded_and_shows_in_the_ratings(plain_and_options):
    plain, rich = plain_and_options
    info = json.loads((rich / "info" / "sys_info.json").read_text())
    plain_info = json.loads((plain / "info" / "sys_info.json").read_text())
    assert all("rater_spread" not in v for v in plain_info.values())
    by_recipe: dict[str, set[float]] = {}
    for entry in info.values():
        assert 0.2 <= entry["rater_spread"] <= 1.0
        by_recipe.setdefault(entry["model"], set()).add(entry["rater_spread"])
    # One noise per recipe: a recipe's systems in different batches share it.
    assert all(len(v) == 1 for v in by_recipe.values())
    assert len({next(iter(v)) for v in by_recipe.values()}) == len(by_recipe) > 5
    # The within-clip SD of a system's ratings follows its recorded noise.
    scores = json.loads((rich / "info" / "score.json").read_text())["utterance"]
    observed: dict[str, list[float]] = {}
    for entry in scores.values():
        observed.setdefault(entry["sys_id"], []).append(float(np.std(entry["score"]["scores"], ddof=1)))
    systems = sorted(observed)
    true_sd = [info[s]["rater_spread"] for s in systems]
    assert stats.spearmanr(true_sd, [np.mean(observed[s]) for s in systems])[0] > 0.6


def test_shared_songs_have_one_melody_per_batch_position_and_options_keep_the_audio_of_unsung_ones(
    plain_and_options,
):
    plain, rich = plain_and_options
    utterances = json.loads((rich / "info" / "score.json").read_text())["utterance"]
    corpus = load_synthetic(rich, **SMALL, rater_spread=(0.2, 1.0), songs=True)
    by_song: dict[str, list] = {}
    for clip in corpus.clips:
        assert clip.song == utterances[clip.sample_id].get("song")
        if clip.song is not None:
            by_song.setdefault(clip.song, []).append(clip)
    # Systems have 0.6-1.4 times 4 clips: the first songs of a batch are sung by all its systems.
    shared = {song: clips for song, clips in by_song.items() if len(clips) >= 2}
    assert len(shared) >= 3 * len(BATCHES)
    durations = {}
    for song, clips in shared.items():
        assert len({c.system_id for c in clips}) == len(clips)
        assert len({c.domain for c in clips}) == 1 and song.startswith(clips[0].domain)
        seconds = [sf.info(str(c.path)).duration for c in clips]
        # The melody sets a clip's length: one song, one length (to a sample of the slowest rate).
        assert max(seconds) - min(seconds) < 1e-4
        durations[song] = seconds[0]
    assert len(set(np.round(list(durations.values()), 3))) > len(durations) // 2
    # A corpus without songs has none; the rater noise option alone leaves the audio unchanged.
    assert all(c.song is None for c in load_synthetic(plain, **SMALL).clips)


def test_rater_noise_alone_changes_ratings_but_not_audio(tmp_path, plain_and_options):
    plain, _ = plain_and_options
    noisy = generate(tmp_path / "noisy", **SMALL, rater_spread=(0.2, 1.0))
    wavs = sorted(p.name for p in (plain / "wav").iterdir())
    assert wavs == sorted(p.name for p in (noisy / "wav").iterdir())
    assert all((plain / "wav" / n).read_bytes() == (noisy / "wav" / n).read_bytes() for n in wavs[::7])
    plain_mos = json.loads((plain / "info" / "score.json").read_text())["utterance"]
    noisy_mos = json.loads((noisy / "info" / "score.json").read_text())["utterance"]
    changed = sum(plain_mos[k]["score"]["mos"] != noisy_mos[k]["score"]["mos"] for k in plain_mos)
    assert changed > len(plain_mos) // 3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"songs": False, "rater_spread": (0.2, 1.0)}, "songs=False"),
        ({"songs": True, "rater_spread": (0.5, 0.5)}, "rater_spread=\\[0.5, 0.5\\]"),
    ],
)
def test_a_corpus_is_reused_only_with_the_options_it_was_made_with(plain_and_options, kwargs, message):
    _, rich = plain_and_options
    with pytest.raises(CorpusError, match=f"different corpus.*{message}"):
        load_synthetic(rich, **SMALL, **kwargs)


@pytest.mark.parametrize("spread", [(0.0, 1.0), (1.0, 0.5), (0.3,), (0.2, float("nan"))])
def test_a_rater_spread_that_is_not_a_positive_range_is_refused(tmp_path, spread):
    with pytest.raises(CorpusError, match="rater_spread must be"):
        load_synthetic(tmp_path / "never", **SMALL, rater_spread=spread)
    assert not (tmp_path / "never").exists()
