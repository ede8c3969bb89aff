"""A training step of the `logmel_pitch` candidate: this checkout against another, idle and busy.

    .venv/bin/python benchmarks/logmel_step.py --baseline <another sqa checkout> [--steps 10]
        [--rounds 3] [--hogs 2]

The step is the default run's: `MOSPredictor(LogMelBackbone(), pitch="intonation")` on a batch
of 15 clips of 10 s (the datamodule's `batch_size` and `max_train_seconds`) with their f0, an L1
loss and SGD; its forward, backward and update are timed over `--steps` steps after three
warm-up steps. Each checkout's step runs in a fresh process that imports that checkout's sqa,
with OpenMP's spin as `train.py` sets it, on the machine as it is (`idle`) and beside `--hogs`
processes that each keep a core busy (`busy`); checkouts and loads alternate over `--rounds`
rounds. Printed: the median seconds a step of each, their ratio under the same load, and the
warm-up steps' losses of both (equal where the two compute the same function).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from candidates import alternated

from sqa.core.openmp import SPIN_COUNT

REPO = Path(__file__).resolve().parents[1]
# What a child process runs, with the checkout's root first on sys.path: the median seconds a
# step, then the losses of the three warm-up steps.
CHILD = """
import statistics, sys, time, torch
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
steps = int(sys.argv[1])
torch.manual_seed(0)
model = MOSPredictor(LogMelBackbone(), pitch="intonation", score_range=[0, 100]).train()
optimiser = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
data = torch.Generator().manual_seed(1)
wav = 0.1 * torch.randn(15, 160000, generator=data)
lengths = torch.full((15,), 160000)
lengths[3] = 90000
f0 = 200 + 50 * torch.rand(15, 500, generator=data)
target = 1 + 4 * torch.rand(15, generator=data)
def step():
    start = time.perf_counter()
    optimiser.zero_grad()
    loss = (model(wav, lengths, f0=f0).score - target).abs().mean()
    loss.backward()
    optimiser.step()
    return time.perf_counter() - start, loss.item()
losses = [step()[1] for _ in range(3)]
print(statistics.median(step()[0] for _ in range(steps)))
print(" ".join(f"{loss:.9f}" for loss in losses))
"""


def timed(checkout: Path, steps: int) -> tuple[float, str]:
    """The median seconds a step of `checkout`'s sqa, in a fresh process, and its warm-up losses."""
    # OpenMP's spin as train.py sets it, unless the user set one.
    env = {"GOMP_SPINCOUNT": SPIN_COUNT, **os.environ}
    # Run in the checkout: `python -c` puts the working directory first on sys.path.
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(steps)],
        cwd=checkout,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    seconds, losses = out.stdout.strip().splitlines()[-2:]
    return float(seconds), losses


def main() -> None:
    """Command line: time both checkouts idle and busy, print the medians and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another sqa checkout")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=2)
    args = parser.parse_args()
    checkouts = {"this checkout": REPO, "baseline": args.baseline.resolve()}
    losses: dict[str, str] = {}

    def measure(name: str) -> float:
        """Seconds a step of `name`'s checkout; its warm-up losses kept."""
        step, losses[name] = timed(checkouts[name], args.steps)
        return step

    median = alternated(args.rounds, args.hogs, checkouts, measure)
    print(f"{os.cpu_count()} cores, {args.hogs} busy processes beside `busy`, baseline {args.baseline}")
    print("| load | this checkout | baseline | this / baseline |")
    print("|---|---|---|---|")
    for load in ("idle", "busy"):
        this, base = median[(load, "this checkout")], median[(load, "baseline")]
        print(f"| {load} | {this:.3f} s | {base:.3f} s | {this / base:.2f} |")
    for name, values in losses.items():
        print(f"warm-up losses, {name}: {values}")


if __name__ == "__main__":
    main()
