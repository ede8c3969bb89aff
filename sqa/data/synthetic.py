"""The built-in synthetic singing corpus, written in the SingMOS-Pro layout.

Sung phrases (harmonic source with vibrato, vowel formants, note glides, breath gaps) from random
melodies are passed through "systems": degradation recipes whose severity sets a latent quality.
Each annotation batch p1..p5 has its own rater bias and scale; every clip gets five integer
ratings whose mean is its MOS. Everything is deterministic from the seed.

Beyond the overall MOS, the clips of some batches (`DIMENSION_BATCHES`) carry lyrics and melody
MOS driven by different degradations: melody by the pitch errors, lyrics by the spectral ones
(noise, band limit, bit depth) that cost intelligibility. The five ratings of each clip are by
five judges drawn from a pool per batch, each judge with a leniency of its own. These labels
come from random streams of their own, so the audio and the overall MOS are those that the
corpus had before it had them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
from scipy import signal

from sqa.data.audio import resample
from sqa.data.corpus import Corpus, CorpusError, read_singmos_pro

BATCHES = ("singmospro-p1", "singmospro-p2", "singmospro-p3", "singmospro-p4", "singmospro-p5")
TEST_BATCHES = BATCHES[:3]
# Voices are synthesised at 16 kHz with harmonics up to 7 kHz, then resampled to the system's rate.
SYNTH_RATE = 16000
VOICE_BAND = 7000.0
# Vibrato depth range (semitones) of the sung phrases. At 10-30 cents a whole-phrase detune stays
# visible in the octave-folded pitch histogram (its circular mean moves off the 12-tone grid); at
# 30-60 cents the vibrato's own peaks hide it.
VIBRATO_SEMITONES = (0.1, 0.3)
FORMAT_VERSION = 4
# Batches whose clips have lyrics and melody MOS (SingMOS-Pro has them for part of its batches).
DIMENSION_BATCHES = BATCHES[0], BATCHES[1], BATCHES[3]
PITCH_KINDS = frozenset({"detune", "drift", "jitter", "note_detune"})
SPECTRAL_KINDS = frozenset({"noise", "lowpass", "bits"})
# Judges per batch pool; the spread of their leniencies and of the noise in ordering by it.
JUDGES_PER_BATCH = 12
JUDGE_LENIENCY_STD = 0.5
JUDGE_ORDER_NOISE = 0.3
# Keys of the random streams of the labels added after format 3, apart from the audio's streams.
LABEL_STREAM, JUDGE_STREAM = 1, 2

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


def _recipe_pool(rng: np.random.Generator) -> list[SystemRecipe]:
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


def _melody(
    rng: np.random.Generator, sr: int, kind: str, param: float
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Per-sample f0 (Hz) and voicing of a random phrase, with the pitch errors of `kind`."""
    base = int(rng.integers(52, 68))
    n_notes = int(rng.integers(4, 8))
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


def _sing(rng: np.random.Generator, f0: np.ndarray, voiced: np.ndarray) -> np.ndarray:
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


def _dimension_quality(recipe: SystemRecipe) -> dict[str, float]:
    """Latent lyrics and melody quality of a system: each hurt only by its own degradations."""
    severity = 4.6 - recipe.quality
    if recipe.kind in PITCH_KINDS:
        return {"lyrics": 4.5, "melody": 4.6 - 1.2 * severity}
    if recipe.kind in SPECTRAL_KINDS:
        return {"lyrics": 4.6 - 1.1 * severity, "melody": 4.5}
    return {"lyrics": 4.6, "melody": 4.6}


def _assign_judges(
    rng: np.random.Generator, ratings: list[int], pool: list[str], leniency: np.ndarray
) -> tuple[list[str], list[int]]:
    """Five judges of the pool for a clip's ratings, the more lenient ones on the higher ratings.

    The clip's ratings (hence its MOS) stay as drawn; only who gave which one follows the
    judges' leniency (with noise), so a judge's ratings deviate from the clip means by its bias.
    """
    chosen = rng.choice(len(pool), size=len(ratings), replace=False)
    order = np.argsort(leniency[chosen] + rng.normal(0, JUDGE_ORDER_NOISE, len(chosen)), kind="stable")
    by_rank = sorted(ratings)
    given = [0] * len(ratings)
    for rank, position in enumerate(order):
        given[int(position)] = by_rank[rank]
    return [pool[int(j)] for j in chosen], given


def _degrade(rng: np.random.Generator, wav: np.ndarray, sr: int, recipe: SystemRecipe) -> np.ndarray:
    """Apply the spectral degradation of `recipe` (pitch recipes act in `_melody`)."""
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


def generate(
    root: str | Path,
    seed: int = 0,
    clips_per_system: int = 14,
    systems_per_batch: tuple[int, ...] = (12, 12, 10, 8, 8),
) -> Path:
    """Write the synthetic corpus under `root` in the SingMOS-Pro layout; returns `root`.

    The corpus is written to a temporary folder and renamed into place, so an interrupted
    generation leaves nothing half-written. An existing folder is never overwritten.
    """
    root = Path(root)
    if root.exists():
        raise CorpusError(f"{root}: already exists; refusing to overwrite it")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
    try:
        _write(tmp, seed, clips_per_system, systems_per_batch)
        tmp.rename(root)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        # Another process (a parallel run) finished the same corpus first: use theirs.
        if not (root / "info" / "synthetic.json").is_file():
            raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return root


