"""Sung phrases and the degradations of the synthetic corpus's systems (`sqa.data.synthetic`).

A phrase is a harmonic voice source with vibrato, vowel formants, note glides and breath gaps,
sung along a random melody; a system's recipe degrades it spectrally (noise, band limit, bit
depth, applied by `degrade`) or in pitch (detune, drift, jitter, off-key notes, sung by `melody`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import signal

# Voices are synthesised at 16 kHz with harmonics up to 7 kHz, then resampled to the system's rate.
SYNTH_RATE = 16000
VOICE_BAND = 7000.0
# Vibrato depth range (semitones) of the sung phrases. At 10-30 cents a whole-phrase detune stays
# visible in the octave-folded pitch histogram (its circular mean moves off the 12-tone grid); at
# 30-60 cents the vibrato's own peaks hide it.
VIBRATO_SEMITONES = (0.1, 0.3)

# Vowel formant frequencies (Hz) and bandwidths: a, e, i, o, u.
VOWELS = (
    ((800, 1200, 2500), (80, 90, 120)),
    ((500, 1800, 2500), (60, 100, 120)),
    ((300, 2300, 3000), (50, 100, 120)),
    ((500, 900, 2400), (60, 80, 120)),
    ((320, 800, 2300), (50, 80, 120)),
)


@dataclass(frozen=True)
class SystemRecipe:
    """A degradation applied to every clip of a system, and the quality it leaves."""

    kind: str
    param: float
    quality: float
    sample_rate: int


def recipe_pool(rng: np.random.Generator) -> list[SystemRecipe]:
    """Candidate systems: spectral degradations (noise, band limit, bit depth) and pitch errors."""
    pool = [
        ("clean", 0.0, 4.6),
        ("noise", 35.0, 4.2),
        ("noise", 25.0, 3.6),
        ("noise", 15.0, 2.8),
        ("noise", 8.0, 2.0),
        ("noise", 3.0, 1.4),
        ("lowpass", 6000.0, 4.0),
        ("lowpass", 3500.0, 3.2),
        ("lowpass", 2000.0, 2.4),
        ("lowpass", 1200.0, 1.7),
        ("bits", 8.0, 3.0),
        ("bits", 6.0, 2.2),
        ("bits", 4.0, 1.5),
        ("detune", 25.0, 3.0),
        ("detune", 45.0, 2.2),
        ("drift", 80.0, 2.6),
        ("jitter", 60.0, 2.5),
        ("note_detune", 50.0, 2.7),
    ]
    rates = (16000, 16000, 16000, 24000, 44100)
    return [SystemRecipe(k, p, q, int(rng.choice(rates))) for k, p, q in pool]


def melody(
    rng: np.random.Generator, sr: int, kind: str, param: float, seconds: float | None = None
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Per-sample f0 (Hz) and voicing of a random phrase, with the pitch errors of `kind`.

    A phrase has 4-7 notes; with `seconds`, enough notes to last that long, cut to that length.
    """
    base = int(rng.integers(52, 68))
    # A note with its gap lasts 0.39 s on average: 0.3 s per note leaves a margin to cut.
    n_notes = int(rng.integers(4, 8)) if seconds is None else int(np.ceil(seconds / 0.3))
    scale = np.array([0, 2, 4, 5, 7, 9, 11, 12])
    notes = base + rng.choice(scale, size=n_notes)
    durs = rng.uniform(0.22, 0.5, size=n_notes)
    gaps = np.where(rng.random(n_notes) < 0.3, rng.uniform(0.05, 0.15, size=n_notes), 0.0)
    midi_parts, voiced_parts = [], []
    prev = float(notes[0])
    for note, dur, gap in zip(notes, durs, gaps, strict=True):
        n = max(int(dur * sr), 1)
        target = float(note)
        if kind == "note_detune":
            target += rng.choice([-1.0, 1.0]) * rng.uniform(0.6, 1.0) * param / 100.0
        glide = min(int(0.05 * sr), n)
        track = np.full(n, target)
        track[:glide] = np.linspace(prev, target, glide)
        midi_parts.append(track)
        voiced_parts.append(np.ones(n))
        prev = target
        if gap > 0:
            g = int(gap * sr)
            midi_parts.append(np.full(g, target))
            voiced_parts.append(np.zeros(g))
    midi = np.concatenate(midi_parts)
    voiced = np.concatenate(voiced_parts)
    if seconds is not None:
        midi, voiced = midi[: int(seconds * sr)], voiced[: int(seconds * sr)]
    t = np.arange(midi.size) / sr
    vib_depth = rng.uniform(*VIBRATO_SEMITONES)
    midi = midi + vib_depth * np.sin(2 * np.pi * rng.uniform(5.0, 6.5) * t) * np.clip(t / 0.3, 0, 1)
    if kind == "detune":
        midi = midi + rng.choice([-1.0, 1.0]) * param / 100.0
    elif kind == "drift":
        midi = midi + rng.choice([-1.0, 1.0]) * (param / 100.0) * t / max(t[-1], 1e-3)
    elif kind == "jitter":
        # Fast random pitch wobble: a smoothed random walk of about `param` cents.
        walk = signal.lfilter([1.0], [1.0, -0.995], rng.normal(0, 1, midi.size))
        midi = midi + (param / 100.0) * walk / (np.std(walk) + 1e-9)
    f0 = 440.0 * 2.0 ** ((midi - 69.0) / 12.0)
    return f0, voiced, notes.tolist()


