"""The vocal-activity gate's thresholds, each on both sides: floor, relative level, voicing, onset reach."""

from __future__ import annotations

import numpy as np
import pytest

from sqa.data.vocal import (
    FLOOR_DB,
    ONSET_SECONDS,
    RELATIVE_DB,
    VOICING,
    frame_levels,
    vocal_activity,
    vocal_part,
)

RATE = 16000


def tone(seconds: float, db: float, f0: float = 220.0) -> np.ndarray:
    """A sine (N,) of RMS level `db` dBFS."""
    t = np.arange(int(seconds * RATE)) / RATE
    return (np.sqrt(2) * 10 ** (db / 20) * np.sin(2 * np.pi * f0 * t)).astype(np.float32)


def noise(seconds: float, db: float, seed: int = 0) -> np.ndarray:
    """White noise (N,) of RMS level `db` dBFS."""
    return (10 ** (db / 20) * np.random.default_rng(seed).standard_normal(int(seconds * RATE))).astype(
        np.float32
    )


def test_frame_levels_are_rms_dbfs_per_20_ms():
    # 250 Hz: five periods a frame, so every full frame holds the tone's RMS exactly.
    levels = frame_levels(np.concatenate([tone(0.1, -20.0, f0=250.0), np.zeros(330, np.float32)]), 320)
    assert levels.shape == (7,)  # 1930 samples: the last frame zero-padded
    np.testing.assert_allclose(levels[:5], -20.0, atol=1e-3)
    assert levels[-1] == -np.inf


@pytest.mark.parametrize("offset, vocal", [(2.0, True), (-2.0, False)])
def test_the_absolute_floor(offset, vocal):
    activity = vocal_activity(tone(0.5, FLOOR_DB + offset), RATE)
    assert bool(activity.vocal.all()) is vocal and bool(activity.vocal.any()) is vocal
    if not vocal:
        assert activity.span(8000) is None and "below -50 dBFS" in activity.reason()


@pytest.mark.parametrize("offset, vocal", [(-2.0, True), (2.0, False)])
def test_the_level_relative_to_the_clips_loud_frames(offset, vocal):
    # 2 s loud, then 0.5 s `RELATIVE_DB + offset` dB quieter (still above the floor).
    quiet = tone(0.5, -10.0 - RELATIVE_DB - offset, f0=330.0)
    activity = vocal_activity(np.concatenate([tone(2.0, -10.0), quiet]), RATE)
    assert activity.vocal[:99].all()
    assert bool(activity.active[105:].all()) is vocal and bool(activity.active[105:].any()) is vocal


@pytest.mark.parametrize("snr, voiced", [(1.0, True), (-5.0, False)])
def test_voicing_of_a_tone_in_white_noise(snr, voiced):
    # The NCCF peak of a periodic signal in white noise is about its share of the power.
    share = 1 / (1 + 10 ** (-snr / 10))
    assert (share > VOICING) is voiced
    mix = tone(1.0, -20.0) + noise(1.0, -20.0 - snr)
    activity = vocal_activity(mix, RATE)
    assert activity.active.all()
    assert np.median(activity.voicing) == pytest.approx(share, abs=0.06)
    assert np.mean(activity.voiced) > 0.9 if voiced else np.mean(activity.voiced) < 0.1


def test_noise_is_active_but_not_vocal_even_low_pass():
    white = noise(1.0, -20.0)
    brown = np.cumsum(noise(1.0, 0.0, seed=1))
    brown = (0.1 * brown / brown.std()).astype(np.float32)
    for sound in (white, brown):
        activity = vocal_activity(sound, RATE)
        assert activity.active.all() and not activity.vocal.any()
        assert activity.span(sound.size) is None and "none of the 50 frame(s)" in activity.reason()


def test_the_span_reaches_into_unvoiced_active_frames_up_to_the_onset_limit_never_into_silence():
    reach = round(ONSET_SECONDS / 0.02)
    for lead_frames in (reach - 2, reach + 5):
        lead = noise(lead_frames * 0.02, -25.0)  # a breath or consonant: active, unvoiced
        wav = np.concatenate(
            [np.zeros(16000, np.float32), lead, tone(1.0, -15.0), np.zeros(8000, np.float32)]
        )
        start, stop = vocal_activity(wav, RATE).span(wav.size)
        # Voicing windows are 40 ms around a frame and reach a period further: a frame or two of
        # the lead next to the tone is voiced.
        assert 0 <= (16000 + max(0, lead_frames - reach) * 320) - start <= 2 * 320
        assert stop == 16000 + lead.size + 16000


def test_a_dataset_with_vocal_only_cuts_each_clip_to_its_vocal_span_and_keeps_a_silent_one_whole(tmp_path):
    """Training and evaluation read clips as scoring trims them (sqa.data.vocal.vocal_part)."""
    import soundfile as sf

    from sqa.data.corpus import Clip, Corpus
    from sqa.data.dataset import ClipDataset

    song = np.concatenate([np.zeros(16000), tone(1.0, -20.0), np.zeros(8000)]).astype(np.float32)
    silent = np.zeros(16000, dtype=np.float32)
    clips = []
    for name, wav in (("song", song), ("silent", silent)):
        sf.write(tmp_path / f"{name}.wav", wav, 16000, subtype="FLOAT")
        clips.append(Clip(name, tmp_path / f"{name}.wav", 3.0, "s", "d", "train"))
    corpus = Corpus(clips, ["d"])
    cut = ClipDataset(clips, corpus, 16000, vocal_only=True)
    whole = ClipDataset(clips, corpus, 16000)
    part, _ = vocal_part(song, 16000)
    assert part.size < song.size - 16000
    np.testing.assert_array_equal(cut[0]["wav"].numpy(), part)
    np.testing.assert_array_equal(whole[0]["wav"].numpy(), song)
    np.testing.assert_array_equal(cut[1]["wav"].numpy(), silent)
    assert vocal_part(silent, 16000) == (None, vocal_activity(silent, 16000).reason())
