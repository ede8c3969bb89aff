"""Does a timeline find where a song goes wrong? The lowest window against an injected degradation.

    .venv/bin/python benchmarks/timeline.py --export outputs/demo/export [--songs 50] [--seed 0]

Each song is 10 s of synthetic singing (`sqa.data.singing`: one voice, a random melody, breath
gaps) with one segment of `SEGMENT_SECONDS` at a random place degraded by one of `KINDS`, in
turn: a noise burst (white noise at 0 dB SNR), a detune (the segment's pitch raised by 60 cents)
or a band limit (low-pass at 1.5 kHz). A song is a hit when the timeline's lowest window (1 s
windows every 0.5 s) overlaps the segment. The baseline is the rate of a window drawn at random:
the mean share of a song's windows that overlap its segment.
"""

from __future__ import annotations

import argparse
from collections import Counter

import numpy as np
from scipy import signal

from sqa.data.singing import SYNTH_RATE, melody, sing
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


def main() -> None:
    """Print the hit rate of the lowest window, per kind, and the random window's rate."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="export directory, run directory or model.pt")
    parser.add_argument("--songs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    result = localisation(Scorer(args.export), args.songs, args.seed)
    kinds = ", ".join(f"{kind} {rate:.0%}" for kind, rate in result["by_kind"].items())
    print(
        f"lowest window overlaps the degraded segment in {result['rate']:.0%} of {args.songs} songs "
        f"({kinds}); a random window: {result['baseline']:.0%}"
    )


if __name__ == "__main__":
    main()
