"""A Distill-MOS fine-tuning step under torch's thread settings, on an idle machine and beside a busy one.

    .venv/bin/python benchmarks/contention.py [--segments 8] [--steps 4] [--rounds 3] [--hogs 2]
        [--variants passive ...]

Each variant times `--steps` steps (after one warm-up step) of `distillmos_ft`'s fine-tuning step:
the forward and backward pass of `--segments` 7.68 s segments through Distill-MOS's transformer,
its CNN kept per segment (`benchmarks/distillmos_finetune.py`'s "kept CNN"), in a fresh process,
because OpenMP reads its settings when torch loads:

- `default`: torch's own choice, one intra-op thread per core, OpenMP's default wait policy
  (a thread spins at a barrier before it sleeps);
- `passive`: the same threads with `OMP_WAIT_POLICY=PASSIVE` (a waiting thread sleeps at once);
- `spin 10k`, `spin 100k`: GNU OpenMP's spin before sleeping shortened to `GOMP_SPINCOUNT`
  iterations (its default is 300,000; torch's wheels use GNU OpenMP);
- `one thread`: `OMP_NUM_THREADS=1`;
- `bf16`: `default` with the step under `torch.autocast("cpu", torch.bfloat16)`;
- `spin 10k, 1 a pass`: `spin 10k` (what `train.py` sets) with the transformer taking one segment
  at a time, as it did before it took a step's segments together (`SEGMENTS_PER_PASS`).

Each variant runs on the machine as it is (`idle`) and beside `--hogs` processes that each keep a
core busy (`busy`), as another job on a shared server does; variants and loads alternate over
`--rounds` rounds. Printed: the median seconds a step of each, and each one's ratio to `default`
under the same load, measured in the same run so that the machine's own load cancels out.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from candidates import alternated

VARIANTS = {
    "default": {},
    "passive": {"OMP_WAIT_POLICY": "PASSIVE"},
    "spin 10k": {"GOMP_SPINCOUNT": "10000"},
    "spin 100k": {"GOMP_SPINCOUNT": "100000"},
    "one thread": {"OMP_NUM_THREADS": "1"},
    "bf16": {"SQA_BENCH_BF16": "1"},
    "spin 10k, 1 a pass": {"GOMP_SPINCOUNT": "10000", "SQA_BENCH_PASS": "1"},
}
# What a child process runs: the steps, timed; the median seconds a step on stdout.
CHILD = """
import os, statistics, sys, time, torch
from sqa.models import distillmos
from sqa.models.distillmos import SEGMENT, DistillMosBackbone
distillmos.SEGMENTS_PER_PASS = int(os.environ.get("SQA_BENCH_PASS", distillmos.SEGMENTS_PER_PASS))
segments, steps = int(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
backbone = DistillMosBackbone(freeze_cnn=True)
backbone.keep_fronts(1 << 30)
x = 0.3 * torch.randn(segments, SEGMENT)
bf16 = os.environ.get("SQA_BENCH_BF16") == "1"
def step():
    backbone.zero_grad()
    start = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = backbone.segment_frames(x).float().pow(2).mean()
    loss.backward()
    return time.perf_counter() - start
step()
print(statistics.median(step() for _ in range(steps)))
"""


def timed(variant: dict[str, str], segments: int, steps: int) -> float:
    """The median seconds a step of `variant`'s settings, in a fresh process."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "GOMP_SPINCOUNT", "SQA_BENCH_PASS")
    }
    env.update(variant)
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(segments), str(steps)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    """Command line: time every variant idle and busy, print the medians and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--segments", type=int, default=8)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=2)
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    args = parser.parse_args()
    variants = {name: VARIANTS[name] for name in ["default", *args.variants] if name in VARIANTS}
    median = alternated(
        args.rounds, args.hogs, variants, lambda name: timed(variants[name], args.segments, args.steps)
    )
    print(
        f"{args.segments} segments a step, {os.cpu_count()} cores, {args.hogs} busy processes beside `busy`"
    )
    print("| load | variant | seconds a step | default / this |")
    print("|---|---|---|---|")
    for (load, name), value in median.items():
        print(f"| {load} | {name} | {value:.3f} | {median[(load, 'default')] / value:.2f} |")


if __name__ == "__main__":
    main()
