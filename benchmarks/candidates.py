"""What candidates cost: the default run (every candidate of `candidates.use`) against one model alone,
and against the default run of another sqa checkout.

    .venv/bin/python benchmarks/candidates.py [--clips 100] [--rounds 1] [--out runs/bench-candidates]
        [--use '[logmel_pitch,distillmos,calibrated]' ...] [--baseline DIR] [--no-alone]
        [--manifest data/real/sisec18.csv --score-range 0 100] [--load 2]

The runs are the same `train.py` command line on the same table: by default the small user-style
table (`data=small_table data.corpus.clips=N`, 0.76 of it training clips after the carved test and
validation splits), or with `--manifest` a CSV manifest of your own (a real listening test). One
run has the defaults; two train the models a default run trained alone before candidates, by its
clip-count rule: `candidates=null` (log-mel from scratch, 80 training clips or more) and
`experiment=small_corpus` (frozen Distill-MOS under a new head, fewer). Each `--use` adds a default
run with another candidate list (`candidates.use=<list>`). `--baseline DIR` adds the default run of
the sqa checkout in DIR (an earlier version, `git worktree add DIR <commit>`), run by its own
train.py and configs with this environment's packages: the ratio of this checkout's default to
it is what a change of the default run saves. Each run is timed end to end as a subprocess
(Python start, corpus check, training, tests, export), in turn for `--rounds` rounds; the figures
are ratios of the medians, measured in one session so that the machine's load cancels out. For each
run of several candidates it also prints the median seconds each candidate took (its run_info.json),
which shows where the time goes. `--load N` keeps N other processes busy beside every timed run,
as on a shared lab server; each run gets OpenMP's settings as a user's shell gives them (the
benchmark's own `GOMP_SPINCOUNT` and `OMP_WAIT_POLICY` are not passed on), so a checkout that sets
its own spin (`sqa.core.openmp`) is timed with it and one that does not without.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The runs of one model each, as the clip-count rule trained them; every other run has candidates.
ALONE = ("logmel alone", "distillmos alone")
BASELINE = "baseline default"


@contextmanager
def beside(count: int) -> Iterator[None]:
    """Run the block beside `count` processes that each keep one core busy: other jobs on a shared machine."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        # Let them start spinning before anything is timed.
        time.sleep(0.5 if hogs else 0)
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def alternated(
    rounds: int, hogs: int, names: Collection[str], measure: Callable[[str], float]
) -> dict[tuple[str, str], float]:
    """The median of `measure(name)` for every name, idle and beside `hogs` busy processes.

    Names and loads alternate over `rounds` rounds, so the machine's own drift falls on every name alike.
    """
    values: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for load in ("idle", "busy"):
            with beside(hogs if load == "busy" else 0):
                for name in names:
                    values.setdefault((load, name), []).append(measure(name))
    return {key: statistics.median(measured) for key, measured in values.items()}


def timed(overrides: list[str], run_dir: Path, checkout: Path = REPO, load: int = 0) -> float:
    """Seconds of one `train.py` run of `checkout` with `overrides` into `run_dir` (replaced if there).

    `load` busy processes run beside it. The run gets OpenMP's settings as a user's shell gives
    them: none of this benchmark's own `GOMP_SPINCOUNT` or `OMP_WAIT_POLICY`.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")}
    command = [
        sys.executable,
        str(checkout / "train.py"),
        f"hydra.run.dir={run_dir}",
        "overwrite=true",
        *overrides,
    ]
    with beside(load):
        start = time.perf_counter()
        subprocess.run(
            command, check=True, cwd=checkout, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return time.perf_counter() - start


def candidate_seconds(run_dir: Path) -> dict[str, float]:
    """Each candidate's wall seconds in the run at `run_dir`, as its run_info.json records them."""
    record = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))["candidates"]
    return {entry["name"]: entry["seconds"] for entry in record["entries"]}


def main() -> None:
    """Command line: time the runs, print the seconds and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clips", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--out", type=Path, default=REPO / "runs" / "bench-candidates")
    parser.add_argument("--use", action="append", default=[], help="another candidate list to time")
    parser.add_argument("--baseline", type=Path, help="another sqa checkout whose default run to time")
    parser.add_argument("--manifest", type=Path, help="a CSV manifest instead of the small table")
    parser.add_argument("--score-range", type=float, nargs=2, metavar=("LOW", "HIGH"))
    parser.add_argument("--no-alone", action="store_true", help="leave out the runs of one model alone")
    parser.add_argument("--load", type=int, default=0, help="busy processes beside every timed run")
    args = parser.parse_args()
    if args.manifest:
        data = ["data=csv", f"data.corpus.path={args.manifest.resolve()}"]
        if args.score_range:
            data.append(f"data.corpus.score_range=[{args.score_range[0]},{args.score_range[1]}]")
        table = args.manifest.name
    else:
        data = ["data=small_table", f"data.corpus.clips={args.clips}"]
        table = f"{args.clips} clips"
    out = args.out.resolve()
    # The corpus is generated once, by an untimed run, before anything is timed; the f0 of the
    # pitch candidate are extracted in the first default run, as in a user's first run.
    timed([*data, "candidates=null"], out / "warm-up")
    alone = {"logmel alone": ["candidates=null"], "distillmos alone": ["experiment=small_corpus"]}
    runs = {
        **({} if args.no_alone else alone),
        "default": [],
        **{f"candidates.use={use}": [f"candidates.use={use}"] for use in args.use},
        **({BASELINE: []} if args.baseline else {}),
    }
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    parts: dict[str, list[dict[str, float]]] = {name: [] for name in runs}
    for r in range(args.rounds):
        for number, (name, overrides) in enumerate(runs.items()):
            checkout = args.baseline.resolve() if name == BASELINE else REPO
            seconds[name].append(timed([*data, *overrides], out / f"{number}-{r}", checkout, args.load))
            if name not in ALONE:
                parts[name].append(candidate_seconds(out / f"{number}-{r}"))
    median = {name: statistics.median(times) for name, times in seconds.items()}
    for many in (name for name in runs if name not in ALONE):
        each = ", ".join(
            f"{candidate} {statistics.median(p[candidate] for p in parts[many]):.1f} s"
            for candidate in parts[many][0]
            if all(candidate in p for p in parts[many])
        )
        print(f"{table}: {many} {median[many]:.1f} s, of which {each}")
        for one in (one for one in ALONE if one in median):
            print(
                f"{table}: {one} {median[one]:.1f} s, {many} {median[many]:.1f} s: "
                f"ratio {median[many] / median[one]:.2f}"
            )
    if args.baseline:
        print(
            f"{table}: default {median['default']:.1f} s against {args.baseline}'s default "
            f"{median[BASELINE]:.1f} s: ratio {median['default'] / median[BASELINE]:.2f}"
        )


if __name__ == "__main__":
    main()