def _write(root: Path, seed: int, clips_per_system: int, systems_per_batch: tuple[int, ...]) -> None:
    (root / "wav").mkdir(parents=True)
    (root / "info").mkdir()
    master = np.random.default_rng(seed)
    pool = _recipe_pool(master)
    split, utterances, systems, sys_info = {}, {}, {}, {}
    sys_counter = 0
    for b, (batch, n_sys) in enumerate(zip(BATCHES, systems_per_batch, strict=True)):
        bias, gain = master.normal(0, 0.35), master.uniform(0.8, 1.15)
        judge_rng = np.random.default_rng([seed, b, JUDGE_STREAM])
        judge_pool = [f"{batch}-j{j:02d}" for j in range(JUDGES_PER_BATCH)]
        leniency = judge_rng.normal(0, JUDGE_LENIENCY_STD, JUDGES_PER_BATCH)
        chosen = [pool[0]] + [
            pool[i] for i in master.choice(np.arange(1, len(pool)), n_sys - 1, replace=False)
        ]
        split[batch] = {"train": [], "valid": [], "test": []}
        for recipe in chosen:
            sys_counter += 1
            sys_id = f"sys{sys_counter:04d}"
            sys_info[sys_id] = {
                "sample_rate": recipe.sample_rate,
                "tag": {"domain_id": b},
                "type": recipe.kind,
                "model": f"{recipe.kind}-{recipe.param:g}",
                "dataset": "synthetic",
            }
            sys_scores = []
            for u in range(clips_per_system):
                utt_id = f"{sys_id}-utt{u + 1:04d}"
                rng = np.random.default_rng([seed, sys_counter, u])
                sr = recipe.sample_rate
                f0, voiced, _ = _melody(rng, SYNTH_RATE, recipe.kind, recipe.param)
                wav = resample(_sing(rng, f0, voiced), SYNTH_RATE, sr)
                wav = _degrade(rng, wav, sr, recipe)
                wav = 0.5 * wav / (np.abs(wav).max() + 1e-9) * rng.uniform(0.5, 1.0)
                sf.write(root / "wav" / f"{utt_id}.wav", wav.astype(np.float32), sr, subtype="PCM_16")
                quality = recipe.quality + rng.normal(0, 0.15)
                raw = 3.0 + gain * (quality - 3.0) + bias + rng.normal(0, 0.5, size=5)
                ratings = np.clip(np.rint(raw), 1, 5).astype(int).tolist()
                mos = float(np.mean(ratings))
                sys_scores.append(mos)
                labels = np.random.default_rng([seed, sys_counter, u, LABEL_STREAM])
                judges, given = _assign_judges(labels, ratings, judge_pool, leniency)
                score = {"mos": mos, "judges": judges, "scores": given}
                if batch in DIMENSION_BATCHES:
                    for dim, latent in _dimension_quality(recipe).items():
                        dim_raw = 3.0 + gain * (latent + labels.normal(0, 0.15) - 3.0) + bias
                        dim_ratings = np.clip(np.rint(dim_raw + labels.normal(0, 0.5, size=5)), 1, 5)
                        score[dim] = float(np.mean(dim_ratings))
                utterances[utt_id] = {"sys_id": sys_id, "wav": f"wav/{utt_id}.wav", "score": score}
                part = _split_of(u, clips_per_system, batch in TEST_BATCHES)
                split[batch][part].append(utt_id)
            systems[sys_id] = {"mos": float(np.mean(sys_scores))}
    info = root / "info"
    (info / "split.json").write_text(json.dumps(split, indent=1, allow_nan=False))
    (info / "score.json").write_text(
        json.dumps({"utterance": utterances, "system": systems}, indent=1, allow_nan=False)
    )
    (info / "sys_info.json").write_text(json.dumps(sys_info, indent=1, allow_nan=False))
    (info / "synthetic.json").write_text(
        json.dumps(_signature(seed, clips_per_system, systems_per_batch), allow_nan=False)
    )


def _split_of(index: int, n: int, has_test: bool) -> str:
    """Train/valid/test assignment of the index-th clip of a system (about 60/15/25 %)."""
    n_test = round(0.3 * n) if has_test else 0
    n_valid = max(1, round(0.15 * n))
    if index < n_test:
        return "test"
    if index < n_test + n_valid:
        return "valid"
    return "train"


def _signature(seed: int, clips_per_system: int, systems_per_batch: tuple[int, ...]) -> dict:
    return {
        "format": FORMAT_VERSION,
        "seed": seed,
        "clips_per_system": clips_per_system,
        "systems_per_batch": list(systems_per_batch),
    }


def load_synthetic(
    root: str | Path,
    seed: int = 0,
    clips_per_system: int = 14,
    systems_per_batch: tuple[int, ...] = (12, 12, 10, 8, 8),
    sample_rate_filter: int | None = None,
) -> Corpus:
    """Read the synthetic corpus at `root`, generating it first if the folder does not exist."""
    root = Path(root)
    systems_per_batch = tuple(systems_per_batch)
    if not root.exists():
        generate(root, seed, clips_per_system, systems_per_batch)
    marker = root / "info" / "synthetic.json"
    expected = _signature(seed, clips_per_system, systems_per_batch)
    if not marker.is_file() or json.loads(marker.read_text()) != expected:
        raise CorpusError(
            f"{marker}: {root} holds a different corpus than seed={seed}, clips_per_system="
            f"{clips_per_system}, systems_per_batch={list(systems_per_batch)} of format {FORMAT_VERSION}; "
            "choose another root, or delete it to regenerate (a corpus of an older format)"
        )
    return read_singmos_pro(root, TEST_BATCHES, sample_rate_filter)
