"""What candidates cost: the default run (every candidate of `candidates.use`) against one model alone.

    .venv/bin/python benchmarks/candidates.py [--clips 100] [--rounds 1] [--out runs/bench-candidates]
        [--use '[logmel_pitch,distillmos,calibrated]' ...]

The runs are the same `train.py` command line on the same small user-style table
(`data=small_table data.corpus.clips=N`, 0.76 of it training clips after the carved test and
validation splits): one with the defaults, and the two models a default run trained alone before
candidates, by its clip-count rule: `candidates=null` (log-mel from scratch, 80 training clips or
more) and `experiment=small_corpus` (frozen Distill-MOS under a new head, fewer). Each is timed end
to end as a subprocess (Python start, corpus check, training, tests, export), in turn for
`--rounds` rounds; the figures are ratios of the medians, measured in one session so that the
machine's load cancels out. Each `--use` adds a default run with another candidate list
(`candidates.use=<list>`), timed and compared alike. For each run of several candidates it also
prints the median seconds each candidate took (its run_info.json), which shows where the time goes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The runs of one model each, as the clip-count rule trained them; every other run has candidates.
ALONE = ("logmel alone", "distillmos alone")


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


def candidate_seconds(run_dir: Path) -> dict[str, float]:
    """Each candidate's wall seconds in the run at `run_dir`, as its run_info.json records them."""
    record = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))["candidates"]
    return {entry["name"]: entry["seconds"] for entry in record["entries"]}


def main() -> None:
    """Command line: time both runs, print the seconds and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-candidates")
    parser.add_argument("--use", action="append", default=[], help="another candidate list to time")
    args = parser.parse_args()
    data = ["data=small_table", f"data.corpus.clips={args.clips}"]
    # The corpus is generated once, by an untimed run, before anything is timed; the f0 of the
    # pitch candidate are extracted in the first default run, as in a user's first run.
    timed([*data, "candidates=null"], args.out / "warm-up")
    runs = {
        "logmel alone": ["candidates=null"],
        "distillmos alone": ["experiment=small_corpus"],
        "default": [],
        **{f"candidates.use={use}": [f"candidates.use={use}"] for use in args.use},
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    parts: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    for r in range(args.rounds):
        for number, (name, overrides) in enumerate(runs.items()):
            seconds[name].append(timed([*data, *overrides], args.out / f"{number}-{r}"))
            if name not in ALONE:
                parts[name].append(candidate_seconds(args.out / f"{number}-{r}"))
    median = {name: statistics.median(times) for name, times in seconds.items()}
    for many in ("default", *(f"candidates.use={use}" for use in args.use)):
        each = ", ".join(
            f"{candidate} {statistics.median(p[candidate] for p in parts[many]):.1f} s"
            for candidate in parts[many][0]
            if all(candidate in p for p in parts[many])
        )
        print(f"{args.clips} clips: {many} {median[many]:.1f} s, of which {each}")
        for one in ALONE:
            print(
                f"{args.clips} clips: {one} {median[one]:.1f} s, {many} {median[many]:.1f} s: "
                f"ratio {median[many] / median[one]:.2f}"
            )


if __name__ == "__main__":
    main()
