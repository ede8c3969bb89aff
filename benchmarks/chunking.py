"""Chunked against whole scoring of long songs, per backbone kind: how far `chunk_seconds` moves a score.

    .venv/bin/python benchmarks/chunking.py [--export logmel=outputs/demo/export ...] [--songs 3]

A song is at least `--minutes` minutes of varied synthetic singing: phrases of 4-12 s, each
from its own voice (vowel, pitch range, vibrato), system (a degradation or pitch error of
`sqa.data.singing.recipe_pool`) and level, joined by short pauses, so a window sees material that
differs from the rest of the song, as in a real one. Each export scores each song whole and with
`chunk_seconds` of 5, 10 and 20 s, in the overlapping windows `Scorer` uses (each frame counted
once, from the centre half of a window) and, for comparison, in the earlier equal non-overlapping
windows averaged by frame counts. The table gives the largest |chunked - whole| over the songs,
and the spread (standard deviation) of the songs' phrase scores, the differences a model is
meant to see.

Without `--export`, random-init predictors of both kinds (the default log-mel, the tiny
wav2vec2) are scored; pass trained exports (`kind=path`) for figures that matter.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from sqa.data.audio import pad_to
from sqa.data.singing import SYNTH_RATE, degrade, melody, recipe_pool, sing
from sqa.exports.format import export_predictor
from sqa.models.backbone import W2V_HOP, LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.models.ssl import TorchaudioWav2Vec2
from sqa.scoring.scorer import Scorer

CHUNKS = (5.0, 10.0, 20.0)


def song(seed: int, minutes: float) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """A mono song (N,) at 16 kHz of varied phrases, and each phrase's (start, stop) samples."""
    rng = np.random.default_rng(seed)
    pool = recipe_pool(rng)
    parts, spans, at = [], [], 0
    while at < minutes * 60 * SYNTH_RATE:
        recipe = pool[int(rng.integers(len(pool)))]
        f0, voiced, _ = melody(rng, SYNTH_RATE, recipe.kind, recipe.param, float(rng.uniform(4, 12)))
        wav = degrade(rng, sing(rng, f0, voiced), SYNTH_RATE, recipe)
        wav = wav / (np.abs(wav).max() + 1e-9) * rng.uniform(0.2, 0.8)
        pause = np.zeros(int(rng.uniform(0.1, 1.0) * SYNTH_RATE))
        parts += [wav, pause]
        spans.append((at, at + wav.size))
        at += wav.size + pause.size
    return np.concatenate(parts).astype(np.float32), spans


def equal_windows_score(scorer: Scorer, wav: np.ndarray, seconds: float) -> float:
    """The earlier chunking: equal non-overlapping windows, scores averaged by frame counts."""
    size = round(seconds * scorer.sample_rate / W2V_HOP) * W2V_HOP
    count = -(-wav.size // size)
    size = -(-wav.size // count // W2V_HOP) * W2V_HOP
    pieces = [pad_to(wav[i : i + size], scorer.min_samples) for i in range(0, wav.size, size)]
    scores = scorer.score_waveforms(pieces)
    frames = [(p.size - 400) // W2V_HOP + 1 for p in pieces]
    return float(np.average(scores, weights=frames))


def random_exports(folder: Path) -> dict[str, Path]:
    """Exports of random-init predictors of each backbone kind (seed 0)."""
    torch.manual_seed(0)
    backbones = {"log-mel": LogMelBackbone(), "tiny wav2vec2": TorchaudioWav2Vec2("tiny")}
    return {
        kind: export_predictor(MOSPredictor(backbone).eval(), folder / kind, 16000, ["d"])
        for kind, backbone in backbones.items()
    }


def main() -> None:
    """Print the chunked-versus-whole table (markdown) for each export."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", action="append", default=[], help="kind=path of an export (repeatable)")
    parser.add_argument("--songs", type=int, default=3)
    parser.add_argument("--minutes", type=float, default=3.0)
    args = parser.parse_args()
    songs = [song(seed, args.minutes) for seed in range(args.songs)]
    seconds = min(w.size for w, _ in songs) / SYNTH_RATE
    phrases = sum(len(spans) for _, spans in songs)
    print(f"{args.songs} songs of at least {seconds:.0f} s, {phrases} phrases\n")
    with tempfile.TemporaryDirectory() as tmp:
        exports = dict(e.split("=", 1) for e in args.export) or random_exports(Path(tmp))
        header = ["backbone", "phrase score spread"]
        header += [f"{c:g} s overlapping" for c in CHUNKS] + [f"{c:g} s equal (before)" for c in CHUNKS]
        print("| " + " | ".join(header) + " |")
        print("|" + " --- |" * len(header))
        for kind, path in exports.items():
            whole = Scorer(path)
            spread = max(
                float(np.std(whole.score_waveforms([wav[a:b] for a, b in spans]))) for wav, spans in songs
            )
            overlapping, equal = [], []
            for chunk in CHUNKS:
                chunked = Scorer(path, chunk_seconds=chunk)
                worst_overlap = worst_equal = 0.0
                for wav, _ in songs:
                    reference = whole.score_waveforms([wav])[0]
                    worst_overlap = max(worst_overlap, abs(chunked.score_waveforms([wav])[0] - reference))
                    worst_equal = max(worst_equal, abs(equal_windows_score(whole, wav, chunk) - reference))
                overlapping.append(worst_overlap)
                equal.append(worst_equal)
            cells = [kind, f"{spread:.3f}"] + [f"{d:.4f}" for d in overlapping + equal]
            print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
