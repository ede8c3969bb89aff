"""A default run on the MUSHRA-style synthetic corpus (0-100) against the same corpus rescaled to 1-5.

    python recipes/synthetic/mushra.py [--data data] [--out runs/synthetic/mushra] [overrides ...]

Writes `<data>/synthetic-mushra-seed0-clips14/mushra_1to5.csv` (every rating r as 1 + 4 r / 100,
all else alike), trains `train.py data=synthetic_mushra` and `train.py data=csv` on the rescaled
manifest with the same data settings, then prints each run's average test metrics on its own
scale, the 1-5 run's errors mapped onto 0-100, and the constant (training-mean) predictor's RMSE.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sqa.data.synthetic import MUSHRA_MANIFEST, load_synthetic_mushra  # noqa: E402

# The synthetic data config's loader settings, given to the CSV run too.
SAME_DATA = ["data.batch_size=8", "data.eval_batch_size=16", "data.num_workers=0", "data.preload=true"]


def rescale(manifest: Path, out: Path) -> None:
    """Write `manifest` with every score r as 1 + 4 r / 100 (0-100 onto 1-5) to `out`."""
    with manifest.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows({**r, "score": repr(1.0 + 4.0 * float(r["score"]) / 100.0)} for r in rows)


def constant_rmse(run_dir: Path, train_mean: float) -> float:
    """Utterance RMSE over the headline test clips of predicting the training mean for every clip."""
    with (run_dir / "predictions.csv").open(encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["test_set"] not in ("reference", "anchor")]
    labels = np.array([float(r["mos"]) for r in rows])
    return float(np.sqrt(np.mean((labels - train_mean) ** 2)))


def main() -> None:
    """Run both trainings and print their figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, default=Path("runs/synthetic/mushra"))
    args, overrides = parser.parse_known_args()
    root = (args.data / "synthetic-mushra-seed0-clips14").resolve()
    corpus = load_synthetic_mushra(root)
    rescale(root / MUSHRA_MANIFEST, root / "mushra_1to5.csv")
    runs = {
        "0-100": (["data=synthetic_mushra", f"data.corpus.root={root}"], 1.0),
        "1-5": (["data=csv", f"data.corpus.path={root / 'mushra_1to5.csv'}", *SAME_DATA], 25.0),
    }
    train_mean = float(np.mean([c.mos for c in corpus.split("train")]))
    for name, (data, _) in runs.items():
        run_dir = (args.out / name).resolve()
        if not (run_dir / "metrics.json").is_file():
            command = [sys.executable, str(REPO / "train.py"), *data, f"hydra.run.dir={run_dir}"]
            subprocess.run([*command, "trainer.enable_progress_bar=false", *overrides], check=True, cwd=REPO)
    print("| corpus scale | avg utt RMSE (0-100) | constant RMSE (0-100) | avg utt SRCC | avg sys SRCC |")
    print("| --- | --- | --- | --- | --- |")
    for name, (_, to_100) in runs.items():
        run_dir = (args.out / name).resolve()
        avg = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))["avg"]
        mean = train_mean if to_100 == 1.0 else 1.0 + 4.0 * train_mean / 100.0
        utt, sys_, ci = avg["utt"], avg["sys"], avg.get("ci", {})

        def cell(level: str, metric: str, value: float, ci=ci) -> str:
            low, high = (ci.get(level) or {}).get(metric) or (float("nan"), float("nan"))
            return f"{value:.3f} [{low:.2f}, {high:.2f}]"

        print(
            f"| {name} | {utt['rmse'] * to_100:.2f} | {constant_rmse(run_dir, mean) * to_100:.2f} "
            f"| {cell('utt', 'srcc', utt['srcc'])} | {cell('sys', 'srcc', sys_['srcc'])} |"
        )


if __name__ == "__main__":
    main()
