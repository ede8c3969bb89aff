"""A Distill-MOS fine-tuning step: the whole network against its fixed CNN kept per segment.

    .venv/bin/python benchmarks/distillmos_finetune.py [--segments 8] [--repeats 5] [--threads 1]

One training step's forward and backward pass over `--segments` 7.68 s segments of noise, through
Distill-MOS v7's architecture (random weights: the arithmetic is the same) with its CNN fixed
(`freeze_cnn`, as `distillmos_ft` trains it), timed three ways in turn for `--repeats` rounds:

- whole: every segment through the spectrogram, the CNN and the transformer, as before fronts
  were kept;
- kept CNN: `keep_fronts` on and the segments' CNN outputs already kept (after the first step
  of a run, every step), so the transformer alone computes;
- kept CNN + 5 layers: `frozen_layers=5`, the top 2 transformer layers alone learn.

Torch runs `--threads` intra-op threads (benchmarks/README.md says why one is the default).
Printed: the median seconds of each and the ratios whole / kept, measured in the same run so
that the machine's load cancels out.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from sqa.models.distillmos import SEGMENT, DistillMosBackbone


def step_seconds(backbone: DistillMosBackbone, segments: torch.Tensor) -> float:
    """Seconds of one forward and backward pass of segments (S, SEGMENT) through the backbone."""
    backbone.zero_grad()
    start = time.perf_counter()
    backbone.segment_frames(segments).pow(2).mean().backward()
    return time.perf_counter() - start


def main() -> None:
    """Command line: time the three ways, print the medians and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    segments = 0.3 * torch.randn(args.segments, SEGMENT)
    ways = {
        "whole": DistillMosBackbone(freeze_cnn=True),
        "kept CNN": DistillMosBackbone(freeze_cnn=True),
        "kept CNN + 5 layers": DistillMosBackbone(freeze_cnn=True, frozen_layers=5),
    }
    for name, backbone in ways.items():
        if name != "whole":
            backbone.keep_fronts(1 << 30)
        # The first step computes (and keeps) the fronts; a run's later steps are what is timed.
        step_seconds(backbone, segments)
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, backbone in ways.items():
            seconds[name].append(step_seconds(backbone, segments))
    median = {name: statistics.median(times) for name, times in seconds.items()}
    for name, value in median.items():
        print(f"{args.segments} segments, {name}: {value:.3f} s a step")
    for name in ("kept CNN", "kept CNN + 5 layers"):
        print(f"whole / {name}: {median['whole'] / median[name]:.2f}")


if __name__ == "__main__":
    main()
