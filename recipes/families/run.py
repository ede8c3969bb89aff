"""Every model family side by side on the synthetic corpus (1-5) and its MUSHRA-style ratings (0-100).

For every corpus (`data=synthetic`, `data=synthetic_mushra`) and seed, each family as docs/guide.md
invokes it, all with the same short schedule (`--steps`, validation every `--val-every` steps,
`--bootstrap` interval resamples):

- `ssl_mos`: the default log-mel SSL-MOS model, trained with `retrieval.datastore=true`: the
  datastore is built after testing and changes nothing before it, so these runs also give the
  retrieval rows (the same models, scored three ways);
- `uncertainty`: `model=uncertainty loss=gaussian_nll` (calibration.json: the 90 % coverage);
- `retrieval`: the `ssl_mos` runs' datastores, each test clip scored by `sqa.scoring.scorer.Scorer`
  in `knn` and `fusion` mode (as `sqa-score --mode`), the metrics computed as a run computes them
  (`sqa.metrics.evaluate_sets`, same resamples and seed);
- `ensemble`: `sqa-ensemble` (mean) of the `ssl_mos` seeds' exports, evaluated with `eval.py`:
  one model, so one row without a spread over seeds;
- `fusion`: `model/backbone=fusion` (log-mel beside a tiny random-init wav2vec2);
- `aligned`: `model=aligned`;
- `constant`: each `ssl_mos` run's training mean (run_info.json `learning_check`) as every test
  clip's score, through the same metrics (system SRCC is undefined for it).

    .venv/bin/python recipes/families/run.py --out runs/families [--seeds 0 1 2]
        [--corpora synthetic synthetic_mushra] [--families ssl_mos uncertainty retrieval ...]
        [--steps 150] [--val-every 50] [--bootstrap 200]

A finished run (its export, or an evaluation's metrics.json) is reused, so the command resumes.
A run that fails is logged beside its folder (`<run>.log`) and its row says `fails: <last line>`.
Writes `<out>/families.json` (every run's figures) and prints the table of docs/results.md.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from sqa import metrics  # noqa: E402
from sqa.core.artefacts import read_metrics, read_predictions, write_metrics, write_predictions  # noqa: E402
from sqa.data.corpus import ROLES  # noqa: E402

PYTHON = sys.executable
CORPORA = ("synthetic", "synthetic_mushra")
FAMILIES = ("ssl_mos", "uncertainty", "retrieval", "ensemble", "fusion", "aligned", "constant")
# The trained families and their overrides (docs/guide.md).
TRAINED = {
    "ssl_mos": ["retrieval.datastore=true"],
    "uncertainty": ["model=uncertainty", "loss=gaussian_nll"],
    "fusion": ["model/backbone=fusion"],
    "aligned": ["model=aligned"],
}
# Families read from the ssl_mos runs.
FROM_SSL_MOS = ("retrieval", "ensemble", "constant")
RETRIEVAL_MODES = ("knn", "fusion")
ROWS = (
    "constant",
    "ssl_mos",
    "retrieval (knn)",
    "retrieval (fusion)",
    "ensemble",
    "uncertainty",
    "fusion",
    "aligned",
)
FIGURES = [(level, name) for name in ("srcc", "rmse") for level in ("utt", "sys")]
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})\]")
STOPPED = re.compile(r"Training stopped at step (\d+)")


class Failed(Exception):
    """A command of the recipe failed; the message is its last output line."""


def run_logged(command: list[str], log: Path) -> None:
    """Run `command` in the repository, its output into `log`; Failed with its last line on error."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w", encoding="utf-8") as fh:
        done = subprocess.run(command, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if done.returncode:
        lines = [line for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
        raise Failed(lines[-1].strip() if lines else f"exit status {done.returncode}")


def train(run_dir: Path, overrides: list[str]) -> None:
    """Run train.py into `run_dir` unless it finished there before."""
    if (run_dir / "export" / "model.pt").is_file():
        return
    command = [PYTHON, "train.py", f"hydra.run.dir={run_dir}", "overwrite=true", *overrides]
    run_logged(command, run_dir.with_suffix(".log"))


def seconds_per_step(run_dir: Path) -> float | None:
    """Training wall time per step from train.log: fit start (model summary) to 'Training stopped'.

    Validation checks fall inside it; testing and exporting after it do not.
    """
    start = end = None
    steps = 0
    for line in (run_dir / "train.log").read_text(encoding="utf-8").splitlines():
        stamp = STAMP.match(line)
        if stamp is None:
            continue
        when = datetime.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S,%f")
        if start is None and "Model summary" in line:
            start = when
        if stopped := STOPPED.search(line):
            end, steps = when, int(stopped.group(1))
    if start is None or end is None or steps == 0:
        return None
    return (end - start).total_seconds() / steps


def average_figures(results: dict[str, Any]) -> dict[str, Any]:
    """Test-average utterance and system SRCC and RMSE with their 95 % intervals."""
    avg = results[metrics.AVERAGE_KEY]
    ci = avg.get(metrics.CI_KEY) or {}
    out: dict[str, Any] = {}
    for level, name in FIGURES:
        value = avg[level].get(name)
        out[f"{level}_{name}"] = value if metrics.defined(value) else None
        out[f"{level}_{name}_ci"] = (ci.get(level) or {}).get(name)
    return out


def clip_path(row: dict[str, Any]) -> str:
    """A predictions.csv row's audio file (a relative one is relative to the repository: train.py's cwd)."""
    return str(REPO / row["wav_path"])


def set_metrics(pred: list[float], rows: list[dict[str, Any]], bootstrap: int, seed: int) -> dict[str, Any]:
    """Test metrics of predictions `pred` of predictions.csv `rows`, computed as a run computes them."""
    return metrics.evaluate_sets(
        pred,
        [r["mos"] for r in rows],
        [r["system_id"] for r in rows],
        [r["test_set"] for r in rows],
        bootstrap=bootstrap,
        seed=seed,
        apart=ROLES,
    )


def retrieval(run_dir: Path, out_dir: Path, mode: str, bootstrap: int, seed: int) -> dict[str, Any]:
    """Test figures of the run's export scored in `mode` (knn | fusion), computed as the run's own.

    The scores and metrics are kept in `out_dir` (predictions.csv, metrics.json) and reused.
    """
    from sqa.scoring.scorer import Scorer

    if not (out_dir / "metrics.json").is_file():
        rows = read_predictions(run_dir)
        scores = Scorer(run_dir / "export", mode=mode).score([clip_path(row) for row in rows])
        scored = [{**row, "pred": float(score)} for row, score in zip(rows, scores, strict=True)]
        results = set_metrics([r["pred"] for r in scored], scored, bootstrap, seed)
        out_dir.mkdir(parents=True, exist_ok=True)
        write_predictions(out_dir, scored)
        write_metrics(out_dir, results)
    return average_figures(read_metrics(out_dir))


def constant(run_dir: Path, bootstrap: int, seed: int) -> dict[str, Any]:
    """Test metrics of the run's training mean given to every test clip."""
    check = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))["learning_check"]
    rows = read_predictions(run_dir)
    figures = average_figures(set_metrics([check["train_mean"]] * len(rows), rows, bootstrap, seed))
    figures["learning_check_constant_rmse"] = check["test"]["constant_rmse"]
    return figures


