"""A small rated corpus as a user brings one: a CSV table of tens of clips of a few systems.

The built-in synthetic corpus imitates SingMOS-Pro (hundreds of short clips in five annotation
batches). Most users start from much less: one listening test of 30-240 clips of a handful of
systems, in whatever formats their tools wrote. This corpus is that case, generated from a seed:
six systems (clean, noise at three SNRs, a whole-phrase detune, a low-pass), clips of 2-12 s at
16, 22.05 or 44.1 kHz, mono or stereo, WAV or FLAC, and three kinds of material (a solo voice, a
duet a third apart, a voice over a soft chord accompaniment), rated on 1-5 (five raters a clip,
one row a clip) or as a MUSHRA-style 0-100 test (four listeners a clip, one row a rating). It has
no split column: the data module carves its test and validation clips, as it would a user's table.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import soundfile as sf

from sqa.core.atomic import atomic_dir, atomic_write_text
from sqa.data.audio import os_path, resample
from sqa.data.corpus import Corpus, CorpusError
from sqa.data.readers import read_csv_manifest
from sqa.data.singing import SYNTH_RATE, SystemRecipe, degrade, melody, sing

FORMAT_VERSION = 1
MANIFEST = "ratings.csv"
# (kind, parameter, latent quality on 1-5): the six systems, in system-ID order.
SYSTEMS = (
    ("clean", 0.0, 4.5),
    ("noise", 25.0, 3.7),
    ("noise", 12.0, 2.7),
    ("noise", 3.0, 1.6),
    ("detune", 45.0, 2.5),
    ("lowpass", 2500.0, 3.1),
)
MATERIALS = ("solo", "duet", "accompanied")
RATES = (16000, 22050, 44100)
SECONDS = (2.0, 12.0)
SCALES = {"mos": (1.0, 5.0), "mushra": (0.0, 100.0)}
# Clip-level spread of the latent quality around its system's, and the raters' noise and bias.
CLIP_STD, RATER_STD, RATER_BIAS_STD = 0.25, 0.6, 0.3
RATERS, MUSHRA_LISTENERS, MUSHRA_NOISE_STD = 5, 4, 8.0


def _material(rng: np.random.Generator, kind: str, param: float, seconds: float, material: str) -> np.ndarray:
    """One phrase of `seconds` at SYNTH_RATE: a voice, two voices, or a voice over chords."""
    f0, voiced, notes = melody(rng, SYNTH_RATE, kind, param, seconds)
    wav = sing(rng, f0, voiced)
    if material == "duet":
        # A second voice a major third above, with its own vowel.
        wav = wav + 0.7 * sing(rng, f0 * 2 ** (4 / 12), voiced)
    elif material == "accompanied":
        t = np.arange(wav.size) / SYNTH_RATE
        root = 440.0 * 2 ** ((min(notes) - 12 - 69) / 12)
        chord = sum(np.sin(2 * np.pi * root * 2 ** (s / 12) * t) for s in (0, 4, 7))
        # A pad at about -15 dB under the voice, re-struck every second.
        envelope = np.exp(-1.5 * (t % 1.0))
        wav = wav + 0.18 * np.std(wav) * chord * envelope
    return wav


def _ratings(rng: np.random.Generator, quality: float, scale: str) -> list[tuple[str, float]]:
    """(listener, rating) pairs of one clip of latent `quality` (1-5) on the `scale`'s range."""
    if scale == "mos":
        raw = quality + rng.normal(0, RATER_BIAS_STD) + rng.normal(0, RATER_STD, RATERS)
        return [("", float(v)) for v in np.clip(np.rint(raw), 1, 5)]
    listeners = rng.choice(10, MUSHRA_LISTENERS, replace=False)
    latent = 25.0 * (quality - 1.0)
    raw = latent + rng.normal(0, MUSHRA_NOISE_STD, MUSHRA_LISTENERS)
    return [(f"l{j:02d}", float(v)) for j, v in zip(listeners, np.clip(np.rint(raw), 0, 100), strict=True)]


