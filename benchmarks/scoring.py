"""Scoring throughput: `sqa.scoring.Scorer` on a folder of clips against a bare forward, as a ratio.

    .venv/bin/python benchmarks/scoring.py [--corpus data/synthetic-seed0-clips14] [--clips 200]

Each model (the default log-mel predictor and a random-init wav2vec2-base-shaped one, see
`overhead.py`) is exported with `sqa.export.export_predictor` and loaded by a `Scorer`, the
object behind `sqa-score`. The first `--clips` clips of the synthetic corpus (16, 24 and
44.1 kHz WAV files, about 2 s each) are copied into a folder.

- sqa: `Scorer.score_files(expand_inputs([folder]))`, as `sqa-score folder/` runs it: finding the
  files, reading, resampling to 16 kHz, length-sorted batches of `--batch`, padding, forward.
- bare: `predictor(wav, lengths)` in inference mode over the same length-sorted batches, read,
  resampled and padded beforehand.

Both use the same loaded predictor. They alternate for `--rounds` rounds; figures are medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from hydra.utils import instantiate
from overhead import compose_config

from sqa.data.audio import load_audio, pad_to
from sqa.data.datamodule import pad_batch
from sqa.data.synthetic import load_synthetic
from sqa.export import export_predictor
from sqa.models.predictor import MOSPredictor
from sqa.score import expand_inputs
from sqa.scoring import Scorer


def scorer_seconds(scorer: Scorer, folder: Path) -> float:
    """Seconds `scorer` takes to score every audio file in `folder`."""
    start = time.perf_counter()
    results = list(scorer.score_files(expand_inputs([str(folder)])))
    elapsed = time.perf_counter() - start
    errors = [r.error for r in results if r.error is not None]
    if errors:
        raise RuntimeError(f"the scorer could not read every clip: {errors}")
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
    wavs = [load_audio(path, scorer.sample_rate) for path in expand_inputs([str(folder)])]
    wavs.sort(key=len)
    chunks = [wavs[i : i + scorer.batch_size] for i in range(0, len(wavs), scorer.batch_size)]
    return [pad_batch([torch.from_numpy(pad_to(w, scorer.min_samples)) for w in c]) for c in chunks]


def measure(predictor: MOSPredictor, clips: list[Path], batch: int, rounds: int) -> dict[str, float]:
    """Median clips/s of the scorer and the bare forward, and the median per-round time ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "clips"
        folder.mkdir()
        for clip in clips:
            shutil.copy(clip, folder / clip.name)
        export = export_predictor(predictor, Path(tmp) / "export", 16000, ["d"])
        scorer = Scorer(export, batch_size=batch)
        batches = preloaded_batches(folder, scorer)
        bare_seconds(scorer.predictor, batches[:1])  # warm-up
        sqa, bare = [], []
        for _ in range(rounds):
            sqa.append(scorer_seconds(scorer, folder))
            bare.append(bare_seconds(scorer.predictor, batches))
    return {
        "sqa": len(clips) / statistics.median(sqa),
        "bare": len(clips) / statistics.median(bare),
        "ratio": statistics.median(s / b for s, b in zip(sqa, bare, strict=True)),
    }


def main() -> None:
    """Print clips/s of the scorer and of the bare forward, and their time ratio, per model."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/synthetic-seed0-clips14")
    parser.add_argument("--clips", type=int, default=200, help="log-mel clips")
    parser.add_argument("--w2v-clips", type=int, default=48, help="wav2vec2 clips")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (see overhead.py)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    paths = sorted(Path(c.path) for c in load_synthetic(args.corpus).clips)
    rows = []
    for model, count in (("logmel", args.clips), ("wav2vec2", args.w2v_clips)):
        cfg = compose_config(args.corpus, model, args.layers, args.width, [])
        torch.manual_seed(0)
        predictor = instantiate(cfg.model, num_domains=1)
        name = "log-mel (default)" if model == "logmel" else f"wav2vec2 {args.layers}x{args.width}"
        rows.append((f"{name}, {count} clips", measure(predictor, paths[:count], args.batch, args.rounds)))
    print(
        f"\n{args.rounds} rounds, {args.threads} thread(s), batch {args.batch}, medians; "
        "time ratio = scorer time / bare forward time"
    )
    print(f"{'model':<34} {'bare clips/s':>12} {'scorer clips/s':>14} {'ratio':>6}")
    for name, r in rows:
        print(f"{name:<34} {r['bare']:>12.3g} {r['sqa']:>14.3g} {r['ratio']:>5.2f}x")


if __name__ == "__main__":
    main()
