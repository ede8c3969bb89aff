"""The vocal-activity gate's thresholds, each on both sides: floor, relative level, voicing, onset reach."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import sqa.data.vocal as vocal
from sqa.data.vocal import (
    F0_RANGE,
    FLOOR_DB,
    FRAME_SECONDS,
    ONSET_SECONDS,
    RELATIVE_DB,
    VOICING,
    VOICING_WINDOW_SECONDS,
    VocalActivity,
    frame_levels,
    frame_voicing,
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
        assert f"an f0 of {F0_RANGE[0]:g}-{F0_RANGE[1]:g} Hz" in activity.reason()


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


def constant_power(seconds: float, db: float, below: bool = False, seed: int = 0) -> np.ndarray:
    """Random-sign samples (N,) of one magnitude: every frame at `db` dBFS (just under it if `below`)."""
    # All squares are equal, so a frame's mean square is 10^(db/10) to the last bit (at these levels),
    # which puts a frame exactly on a threshold; 1e-7 less in amplitude puts it just under.
    magnitude = np.sqrt(10 ** (db / 10)) * (1 - 1e-7 if below else 1.0)
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], int(seconds * RATE))
    return magnitude * signs


@pytest.mark.parametrize("below", [False, True])
def test_a_frame_exactly_at_the_floor_is_above_it(below):
    wav = constant_power(0.1, FLOOR_DB, below)
    activity = vocal_activity(wav, RATE)
    levels = activity.level_db
    assert bool((levels < FLOOR_DB).all()) if below else bool((levels == FLOOR_DB).all())
    assert bool(activity.active.all()) is not below and bool(activity.active.any()) is not below
    # Random signs are white noise: never voiced, so the reason names the frames above the floor.
    assert activity.span(wav.size) is None
    expected = "every 20 ms frame is below" if below else "none of the 5 frame(s) above -50 dBFS is voiced"
    assert expected in activity.reason()


@pytest.mark.parametrize(
    "loud_db, quiet_db",
    [
        (-10.0, -10.0 - RELATIVE_DB),  # the relative threshold decides: the floor is far below
        (-25.0, FLOOR_DB),  # the floor decides: the relative threshold (-55 dBFS) is below it
    ],
)
@pytest.mark.parametrize("below", [False, True])
def test_a_frame_is_active_at_the_higher_of_floor_and_relative_threshold_inclusive(loud_db, quiet_db, below):
    # 10 loud frames, then 5 quiet ones: the 90th percentile of the levels is the loud level.
    wav = np.concatenate([constant_power(0.2, loud_db), constant_power(0.1, quiet_db, below, seed=1)])
    activity = vocal_activity(wav, RATE)
    assert (activity.level_db[:10] == loud_db).all()
    assert (activity.level_db[10:] < quiet_db).all() if below else (activity.level_db[10:] == quiet_db).all()
    assert activity.active[:10].all()
    assert bool(activity.active[10:].all()) is not below and bool(activity.active[10:].any()) is not below


def test_a_frame_whose_nccf_peak_is_exactly_the_voicing_threshold_is_voiced(monkeypatch):
    # No sound is built to an NCCF peak of exactly VOICING, so the peaks are given: at it, and one
    # float below it.
    peaks = np.array([VOICING, np.nextafter(VOICING, 0.0), 1.0, 0.0])
    monkeypatch.setattr(vocal, "frame_voicing", lambda wav, sample_rate, hop: peaks)
    activity = vocal_activity(tone(0.08, -20.0), RATE)
    assert activity.voiced.tolist() == [True, False, True, False]
    assert activity.vocal.tolist() == [True, False, True, False]


@pytest.mark.parametrize("sample_rate, hop", [(20, 1), (50, 1), (74, 1), (76, 2), (16000, 320), (22050, 441)])
def test_frames_are_20_ms_rounded_to_whole_samples_and_never_empty(sample_rate, hop):
    # 0.02 s is 0.4 samples at 20 Hz, 1.48 at 74 Hz and 1.52 at 76 Hz.
    wav = np.random.default_rng(0).standard_normal(round(3.7 * hop)) * 0.1
    activity = vocal_activity(wav, sample_rate)
    assert activity.hop == hop and activity.level_db.shape == activity.voicing.shape == (4,)


@pytest.mark.parametrize(
    "lag, voiced",
    [(20, True), (19, False), (400, True), (401, False)],
)
def test_the_periods_looked_for_run_from_the_highest_f0s_to_the_lowest_f0s_inclusive(lag, voiced):
    # At 24 kHz the f0 range's ends have whole periods: 1200 Hz is 20 samples, 60 Hz is 400. White
    # noise plus itself `lag` samples later correlates at that lag only (NCCF about 1/2) and not at
    # its multiples, so its NCCF peak is about 0.5 if the lag is looked for and noise (< 0.2) if not.
    rate = 24000
    assert (rate / F0_RANGE[1], rate / F0_RANGE[0]) == (20, 400)
    white = np.random.default_rng(2).standard_normal(int(0.3 * rate) + lag)
    peaks = frame_voicing(white[lag:] + white[:-lag], rate, rate // 50)
    if voiced:
        assert np.median(peaks) == pytest.approx(0.5, abs=0.06) and (peaks[1:-1] >= VOICING).all()
    else:
        assert peaks.max() < 0.25


def nccf_peaks(wav: np.ndarray, sample_rate: int, hop: int) -> np.ndarray:
    """Each frame's voicing (F,) computed from its definition with plain sums, one frame and lag at a time."""
    window = round(VOICING_WINDOW_SECONDS * sample_rate)
    shortest, longest = sample_rate / F0_RANGE[1], sample_rate / F0_RANGE[0]
    assert shortest.is_integer() and longest.is_integer()  # no period to round at this rate
    lags = np.arange(int(longest) + 1)
    frames = -(-wav.size // hop)
    # Centred: the window starts half its excess over the frame before the frame; zeros off the clip.
    lead = (window - hop) // 2
    x = np.concatenate([np.zeros(lead), wav, np.zeros(frames * hop + window + lags[-1])])
    out = np.zeros(frames)
    for frame in range(frames):
        head = x[frame * hop : frame * hop + window]
        nccf = np.zeros(lags.size)
        for lag in lags:
            shifted = x[frame * hop + lag : frame * hop + lag + window]
            norm = np.sqrt(np.sum(head**2) * np.sum(shifted**2))
            nccf[lag] = np.sum(head * shifted) / norm if norm > 0 else 0.0  # silence: no correlation
        negative = np.flatnonzero(nccf < 0)
        if negative.size:  # never below zero (low-pass, a DC offset, silence): no period, 0
            out[frame] = max(0.0, nccf[lags >= max(shortest, negative[0])].max())
    return out


@pytest.mark.parametrize("block", [None, 4])
def test_frame_voicing_is_the_nccf_peak_of_each_frames_centred_window(block, monkeypatch):
    # 12 kHz: 240-sample frames, 480-sample windows and f0 periods of 10 to 200 samples, all whole.
    rate, hop = 12000, 240
    if block is not None:
        # Long songs are analysed a block of frames at a time: the blocks must not show.
        monkeypatch.setattr(vocal, "_BLOCK", block)
    rng = np.random.default_rng(3)
    t, u = np.arange(3000) / rate, np.arange(2450) / rate
    wav = np.concatenate(
        [
            np.zeros(1200),  # digital silence
            0.1 * np.sin(2 * np.pi * 200 * t) + 0.02 * rng.standard_normal(3000),  # ends mid-frame
            np.full(1800, 0.05),  # a DC offset: correlates at every lag, never a period
            0.05 * rng.standard_normal(1920),  # noise that stops on a frame boundary, then silence
            np.zeros(1200),
            0.1 * np.sin(2 * np.pi * (150 * u + 200 * u**2)) * np.hanning(u.size),  # a glide, a partial frame
        ]
    )
    expected = nccf_peaks(wav, rate, hop)
    # The reference sees what it should: silence, the offset and noise unvoiced, the tones voiced.
    assert (expected[:4] == 0).all() and (expected[6:16] > 0.9).all() and (expected[18:25] == 0).all()
    assert (expected[25:33] < 0.2).all() and (expected[34:37] == 0).all() and (expected[37:] > 0.9).all()
    np.testing.assert_allclose(frame_voicing(wav, rate, hop), expected, rtol=0, atol=1e-9)


def test_silence_and_a_sound_that_stops_inside_a_window_raise_no_numpy_warnings():
    # Silent frames have no level (log of 0) and no correlation (0 / 0, or x / 0 where a window
    # holds only the end of the sound): both are defined outcomes, not numerical accidents.
    wav = np.concatenate([np.zeros(3200), noise(0.2, -20.0), np.zeros(3200)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        activity = vocal_activity(wav, RATE)
    assert activity.level_db[0] == -np.inf and activity.voicing[0] == 0.0


def activity_of(frames: str, hop: int = 10) -> VocalActivity:
    """Masks from a frame map: '-' inactive, 'a' active and unvoiced, 'V' vocal, 'v' voiced, inactive."""
    active = np.array([c in "aV" for c in frames])
    voiced = np.array([c in "Vv" for c in frames])
    return VocalActivity(hop, np.where(active, -20.0, -80.0), voiced * 1.0, active, voiced)


REACH = round(ONSET_SECONDS / FRAME_SECONDS)  # 10 frames
SPANS = [
    # (frames, the expected span [start, stop) in frames of 10 samples, worked out by hand)
    ("----aaaVaaa----", (4, 11)),  # widened to the active frames on both sides
    ("---" + "a" * REACH + "V" + "a" * REACH + "---", (3, 3 + 2 * REACH + 1)),  # the reach, whole
    ("---" + "a" * (REACH + 3) + "V" + "a" * (REACH + 3), (6, 6 + 2 * REACH + 1)),  # and no further
    ("aV---V---Va", (0, 11)),  # from the first vocal frame to the last, gaps included
    ("aaV--", (0, 3)),  # up to the clip's first frame
    ("Va---a", (0, 2)),  # a vocal first frame: nothing before it, the last frame is not before it
    ("---Vaaa", (3, 7)),  # up to the clip's last frame
    ("-a-Vaa--", (3, 6)),  # an inactive frame stops the widening, even if one beyond is active
    ("---V-a--", (3, 4)),  # the frame after the vocal one is inactive: the one beyond is not reached
    ("v--aVa-v", (3, 6)),  # voiced but inactive frames are neither vocal nor reached into
]


@pytest.mark.parametrize("frames, expected", SPANS)
def test_the_span_from_first_to_last_vocal_frame_widened_through_active_frames(frames, expected):
    assert activity_of(frames).span(len(frames) * 10) == (expected[0] * 10, expected[1] * 10)


def test_the_span_ends_at_the_clips_end_in_a_partial_last_frame_and_is_none_without_a_vocal_frame():
    assert activity_of("a--aVa").span(57) == (30, 57)
    assert activity_of("v-aa-v").span(60) is None


def sung(seconds: float, db: float) -> np.ndarray:
    """A voice-like note (N,) of RMS level `db` dBFS: 220 Hz with vibrato and 19 harmonics falling as 1/k."""
    t = np.arange(int(seconds * RATE)) / RATE
    phase = 2 * np.pi * np.cumsum(220.0 * (1 + 0.01 * np.sin(2 * np.pi * 5.5 * t))) / RATE
    source = sum(np.sin(k * phase) / k for k in range(1, 20))
    return source / np.sqrt(np.mean(source**2)) * 10 ** (db / 20)


@pytest.mark.parametrize("db, dc", [(-10.0, 0.3), (-20.0, 0.05)])
def test_a_voice_with_a_dc_offset_is_as_voiced_as_without_it(db, dc):
    # A sung note between stretches of silence, then the whole recording shifted by a DC offset.
    voice = np.concatenate([np.zeros(4800), sung(1.0, db), np.zeros(4800)])
    plain, offset = vocal_activity(voice, RATE), vocal_activity(voice + dc, RATE)
    assert plain.vocal[15:65].all()
    np.testing.assert_allclose(offset.voicing[15:65], plain.voicing[15:65], atol=1e-4)
    assert offset.vocal[15:65].all()
    part, reason = vocal_part(voice + dc, RATE)
    assert reason is None and part.size >= 16000
    # Digital silence around the shifted recording leaves its offset (and its voicing) as it was.
    padded = np.concatenate([np.zeros(32000), voice + dc, np.zeros(32000)])
    np.testing.assert_allclose(
        vocal_activity(padded, RATE).voicing[115:165], offset.voicing[15:65], atol=1e-9
    )


def test_an_offset_of_0_3_hides_a_minus_10_dbfs_voice_from_the_raw_nccf():
    # Why the offset is removed: measured on the shifted waveform itself, no frame is voiced.
    voice = sung(1.0, -10.0) + 0.3
    assert not (frame_voicing(voice, RATE, 320) >= VOICING).any()
    assert (vocal_activity(voice, RATE).voicing >= VOICING).all()


def test_the_offset_removed_is_the_mean_over_frames_above_the_floor_only():
    wav = np.concatenate([np.zeros(640), np.full(640, 0.5), np.full(640, 0.1)])
    above = np.array([False, False, True, True, True, True])
    np.testing.assert_allclose(vocal.without_dc(wav, above, 320)[640:], [0.2] * 640 + [-0.2] * 640)
    assert (vocal.without_dc(wav, np.zeros(6, bool), 320) == wav).all()


def test_a_noise_floor_just_below_the_floor_around_a_clip_leaves_its_span_as_it_was():
    # A quiet voiced lead (35 dB below the loud note: inactive) before a loud note. Padded with a
    # -53 dBFS noise floor (not digital silence) ten times its length, the loud frames' level is
    # still taken over the frames above -50 dBFS only, so the lead stays out of the span; taken
    # over every non-silent frame, it would be the noise floor's, and the lead would join.
    clip = np.concatenate([tone(0.5, -45.0), tone(1.0, -10.0)])
    alone = vocal_activity(clip, RATE).span(clip.size)
    assert alone is not None and alone[0] >= 0.5 * RATE - 320 and alone[1] == clip.size
    pad = 10 * RATE
    floor = noise(2 * pad / RATE, FLOOR_DB - 3.0, seed=1)
    assert frame_levels(floor, 320).max() < FLOOR_DB  # every frame of the padding is below the floor
    padded = np.concatenate([floor[:pad], clip, floor[pad:]])
    start, stop = vocal_activity(padded, RATE).span(padded.size)
    assert (start - pad, stop - pad) == alone
    # The same with digital silence around it.
    silent = np.concatenate([np.zeros(pad, np.float32), clip, np.zeros(pad, np.float32)])
    assert vocal_activity(silent, RATE).span(silent.size) == (alone[0] + pad, alone[1] + pad)
