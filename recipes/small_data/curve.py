"""The learning curve on small tables: which model beats the constant predictor from how many clips.

For every table size and seed, on the small user-style table (`data=small_table`, six systems,
mixed material, formats and rates; 1-5 or MUSHRA-style 0-100):

- `logmel`: the default log-mel SSL-MOS model trained from scratch with the default settings;
- `distillmos`: the pretrained Distill-MOS backbone (`model/backbone=distillmos`) with the SSL-MOS
  head, the backbone frozen (`finetune.freeze_backbone_steps`), on the same splits;
- `zero_shot`: Distill-MOS's own score without training (`sqa-baseline --model distillmos`) on
  the same test clips (on 0-100, mapped by the line fitted on the training clips);
- `midi_dio`, `midi_crepe` (only when named in --methods): `logmel` with the MIDI-pitch branch
  (`model.pitch=midi`), its f0 by WORLD DIO or by torchcrepe's tiny CREPE network (`f0.method`);
- `crepe` (only when named in --methods): `distillmos` with CREPE tiny's embedding as the frozen
  encoder instead (`model/backbone=crepe`);
- `constant`: the training labels' mean for every clip (each run's learning check).

    .venv/bin/python recipes/small_data/curve.py --out runs/small_data [--sizes 30 60 120 240]
        [--seeds 0 1 2] [--scale mos|mushra] [--methods logmel distillmos zero_shot midi_dio midi_crepe crepe]

A finished run (its run_info.json or metrics.json present) is reused, so the command resumes.
Writes `<out>/curve.json` (every run's figures) and prints the table of docs/results.md.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
METHODS = ("logmel", "distillmos", "zero_shot", "midi_dio", "midi_crepe", "crepe")
# The pitch-branch and CREPE-encoder runs compare CREPE with what it replaces; not part of the curve.
DEFAULT_METHODS = ("logmel", "distillmos", "zero_shot")
# The frozen pretrained encoders (distillmos, crepe): the head alone learns, for this many steps,
# on whole clips (so that each clip passes through the backbone once: sqa.training.frame_cache).
FROZEN_STEPS = 400


def train(run_dir: Path, overrides: list[str]) -> None:
    """Run train.py into `run_dir` unless it finished there before."""
    if (run_dir / "export" / "model.pt").is_file():
        return
    command = [PYTHON, "train.py", f"hydra.run.dir={run_dir}", "overwrite=true", *overrides]
    subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)


def split_manifest(corpus_root: Path, run_dir: Path, out: Path) -> Path:
    """The table's manifest with the split column of `run_dir`'s carved test and validation splits."""
    splits = {}
    for name, split in (("test_split.csv", "test"), ("valid_split.csv", "valid")):
        with (run_dir / name).open(encoding="utf-8") as fh:
            splits.update({row["sample_id"]: split for row in csv.DictReader(fh)})
    with (corpus_root / "ratings.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, [*rows[0], "split"])
        writer.writeheader()
        for row in rows:
            row["wav_path"] = str(corpus_root / row["wav_path"])
            writer.writerow({**row, "split": splits.get(row["sample_id"], "train")})
    return out


def figures(run_dir: Path) -> dict[str, Any]:
    """Test utterance RMSE and SRCC (with its interval) of a run or baseline directory."""
    avg = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))["avg"]
    return {"rmse": avg["utt"]["rmse"], "srcc": avg["utt"]["srcc"], "srcc_ci": avg["ci"]["utt"]["srcc"]}


def one(out: Path, clips: int, seed: int, scale: str, methods: list[str]) -> list[dict[str, Any]]:
    """Every method's figures on the table of `clips` clips drawn with `seed`."""
    data = [
        "data=small_table",
        f"data.corpus.clips={clips}",
        f"data.corpus.seed={seed}",
        f"data.corpus.scale={scale}",
        f"data.corpus.root={out / 'data' / f'{scale}-seed{seed}-clips{clips}'}",
        f"seed={seed}",
    ]
    base = out / scale / f"clips{clips}" / f"seed{seed}"
    # The log-mel model from scratch, also where the size rule would pick the small-corpus preset.
    train(base / "logmel", [*data, "candidates=null"])
    check = json.loads((base / "logmel" / "run_info.json").read_text(encoding="utf-8"))["learning_check"]
    rows = [{"method": "constant", "rmse": check["test"]["constant_rmse"], "srcc": None, "srcc_ci": None}]
    rows.append({"method": "logmel", **figures(base / "logmel")})
    same_splits = [
        f"data.test_split_csv={base / 'logmel' / 'test_split.csv'}",
        f"data.valid_split_csv={base / 'logmel' / 'valid_split.csv'}",
    ]
    # The frozen pretrained encoders under the same head and settings.
    for method in ("distillmos", "crepe"):
        if method in methods:
            train(
                base / method,
                [
                    *data,
                    *same_splits,
                    f"model/backbone={method}",
                    "head_init=train_mean",
                    "optim=adam",
                    "optim.lr=1e-3",
                    "data.max_train_seconds=null",
                    f"trainer.max_steps={FROZEN_STEPS}",
                    f"finetune.freeze_backbone_steps={FROZEN_STEPS}",
                ],
            )
            rows.append({"method": method, **figures(base / method)})
    for f0 in ("dio", "crepe"):
        if f"midi_{f0}" in methods:
            train(
                base / f"midi_{f0}",
                [*data, "candidates=null", *same_splits, "model.pitch=midi", f"f0.method={f0}"],
            )
            rows.append({"method": f"midi_{f0}", **figures(base / f"midi_{f0}")})
    if "zero_shot" in methods:
        zero = base / "zero_shot"
        if not (zero / "run" / "metrics.json").is_file():
            manifest = split_manifest(
                out / "data" / f"{scale}-seed{seed}-clips{clips}", base / "logmel", zero / "m.csv"
            )
            command = [
                str(Path(PYTHON).parent / "sqa-baseline"),
                "--model",
                "distillmos",
                "--corpus",
                "csv",
                "--manifest",
                str(manifest),
                "--run-dir",
                str(zero / "run"),
            ]
            if scale == "mushra":
                command += ["--score-range", "0", "100"]
            subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.DEVNULL)
        rows.append({"method": "zero_shot", **figures(zero / "run")})
    for row in rows:
        row.update(clips=clips, seed=seed, scale=scale, constant_rmse=check["test"]["constant_rmse"])
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown per method and size: test RMSE and SRCC over seeds, and the seeds beating the constant."""
    lines = [
        "| scale | clips | method | test utt RMSE (mean ± SD) "
        "| test utt SRCC (mean; seeds whose 95 % CI > 0) | seeds with RMSE below the constant's |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    keys = sorted({(r["scale"], r["clips"]) for r in rows})
    order = ["constant", *METHODS]
    for scale, clips in keys:
        for method in order:
            group = [r for r in rows if (r["scale"], r["clips"], r["method"]) == (scale, clips, method)]
            if not group:
                continue
            rmse = np.array([r["rmse"] for r in group], dtype=float)
            cell = f"{rmse.mean():.3f} ± {rmse.std():.3f}"
            if method == "constant":
                lines.append(f"| {scale} | {clips} | constant (training mean) | {cell} | — | — |")
                continue
            srcc = [r["srcc"] for r in group if r["srcc"] is not None and math.isfinite(r["srcc"])]
            above = sum(
                1 for r in group if r["srcc_ci"] and r["srcc_ci"][0] is not None and r["srcc_ci"][0] > 0
            )
            beats = sum(1 for r in group if r["rmse"] < r["constant_rmse"])
            mean_srcc = f"{np.mean(srcc):+.3f}" if srcc else "n/a"
            n = len(group)
            lines.append(
                f"| {scale} | {clips} | {method} | {cell} | {mean_srcc}; {above}/{n} | {beats}/{n} |"
            )
    return "\n".join(lines)


def main() -> None:
    """Run the curve (resuming finished runs) and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes", type=int, nargs="+", default=[30, 60, 120, 240])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--scale", choices=("mos", "mushra"), default="mos")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(DEFAULT_METHODS))
    args = parser.parse_args()
    out = args.out.resolve()
    rows = []
    for clips in args.sizes:
        for seed in args.seeds:
            rows += one(out, clips, seed, args.scale, args.methods)
            (out / f"curve-{args.scale}.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
            print(f"done: {args.scale} clips={clips} seed={seed}", file=sys.stderr, flush=True)
    print(table(rows))


if __name__ == "__main__":
    main()
