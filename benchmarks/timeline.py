"""Does a timeline find where a song goes wrong? The lowest window against an injected degradation.

    .venv/bin/python benchmarks/timeline.py --export outputs/demo/export [--songs 50] [--seed 0]

Each song is 10 s of synthetic singing (`sqa.data.singing`: one voice, a random melody, breath
gaps) with one segment of `SEGMENT_SECONDS` at a random place degraded by one of `KINDS`, in
turn: a noise burst (white noise at 0 dB SNR), a detune (the segment's pitch raised by 60 cents)
or a band limit (low-pass at 1.5 kHz). A song is a hit when the timeline's lowest window (1 s
windows every 0.5 s) overlaps the segment. The baseline is the rate of a window drawn at random:
the mean share of a song's windows that overlap its segment.

It also prints how much a whole 4 s phrase loses when sung 25, 45 or 60 cents sharp (mean over
6 phrases), and how often the window with the largest mean offset from the 12-tone grid
(1 - cos 2πd of WORLD's f0, the input of `model.pitch=intonation`) finds a detuned segment: what
the offset alone could do.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np
import torch
from scipy import signal

from sqa.data.pitch import F0Extractor
from sqa.data.singing import SYNTH_RATE, melody, sing
from sqa.models.pitch_features import intonation
from sqa.scoring.scorer import Scorer

SONG_SECONDS = 10.0
SEGMENT_SECONDS = 1.5
KINDS = ("noise", "detune", "lowpass")
DETUNE_CENTS = 60.0
NOISE_SNR_DB = 0.0
LOWPASS_HZ = 1500.0


def injected_song(seed: int, kind: str) -> tuple[np.ndarray, tuple[float, float]]:
    """A 16 kHz song (N,) with a `kind` degradation in one segment, and the segment (start, end) in s."""
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    f0, voiced, _ = melody(rng, SYNTH_RATE, "clean", 0.0, SONG_SECONDS)
    start = float(rng.uniform(0.5, SONG_SECONDS - SEGMENT_SECONDS - 0.5))
    lo, hi = int(start * SYNTH_RATE), int((start + SEGMENT_SECONDS) * SYNTH_RATE)
    if kind == "detune":
        # Sung sharp from the segment on until its end, the rest as written.
        f0 = f0.copy()
        f0[lo:hi] *= 2.0 ** (DETUNE_CENTS / 1200.0)
    wav = sing(rng, f0, voiced)
    if kind == "noise":
        power = np.mean(wav[voiced > 0] ** 2)
        wav[lo:hi] += rng.normal(0.0, np.sqrt(power / 10 ** (NOISE_SNR_DB / 10)), hi - lo)
    elif kind == "lowpass":
        sos = signal.butter(8, LOWPASS_HZ, btype="low", fs=SYNTH_RATE, output="sos")
        wav[lo:hi] = signal.sosfiltfilt(sos, wav[lo:hi])
    wav = 0.5 * wav / (np.abs(wav).max() + 1e-9)
    return wav.astype(np.float32), (start, start + SEGMENT_SECONDS)


def overlaps(starts: np.ndarray, ends: np.ndarray, segment: tuple[float, float]) -> np.ndarray:
    """Which windows [starts, ends) (W,) overlap `segment` (start, end) in seconds."""
    return (starts < segment[1]) & (ends > segment[0])


def localisation(scorer: Scorer, songs: int, seed: int = 0) -> dict[str, object]:
    """Hit rate of the lowest window over `songs` songs (kinds in turn), per kind, and the random baseline."""
    hits: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    shares = []
    for i in range(songs):
        kind = KINDS[i % len(KINDS)]
        wav, segment = injected_song(seed + i, kind)
        timeline = scorer.timeline(wav, SYNTH_RATE)
        low = int(np.argmin(timeline.score))
        hit = overlaps(timeline.start_s, timeline.end_s, segment)
        hits[kind] += bool(hit[low])
        counts[kind] += 1
        shares.append(float(hit.mean()))
    return {
        "songs": songs,
        "rate": sum(hits.values()) / songs,
        "by_kind": {kind: hits[kind] / counts[kind] for kind in KINDS if counts[kind]},
        "baseline": float(np.mean(shares)),
    }


def detune_drops(
    scorer: Scorer, cents: tuple[float, ...] = (25.0, 45.0, 60.0), phrases: int = 6
) -> dict[float, float]:
    """Mean score of in-tune 4 s phrases minus that of the same phrases sung `cents` sharp."""

    def mean_score(shift: float) -> float:
        scores = []
        for seed in range(phrases):
            rng = np.random.default_rng([seed, 9])
            f0, voiced, _ = melody(rng, SYNTH_RATE, "clean", 0.0, 4.0)
            wav = sing(rng, f0 * 2.0 ** (shift / 1200.0), voiced)
            scores.append(scorer.score((0.5 * wav / np.abs(wav).max()).astype(np.float32), SYNTH_RATE))
        return float(np.mean(scores))

    clean = mean_score(0.0)
    return {c: clean - mean_score(c) for c in cents}


def offset_localisation(songs: int, seed: int = 0) -> float:
    """Share of `localisation`'s detuned songs whose window of largest grid offset is on the segment."""
    extractor = F0Extractor()
    detuned = [i for i in range(songs) if KINDS[i % len(KINDS)] == "detune"]
    hits = 0
    for i in detuned:
        wav, segment = injected_song(seed + i, "detune")
        f0 = torch.as_tensor(np.asarray(extractor.compute(wav, SYNTH_RATE)), dtype=torch.float32)[None]
        _, cos, voiced = intonation(f0)[0].numpy().T
        times = np.arange(len(cos)) * extractor.frame_period_ms / 1000.0
        starts = np.arange(0.0, SONG_SECONDS - 1.0 + 1e-9, 0.5)
        offsets = [
            ((1.0 - cos) * voiced)[(times >= s) & (times < s + 1.0)].sum()
            / max(voiced[(times >= s) & (times < s + 1.0)].sum(), 1.0)
            for s in starts
        ]
        hits += bool(overlaps(starts, starts + 1.0, segment)[int(np.argmax(offsets))])
    return hits / len(detuned)


def main() -> None:
    """Print the hit rate of the lowest window, per kind, and the random window's rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="export directory, run directory or model.pt")
    parser.add_argument("--songs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    scorer = Scorer(args.export)
    result = localisation(scorer, args.songs, args.seed)
    kinds = ", ".join(f"{kind} {rate:.0%}" for kind, rate in result["by_kind"].items())
    print(
        f"lowest window overlaps the degraded segment in {result['rate']:.0%} of {args.songs} songs "
        f"({kinds}); a random window: {result['baseline']:.0%}"
    )
    drops = ", ".join(f"{c:.0f} cents {d:+.2f}" for c, d in detune_drops(scorer).items())
    print(f"a whole phrase sung sharp scores lower by: {drops}")
    print(
        f"the grid offset alone finds {offset_localisation(args.songs, args.seed):.0%} "
        "of the detuned segments"
    )


if __name__ == "__main__":
    main()
