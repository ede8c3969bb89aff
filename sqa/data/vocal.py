"""Vocal activity: which 20 ms frames of a waveform hold singing, by energy and voicing.

A frame is *active* when its level (RMS, dBFS) is at least `FLOOR_DB` (so digital silence, dither
and a -60 dBFS noise floor never count) and at most `RELATIVE_DB` below the clip's loud frames
(the `LOUD_PERCENTILE`th percentile of the levels of its frames above the floor). It is *voiced*
when its normalised cross-correlation (NCCF, as RAPT computes it) peaks at `VOICING` or more at a
period of an f0 in `F0_RANGE`, looked for only past the first lag where it falls below zero, so
that low-pass noise (whose correlation decays slowly from lag 0) is not taken for a pitch. A
frame is *vocal* when it is both. The vocal span of a clip runs from its first vocal frame to its
last, widened by up to `ONSET_SECONDS` of active frames on either side (an unvoiced consonant or
breath that starts a phrase, a decay that ends it), never into inactive ones: silence around a
clip is never part of its span, whatever its length. Voicing is measured on the waveform with its
DC offset removed (`without_dc`): an offset correlates at every lag, so the NCCF never falls
below zero and a sung note with an offset would read as unpitched. Levels are the waveform's as
it is (an offset is energy in the file: a frame of offset alone is active, never voiced).
Everything here is numpy on a mono waveform.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# The frame period: the 20 ms hop of the SSL backbones' frames (320 samples at 16 kHz).
FRAME_SECONDS = 0.02
# The absolute floor: frames quieter than this are never vocal, however quiet the clip (dBFS RMS).
FLOOR_DB = -50.0
# The relative threshold: frames more than this far below the clip's loud frames are not vocal (dB).
RELATIVE_DB = 30.0
# The clip's loud frames' level: this percentile of its frame levels above the floor.
LOUD_PERCENTILE = 90.0
# The voicing threshold on the NCCF peak: a periodic signal mixed with white noise peaks at about
# its share of the power, so 0.4 holds singing down to about -2 dB SNR and refuses noise (< 0.2).
VOICING = 0.4
# The f0 range looked for (Hz): bass to soprano fundamentals with margin.
F0_RANGE = (60.0, 1200.0)
# The NCCF window (seconds): two frames, so the lowest f0's period fits more than twice.
VOICING_WINDOW_SECONDS = 0.04
# How far the span may reach beyond the first and last vocal frame into active, unvoiced frames.
ONSET_SECONDS = 0.2
# Frames analysed at once: bounds the NCCF's memory on long songs (about 16 MB a block at 16 kHz).
_BLOCK = 2048


@dataclass(frozen=True)
class VocalActivity:
    """Per-frame levels (F,) in dBFS, voicing (F,) NCCF peaks and the active, voiced and vocal masks."""

    hop: int
    level_db: np.ndarray
    voicing: np.ndarray
    active: np.ndarray
    voiced: np.ndarray

    @property
    def vocal(self) -> np.ndarray:
        """Frames (F,) that are both active and voiced."""
        return self.active & self.voiced

    def span(self, samples: int) -> tuple[int, int] | None:
        """The vocal span [start, stop) in samples of a clip of `samples`, or None if no frame is vocal."""
        vocal = np.flatnonzero(self.vocal)
        if vocal.size == 0:
            return None
        reach = round(ONSET_SECONDS / FRAME_SECONDS)
        first, last = int(vocal[0]), int(vocal[-1])
        # Widened through active frames only, so silence or a noise floor around the clip stays out.
        lo = first
        while lo > 0 and first - lo < reach and self.active[lo - 1]:
            lo -= 1
        hi = last
        while hi + 1 < self.active.size and hi - last < reach and self.active[hi + 1]:
            hi += 1
        return lo * self.hop, min(samples, (hi + 1) * self.hop)

    def reason(self) -> str:
        """Why no frame is vocal (meaningful only when `span` is None)."""
        above = int((self.level_db >= FLOOR_DB).sum())
        if above == 0:
            return (
                f"no vocal activity: every 20 ms frame is below {FLOOR_DB:g} dBFS (silence or a noise floor)"
            )
        return (
            f"no vocal activity: none of the {above} frame(s) above {FLOOR_DB:g} dBFS is voiced (an NCCF "
            f"peak of {VOICING:g} at an f0 of {F0_RANGE[0]:g}-{F0_RANGE[1]:g} Hz): noise or unpitched sound"
        )


def frame_levels(wav: np.ndarray, hop: int) -> np.ndarray:
    """RMS level in dBFS (-inf: digital silence) of each `hop`-sample frame of wav (N,) -> (ceil(N/hop),)."""
    frames = -(-wav.shape[0] // hop)
    padded = np.zeros(frames * hop, dtype=np.float64)
    padded[: wav.shape[0]] = wav
    power = np.square(padded).reshape(frames, hop).mean(axis=1)
    with np.errstate(divide="ignore"):
        return 10.0 * np.log10(power)


def frame_voicing(wav: np.ndarray, sample_rate: int, hop: int) -> np.ndarray:
    """NCCF peak (F,) in [0, 1] at an f0 in F0_RANGE of each frame's 40 ms window around it (0: silent)."""
    window = round(VOICING_WINDOW_SECONDS * sample_rate)
    min_lag = max(1, int(sample_rate / F0_RANGE[1]))
    max_lag = int(np.ceil(sample_rate / F0_RANGE[0]))
    frames = -(-wav.shape[0] // hop)
    # Each window is centred on its frame; zero outside the clip, so a clip alone and the same
    # clip within digital silence agree.
    before = max(0, (window - hop) // 2)
    padded = np.zeros(before + (frames - 1) * hop + window + max_lag, dtype=np.float64)
    padded[before : before + wav.shape[0]] = wav
    size = 1 << int(np.ceil(np.log2(2 * window + max_lag)))
    out = np.zeros(frames, dtype=np.float64)
    for start in range(0, frames, _BLOCK):
        index = np.arange(start, min(frames, start + _BLOCK))[:, None] * hop
        reach = padded[index + np.arange(window + max_lag)]  # (B, W + L): each frame and its lags
        head = reach[:, :window]
        # sum_n x[n] x[n + lag] for lags 0..max_lag, by FFT cross-correlation.
        spectrum = np.conj(np.fft.rfft(head, size)) * np.fft.rfft(reach, size)
        cross = np.fft.irfft(spectrum, size)[:, : max_lag + 1]
        energy = np.concatenate([np.zeros((reach.shape[0], 1)), np.cumsum(reach**2, axis=1)], axis=1)
        lagged = energy[:, window : window + max_lag + 1] - energy[:, : max_lag + 1]
        scale = np.sqrt(energy[:, window : window + 1] * lagged)
        with np.errstate(divide="ignore", invalid="ignore"):
            nccf = np.where(scale > 1e-12, cross / scale, 0.0)
        # Only past the first fall below zero: the lag-0 lobe of low-pass noise is no period.
        below = nccf < 0
        crossed = np.where(below.any(axis=1), below.argmax(axis=1), max_lag + 1)
        lags = np.arange(max_lag + 1)
        allowed = (lags >= min_lag) & (lags >= crossed[:, None])
        out[start : start + reach.shape[0]] = np.where(allowed, nccf, -1.0).max(axis=1).clip(min=0.0)
    return out


def without_dc(wav: np.ndarray, above: np.ndarray, hop: int) -> np.ndarray:
    """The waveform (N,) (float64) less its DC offset: the mean of its samples in frames above the floor.

    `above` (F,) marks the `hop`-sample frames at or above FLOOR_DB. Digital silence around a clip
    is left out of the mean, so padding a clip with it, however long, leaves the offset as it was.
    A constant is removed, not a filtered band: a high-pass would shape the rumble of low-pass
    noise into a resonance that reads as a pitch.
    """
    wav = np.asarray(wav, dtype=np.float64)
    inside = np.repeat(above, hop)[: wav.shape[0]]
    return wav - float(wav[inside].mean()) if inside.any() else wav


def vocal_activity(wav: np.ndarray, sample_rate: int) -> VocalActivity:
    """Levels, voicing and masks of the 20 ms frames of a mono waveform (N,) at `sample_rate`."""
    hop = max(1, round(FRAME_SECONDS * sample_rate))
    level = frame_levels(wav, hop)
    above = level >= FLOOR_DB
    active = above.copy()
    if above.any():
        # The loud frames are taken among frames above the floor, so padding a clip with silence
        # or a noise floor, however long, leaves its threshold (and its span) as it was.
        loud = float(np.percentile(level[above], LOUD_PERCENTILE))
        active &= level >= loud - RELATIVE_DB
    voicing = frame_voicing(without_dc(wav, above, hop), sample_rate, hop)
    return VocalActivity(hop, level, voicing, active, voicing >= VOICING)


def vocal_part(wav: np.ndarray, sample_rate: int) -> tuple[np.ndarray | None, str | None]:
    """`wav` (N,) cut to its vocal span (n,), or (None, why) when no frame of it is vocal."""
    activity = vocal_activity(wav, sample_rate)
    span = activity.span(wav.shape[0])
    if span is None:
        return None, activity.reason()
    return wav[span[0] : span[1]], None
