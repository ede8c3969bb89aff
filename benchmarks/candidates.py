"""What candidates cost: the default run (every candidate of `candidates.use`) against one model alone.

    .venv/bin/python benchmarks/candidates.py [--clips 100] [--rounds 1] [--out runs/bench-candidates]

Both runs are the same `train.py` command line on the same small user-style table
(`data=small_table data.corpus.clips=N`, 0.7 of it training clips after the carved test and
validation splits), one with the defaults and one with `candidates=null` (the log-mel model alone,
what a default run trained before candidates). Each is timed end to end as a subprocess (Python
start, corpus check, training, tests, export), alternating for `--rounds` rounds; the figure is
the ratio of the medians, measured in one session so that the machine's load cancels out.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(overrides: list[str], run_dir: Path) -> float:
    """Seconds of one `train.py` run with `overrides` into `run_dir` (replaced if there)."""
    command = [
        sys.executable,
        str(REPO / "train.py"),
        f"hydra.run.dir={run_dir}",
        "overwrite=true",
        *overrides,
    ]
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    """Command line: time both runs, print the seconds and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-candidates")
    args = parser.parse_args()
    data = ["data=small_table", f"data.corpus.clips={args.clips}"]
    # The corpus is generated once, by an untimed run, before anything is timed; the f0 of the
    # pitch candidate are extracted in the first default run, as in a user's first run.
    timed([*data, "candidates=null"], args.out / "warm-up")
    alone, default = [], []
    for r in range(args.rounds):
        alone.append(timed([*data, "candidates=null"], args.out / f"alone-{r}"))
        default.append(timed(data, args.out / f"default-{r}"))
    a, d = statistics.median(alone), statistics.median(default)
    print(f"{args.clips} clips: one model {a:.1f} s, the default candidates {d:.1f} s: ratio {d / a:.2f}")


if __name__ == "__main__":
    main()