def generate(root: str | Path, seed: int = 0, clips: int = 60, scale: str = "mos") -> Path:
    """Write `clips` clips (spread over the six systems) and their ratings under `root`; returns it.

    Written to a temporary folder and renamed into place; an existing folder is never overwritten.
    """
    root = Path(root)
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {sorted(SCALES)}, got {scale!r}")
    if clips < 2 * len(SYSTEMS):
        raise ValueError(f"clips must be at least {2 * len(SYSTEMS)} (two per system), got {clips}")
    if root.exists():
        raise CorpusError(f"{root}: already exists; refusing to overwrite it")
    with atomic_dir(root) as tmp:
        rows = []
        for i in range(clips):
            system = i % len(SYSTEMS)
            kind, param, quality = SYSTEMS[system]
            rng = np.random.default_rng([seed, i])
            material = MATERIALS[int(rng.integers(len(MATERIALS)))]
            seconds = float(rng.uniform(*SECONDS))
            rate, channels = int(rng.choice(RATES)), int(rng.integers(1, 3))
            wav = _material(rng, kind, param, seconds, material)
            recipe = SystemRecipe(kind, param, quality, rate)
            wav = degrade(rng, resample(wav, SYNTH_RATE, rate), rate, recipe)
            wav = 0.5 * wav / (np.abs(wav).max() + 1e-9) * rng.uniform(0.4, 1.0)
            audio = np.stack([wav, wav * rng.uniform(0.6, 1.0)], axis=1) if channels == 2 else wav
            name = f"sys{system + 1}_{material}_{i + 1:03d}.{'flac' if rng.random() < 0.5 else 'wav'}"
            (tmp / "audio").mkdir(exist_ok=True)
            sf.write(os_path(tmp / "audio" / name), audio.astype(np.float32), rate, subtype="PCM_16")
            clip_quality = float(np.clip(quality + rng.normal(0, CLIP_STD), 1.0, 5.0))
            ratings = _ratings(rng, clip_quality, scale)
            if scale == "mos":
                ratings = [("", float(np.mean([v for _, v in ratings])))]
            for listener, value in ratings:
                rows.append((f"audio/{name}", value, f"sys{system + 1}", Path(name).stem, listener))
        text = io.StringIO()
        writer = csv.writer(text, lineterminator="\n")
        columns = ["wav_path", "score", "system_id", "sample_id"]
        writer.writerow(columns + (["listener_id"] if scale == "mushra" else []))
        for row in rows:
            writer.writerow(list(row) if scale == "mushra" else list(row[:4]))
        atomic_write_text(tmp / MANIFEST, text.getvalue())
        signature = {"format": FORMAT_VERSION, "seed": seed, "clips": clips, "scale": scale}
        atomic_write_text(tmp / "small_table.json", json.dumps(signature))
    return root


def load_small_table(
    root: str | Path,
    seed: int = 0,
    clips: int = 60,
    scale: str = "mos",
    score_range: Sequence[float] | None = None,
    allow_generate: bool = True,
) -> Corpus:
    """Read the small table at `root`, generated first if the folder does not exist (and allowed).

    `score_range` defaults to the scale's (1-5 or 0-100); it is accepted so that a data config
    can state it like any CSV corpus's, and must equal the scale's.
    """
    root = Path(root)
    if not root.exists():
        if not allow_generate:
            raise CorpusError(f"{root}: no small table there (allow_generate is false)")
        generate(root, seed, clips, scale)
    marker = root / "small_table.json"
    expected = {"format": FORMAT_VERSION, "seed": seed, "clips": clips, "scale": scale}
    try:
        found = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        found = None
    if found != expected:
        raise CorpusError(
            f"{marker}: {root} holds another corpus than the small table seed={seed}, clips={clips}, "
            f"scale={scale!r} of format {FORMAT_VERSION}; choose another root"
        )
    scale_range = SCALES[scale]
    if score_range is not None and tuple(float(v) for v in score_range) != scale_range:
        raise CorpusError(
            f"score_range {list(score_range)} differs from the {scale} scale's {list(scale_range)}"
        )
    return read_csv_manifest(root / MANIFEST, score_range=scale_range)
