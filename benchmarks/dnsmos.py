"""DNSMOS baseline throughput: clip by clip against batched through the scorer's loader, as a ratio.

    .venv/bin/python benchmarks/dnsmos.py [--corpus data/synthetic-seed0-clips14] [--clips 0]

The clips are the test clips of the synthetic corpus (what `sqa-baseline --corpus synthetic`
scores; `--clips N` takes the first N, 0 all). One `DNSMOS` (both ONNX sessions made once) serves
both variants:

- per clip: `DNSMOS.score_file` for each file in turn, what `sqa-baseline` ran before: read and
  resample the file, then the clip's windows through the models.
- batched: `DNSMOS.score_files`, what `sqa-baseline` runs now: headers read first, files decoded
  and resampled by the loader `sqa-score` uses (`sqa.scoring.clips.file_batches`, `--workers`
  DataLoader workers) in length-sorted batches of `--batch` files, the windows of each batch
  through the models together.

They alternate for `--rounds` rounds; figures are medians, and the largest difference between
the two variants' scores is printed (they must agree).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from sqa.baselines.dnsmos import DNSMOS, FILES_PER_BATCH, OUTPUTS, WINDOW, window_starts
from sqa.data.audio import load_audio
from sqa.data.synthetic import load_synthetic


def per_clip(scorer: DNSMOS, paths: list[Path]) -> tuple[float, list[dict[str, float]]]:
    """Seconds and scores of `score_file` on each path in turn."""
    start = time.perf_counter()
    scores = [scorer.score_file(path) for path in paths]
    return time.perf_counter() - start, scores


def batched(
    scorer: DNSMOS, paths: list[Path], batch: int, workers: int
) -> tuple[float, list[dict[str, float]]]:
    """Seconds and scores (in path order) of `score_files`."""
    start = time.perf_counter()
    results = sorted(scorer.score_files(paths, batch_size=batch, num_workers=workers))
    elapsed = time.perf_counter() - start
    if any(r.error for r in results):
        raise RuntimeError(f"unreadable clips: {[r.error for r in results if r.error]}")
    return elapsed, [r.scores for r in results]


def window_count(paths: list[Path]) -> int:
    """The 9.01 s windows DNSMOS scores in these clips (short clips doubled until one fits)."""
    total = 0
    for path in paths:
        size = load_audio(path, 16000).size
        while size < WINDOW:
            size *= 2
        total += len(window_starts(size))
    return total


def main() -> None:
    """Print clips/s of both variants, their time ratio and their largest score difference."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/synthetic-seed0-clips14")
    parser.add_argument("--clips", type=int, default=0, help="first N test clips (0: all)")
    parser.add_argument("--batch", type=int, default=FILES_PER_BATCH, help="files per batch")
    parser.add_argument("--workers", type=int, default=0, help="decoding workers of the batched variant")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    corpus = load_synthetic(args.corpus)
    paths = [Path(c.path) for clips in corpus.test_sets().values() for c in clips]
    paths = paths[: args.clips] if args.clips else paths
    scorer = DNSMOS()
    scorer.score_file(paths[0])  # warm-up: the sessions' first run allocates
    before, after, diff = [], [], 0.0
    for _ in range(args.rounds):
        seconds, one = per_clip(scorer, paths)
        before.append(seconds)
        seconds, many = batched(scorer, paths, args.batch, args.workers)
        after.append(seconds)
        diff = max(diff, max(abs(a[k] - b[k]) for a, b in zip(one, many, strict=True) for k in OUTPUTS))
    windows = window_count(paths)
    print(
        f"\n{len(paths)} clips ({windows} windows), {args.rounds} rounds, medians; batches of {args.batch} "
        f"files, {args.workers} decoding worker(s)"
    )
    print(f"{'variant':<10} {'seconds':>8} {'clips/s':>8} {'windows/s':>10}")
    for name, times in (("per clip", before), ("batched", after)):
        median = statistics.median(times)
        print(f"{name:<10} {median:>8.2f} {len(paths) / median:>8.2f} {windows / median:>10.2f}")
    ratios = [b / a for b, a in zip(before, after, strict=True)]
    rounds = ", ".join(f"{r:.2f}" for r in ratios)
    print(f"per clip / batched time: {statistics.median(ratios):.2f}x (rounds: {rounds})")
    print(f"largest score difference between the variants: {diff:.2e}")
    if diff > 1e-4:
        raise SystemExit(f"the variants' scores differ by {diff:.2e}")


if __name__ == "__main__":
    main()