def sing(rng: np.random.Generator, f0: np.ndarray, voiced: np.ndarray) -> np.ndarray:
    """Harmonic voice source at SYNTH_RATE shaped by a vowel formant envelope, breath in gaps."""
    formants, bands = VOWELS[int(rng.integers(len(VOWELS)))]
    grid = np.arange(0.0, SYNTH_RATE / 2, 10.0)
    envelope = 0.3 + sum(
        np.exp(-0.5 * ((grid - fc) / bw) ** 2) for fc, bw in zip(formants, bands, strict=True)
    )
    phase = 2 * np.pi * np.cumsum(f0) / SYNTH_RATE
    out = np.zeros_like(f0)
    # sin(k·phase) by the Chebyshev recurrence: multiply-adds instead of a sine per harmonic.
    two_cos = 2 * np.cos(phase)
    # The envelope gain of each harmonic changes slowly: evaluate it every 64 samples (4 ms).
    coarse_bins = f0[::64] / 10.0
    prev, cur = np.zeros_like(phase), np.sin(phase)
    for k in range(1, int(VOICE_BAND / f0.min()) + 1):
        bins = np.minimum((k * coarse_bins).astype(np.int64), envelope.size - 1)
        amp = np.where(bins * 10.0 < VOICE_BAND, envelope[bins], 0.0) / k
        out += np.repeat(amp, 64)[: out.size] * cur
        prev, cur = cur, two_cos * cur - prev
    smooth = signal.lfilter([0.002], [1, -0.998], voiced)
    out = out * smooth / (smooth.max() + 1e-9)
    out += 0.003 * rng.normal(size=out.size) * (1 - smooth)
    return out


def degrade(rng: np.random.Generator, wav: np.ndarray, sr: int, recipe: SystemRecipe) -> np.ndarray:
    """Apply the spectral degradation of `recipe` (pitch recipes act in `melody`)."""
    if recipe.kind == "noise":
        power = np.mean(wav**2)
        snr = recipe.param + rng.normal(0, 1.5)
        wav = wav + rng.normal(size=wav.size) * np.sqrt(power / 10 ** (snr / 10))
    elif recipe.kind == "lowpass":
        sos = signal.butter(8, recipe.param, btype="low", fs=sr, output="sos")
        wav = signal.sosfilt(sos, wav)
    elif recipe.kind == "bits":
        levels = 2 ** (recipe.param - 1)
        wav = np.round(wav * levels) / levels
    return wav
