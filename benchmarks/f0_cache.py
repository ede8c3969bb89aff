"""Effect of the on-disk f0 cache: data time of a first and a second epoch, as a ratio.

    .venv/bin/python benchmarks/f0_cache.py [--corpus data/synthetic-seed0-clips14] [--clips 200]

Both epochs load and resample every training clip and return its f0 track, exactly as the
training data loader does; only the first computes f0 (WORLD DIO + StoneMask). The same is done
without a cache for reference. All timings come from this one process, so the ratios compare
like with like on a noisy machine.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from sqa.data.pitch import F0Extractor
from sqa.data.synthetic import load_synthetic
from sqa.training.datamodule import ClipDataset


def epoch_seconds(dataset: ClipDataset) -> float:
    """Seconds to draw every item of `dataset` once."""
    start = time.perf_counter()
    for i in range(len(dataset)):
        dataset[i]
    return time.perf_counter() - start


def main() -> None:
    """Run the benchmark and print the timings and ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--corpus", default="data/synthetic-seed0-clips14")
    parser.add_argument("--clips", type=int, default=200)
    args = parser.parse_args()
    corpus = load_synthetic(args.corpus)
    clips = corpus.split("train")[: args.clips]
    with tempfile.TemporaryDirectory() as cache:
        cached = ClipDataset(clips, corpus, 16000, f0_extractor=F0Extractor(cache_dir=cache))
        first, second = epoch_seconds(cached), epoch_seconds(cached)
        computed = cached.f0_extractor.computed
    uncached = ClipDataset(clips, corpus, 16000, f0_extractor=F0Extractor())
    plain = ClipDataset(clips, corpus, 16000)
    no_cache, audio_only = epoch_seconds(uncached), epoch_seconds(plain)
    print(f"{len(clips)} clips; f0 computations with the cache over two epochs: {computed}")
    print(f"epoch 1 (cold cache)  {first:7.2f} s")
    print(f"epoch 2 (warm cache)  {second:7.2f} s   epoch1/epoch2 = {first / second:.1f}x")
    print(f"epoch without cache   {no_cache:7.2f} s   no-cache/warm = {no_cache / second:.1f}x")
    print(f"audio only (no f0)    {audio_only:7.2f} s   warm/audio-only = {second / audio_only:.2f}x")


if __name__ == "__main__":
    main()