def trained_figures(run_dir: Path, overrides: list[str]) -> dict[str, Any]:
    """Train (unless done), then the run's test figures, time per step and (with a spread) 90 % coverage."""
    train(run_dir, overrides)
    out = {**average_figures(read_metrics(run_dir)), "seconds_per_step": seconds_per_step(run_dir)}
    calibration = run_dir / "calibration.json"
    if calibration.is_file():
        record = json.loads(calibration.read_text(encoding="utf-8"))
        out["coverage90_clip_mos"] = record["clip_mos"]["coverage90"]
        out["coverage90_single_ratings"] = record["single_ratings"]["coverage90"]
    return out


def ensemble(base: Path, members: list[Path], seeds: Sequence[int], bootstrap: int) -> dict[str, Any]:
    """sqa-ensemble (mean) of `members`' exports, evaluated with eval.py."""
    export = base / "ensemble" / "export"
    if not (export / "model.pt").is_file():
        command = [str(Path(PYTHON).parent / "sqa-ensemble"), *map(str, members), "--output", str(export)]
        run_logged([*command, "--overwrite"], base / "ensemble" / "export.log")
    evaluated = base / "ensemble" / "eval"
    if not (evaluated / "metrics.json").is_file():
        command = [
            PYTHON,
            "eval.py",
            f"export={export}",
            f"hydra.run.dir={evaluated}",
            "overwrite=true",
            f"bootstrap={bootstrap}",
            f"seed={seeds[0]}",
        ]
        run_logged(command, base / "ensemble" / "eval.log")
    return average_figures(read_metrics(evaluated))


