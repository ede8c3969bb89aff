"""Scoring throughput: `sqa-score` on a folder of clips against a bare forward, as a ratio; start-up time.

    .venv/bin/python benchmarks/scoring.py [--corpus data/synthetic-seed0-clips14] [--clips 300]

Each model (the default log-mel predictor and a random-init wav2vec2-base-shaped one, see
`overhead.py`) is exported with `sqa.exports.format.export_predictor`. The first `--clips` clips of the
synthetic corpus (16, 24 and 44.1 kHz WAV files, about 2 s each) are copied into a folder.

- sqa: `sqa.scoring.cli.main([...])` in this process, exactly what `sqa-score --checkpoint <export>
  --output <json> --overwrite --device cpu --num-workers <N> <folder>` runs: loading the export
  (checked, as any export), finding the files, reading headers, decoding and resampling to
  16 kHz in DataLoader workers, length-sorted batches of `--batch`, padding, forward, writing.
- bare: `predictor(wav, lengths)` in inference mode over the same length-sorted batches, read,
  resampled and padded beforehand (the same loaded predictor).

They alternate for `--rounds` rounds; figures are medians. The start-up time is the wall time of
`python -m sqa.scoring.cli --help` in a fresh interpreter (median of `--rounds` + 2 runs).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from hydra.utils import instantiate
from overhead import compose_config

from sqa.data.audio import load_audio, pad_to
from sqa.data.batching import pad_batch
from sqa.data.synthetic import load_synthetic
from sqa.exports.format import export_predictor
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli as score
from sqa.scoring.scorer import Scorer

REPO = Path(__file__).resolve().parents[1]


def sqa_score_seconds(export: Path, folder: Path, output: Path, batch: int, workers: int) -> float:
    """Seconds `sqa-score` takes to score every audio file in `folder` (in this process)."""
    args = ["--checkpoint", str(export), "--output", str(output), "--overwrite", "--device", "cpu"]
    args += ["--batch-size", str(batch), "--num-workers", str(workers), str(folder)]
    start = time.perf_counter()
    code = score.main(args)
    elapsed = time.perf_counter() - start
    if code != 0:
        raise RuntimeError(f"sqa-score exited with code {code}")
    return elapsed


@torch.inference_mode()
def bare_seconds(predictor: MOSPredictor, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
    """Seconds of `predictor(wav, lengths)` over pre-loaded padded batches."""
    start = time.perf_counter()
    for wav, lengths in batches:
        predictor(wav, lengths)
    return time.perf_counter() - start


def preloaded_batches(folder: Path, scorer: Scorer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The scorer's length-sorted padded batches of the files in `folder`, read beforehand."""
    wavs = [load_audio(path, scorer.sample_rate) for path in sorted(folder.iterdir())]
    wavs.sort(key=len)
    chunks = [wavs[i : i + scorer.batch_size] for i in range(0, len(wavs), scorer.batch_size)]
    return [pad_batch([torch.from_numpy(pad_to(w, scorer.min_samples)) for w in c]) for c in chunks]


def measure(
    predictor: MOSPredictor, clips: list[Path], batch: int, rounds: int, workers: int
) -> dict[str, float]:
    """Median clips/s of sqa-score and the bare forward, and the median per-round time ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "clips"
        folder.mkdir()
        for clip in clips:
            shutil.copy(clip, folder / clip.name)
        export = export_predictor(predictor, Path(tmp) / "export", 16000, ["d"])
        scorer = Scorer(export, batch_size=batch)
        batches = preloaded_batches(folder, scorer)
        bare_seconds(scorer.predictor, batches[:1])  # warm-up
        output = Path(tmp) / "scores.json"
        sqa, bare = [], []
        for _ in range(rounds):
            sqa.append(sqa_score_seconds(export, folder, output, batch, workers))
            bare.append(bare_seconds(scorer.predictor, batches))
    return {
        "sqa": len(clips) / statistics.median(sqa),
        "bare": len(clips) / statistics.median(bare),
        "ratio": statistics.median(s / b for s, b in zip(sqa, bare, strict=True)),
    }


def startup_seconds(runs: int) -> float:
    """Median wall time of `python -m sqa.scoring.cli --help` in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "sqa.scoring.cli", "--help"], env=env, check=True, capture_output=True
        )
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    """Print clips/s of sqa-score and of the bare forward, their time ratio, and the start-up time."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/synthetic-seed0-clips14")
    parser.add_argument("--clips", type=int, default=300, help="log-mel clips")
    parser.add_argument("--w2v-clips", type=int, default=48, help="wav2vec2 clips (0: skip the model)")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--workers", type=int, default=score.default_workers(), help="sqa-score --num-workers"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (see overhead.py)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    paths = sorted(Path(c.path) for c in load_synthetic(args.corpus).clips)
    rows = []
    for model, count in (("logmel", args.clips), ("wav2vec2", args.w2v_clips)):
        if count == 0:
            continue
        cfg = compose_config(args.corpus, model, args.layers, args.width, [])
        torch.manual_seed(0)
        predictor = instantiate(cfg.model, num_domains=1)
        name = "log-mel (default)" if model == "logmel" else f"wav2vec2 {args.layers}x{args.width}"
        result = measure(predictor, paths[:count], args.batch, args.rounds, args.workers)
        rows.append((f"{name}, {count} clips", result))
    startup = startup_seconds(args.rounds + 2)
    print(
        f"\n{args.rounds} rounds, {args.threads} thread(s), batch {args.batch}, {args.workers} decoding "
        "worker(s), medians; time ratio = sqa-score time / bare forward time"
    )
    print(f"{'model':<34} {'bare clips/s':>12} {'sqa-score clips/s':>17} {'ratio':>6}")
    for name, r in rows:
        print(f"{name:<34} {r['bare']:>12.3g} {r['sqa']:>17.3g} {r['ratio']:>5.2f}x")
    print(f"start-up: `python -m sqa.scoring.cli --help` {startup:.2f} s")


if __name__ == "__main__":
    main()