def derived(
    record: dict[str, Any], failure: str | None, compute: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """`record` with `compute()`'s figures, or the error that stopped them (`failure`: an earlier one)."""
    if failure is not None:
        return {**record, "error": failure}
    try:
        return {**record, **compute()}
    except Failed as err:
        return {**record, "error": str(err)}
    except (OSError, ValueError, RuntimeError, KeyError) as err:
        return {**record, "error": f"{type(err).__name__}: {err}"}


def one_corpus(
    out: Path, corpus: str, seeds: Sequence[int], families: Sequence[str], schedule: list[str], bootstrap: int
) -> list[dict[str, Any]]:
    """Every family's figures on `corpus`, a record per seed (one for the ensemble)."""
    base = out / corpus
    needs_ssl_mos = bool(set(families) & set(FROM_SSL_MOS))
    trained = [f for f in TRAINED if f in families or (f == "ssl_mos" and needs_ssl_mos)]
    records: list[dict[str, Any]] = []
    ssl_failures: dict[int, str] = {}
    for seed in seeds:
        for family in trained:
            run_dir = base / family / f"seed{seed}"
            overrides = [f"data={corpus}", f"seed={seed}", *schedule, *TRAINED[family]]
            record = {"corpus": corpus, "family": family, "seed": seed, "run": str(run_dir)}
            record = derived(record, None, partial(trained_figures, run_dir, overrides))
            if family == "ssl_mos" and "error" in record:
                ssl_failures[seed] = f"its ssl_mos run failed: {record['error']}"
            if family in families:
                records.append(record)
            print(f"done: {corpus} {family} seed={seed}", file=sys.stderr, flush=True)
        ssl_run = base / "ssl_mos" / f"seed{seed}"
        failure = ssl_failures.get(seed)
        for mode in RETRIEVAL_MODES if "retrieval" in families else ():
            record = {"corpus": corpus, "family": f"retrieval ({mode})", "seed": seed, "run": str(ssl_run)}
            out_dir = base / f"retrieval_{mode}" / f"seed{seed}"
            records.append(
                derived(
                    record,
                    failure,
                    partial(retrieval, ssl_run, out_dir, mode, bootstrap, seed),
                )
            )
        if "constant" in families:
            record = {"corpus": corpus, "family": "constant", "seed": seed, "run": str(ssl_run)}
            records.append(derived(record, failure, partial(constant, ssl_run, bootstrap, seed)))
        print(f"done: {corpus} seed={seed}", file=sys.stderr, flush=True)
    if "ensemble" in families:
        record = {"corpus": corpus, "family": "ensemble", "seed": None, "run": str(base / "ensemble")}
        members = [base / "ssl_mos" / f"seed{seed}" / "export" for seed in seeds]
        failure = next(iter(ssl_failures.values()), None)
        records.append(derived(record, failure, partial(ensemble, base, members, seeds, bootstrap)))
    return records


def cell(group: list[dict[str, Any]], key: str, digits: int) -> str:
    """Mean over the records of `key` ± its SD over them, then the mean of their interval bounds."""
    values = [r[key] for r in group if r.get(key) is not None and math.isfinite(r[key])]
    if not values:
        return "—"
    text = f"{np.mean(values):.{digits}f}"
    if len(group) > 1:
        text += f" ± {np.std(values, ddof=1):.{digits}f}" if len(values) > 1 else " (n=1)"
    bounds = [r[f"{key}_ci"] for r in group if r.get(f"{key}_ci")]
    if bounds:
        low, high = np.mean(bounds, axis=0)
        text += f" [{low:.{max(digits - 1, 1)}f}, {high:.{max(digits - 1, 1)}f}]"
    return text


def coverage_cell(group: list[dict[str, Any]]) -> str:
    """Mean 90 % coverage of the clip MOS / of single ratings, where the family has a spread."""
    clip = [r["coverage90_clip_mos"] for r in group if r.get("coverage90_clip_mos") is not None]
    ratings = [
        r["coverage90_single_ratings"] for r in group if r.get("coverage90_single_ratings") is not None
    ]
    if not clip:
        return "—"
    return f"{np.mean(clip):.3f} / {np.mean(ratings):.3f}"


def table(records: list[dict[str, Any]]) -> str:
    """Markdown: a row per corpus and family with the seeds' figures (see `cell`)."""
    lines = [
        "| corpus | family | runs | utt SRCC | sys SRCC | utt RMSE | sys RMSE "
        "| 90 % coverage (clip MOS / ratings) | s per step (seeds' range) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for corpus in CORPORA:
        digits = 2 if corpus == "synthetic_mushra" else 3
        for family in ROWS:
            group = [r for r in records if (r["corpus"], r["family"]) == (corpus, family)]
            if not group:
                continue
            failed = [r for r in group if "error" in r]
            if failed:
                where = "" if failed[0]["seed"] is None else f" (seed {failed[0]['seed']})"
                reason = failed[0]["error"].replace("|", "\\|")
                lines.append(f"| {corpus} | {family} | {len(group)} | fails{where}: {reason} |" + " — |" * 5)
                continue
            runs = "1 (of all seeds)" if family == "ensemble" else str(len(group))
            steps = [r["seconds_per_step"] for r in group if r.get("seconds_per_step") is not None]
            figures = [
                cell(group, f"{level}_{name}", 3 if name == "srcc" else digits) for level, name in FIGURES
            ]
            time = f"{np.mean(steps):.2f}" if steps else "—"
            if len(steps) > 1:
                time += f" ({min(steps):.2f}–{max(steps):.2f})"
            if family.startswith("retrieval"):
                time = "as ssl_mos (its runs)"
            lines.append(
                f"| {corpus} | {family} | {runs} | {' | '.join(figures)} | {coverage_cell(group)} | {time} |"
            )
    return "\n".join(lines)


def main() -> None:
    """Run every family (resuming finished runs) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--corpora", nargs="+", choices=CORPORA, default=list(CORPORA))
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES))
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--val-every", type=int, default=50)
    parser.add_argument("--bootstrap", type=int, default=200)
    args = parser.parse_args()
    out = args.out.resolve()
    schedule = [
        f"trainer.max_steps={args.steps}",
        f"trainer.val_check_interval={args.val_every}",
        f"bootstrap={args.bootstrap}",
        "trainer.enable_progress_bar=false",
    ]
    records: list[dict[str, Any]] = []
    for corpus in args.corpora:
        records += one_corpus(out, corpus, args.seeds, args.families, schedule, args.bootstrap)
        (out / "families.json").write_text(json.dumps(records, indent=1), encoding="utf-8")
    print(table(records))


if __name__ == "__main__":
    main()
