"""recipes/families/run.py without training: time per step from train.log, the constant row, the table."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from sqa import metrics
from sqa.core import artefacts
from sqa.core.atomic import atomic_write_json
from sqa.data.corpus import ROLES
from sqa.reports import learning

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("families_run", REPO / "recipes" / "families" / "run.py")
run = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(run)


def write_log(run_dir: Path, lines: list[str]) -> None:
    # Kept by hand: the arithmetic needs known timestamps; a run's own train.log is read below.
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_seconds_per_step_is_fit_start_to_training_stopped_over_the_steps(tmp_path):
    write_log(
        tmp_path,
        [
            "[2026-01-01 10:00:00,000][lightning.fabric.utilities.seed][INFO] - Seed set to 0",
            "[2026-01-01 10:00:05,000][sqa.training.callbacks][INFO] - Model summary:",
            "  | Name      | Type         | Params | Mode",
            "[2026-01-01 10:00:35,000][sqa.training.callbacks][INFO] - step 50 (epoch 0): train/loss 0.9",
            "[2026-01-01 10:01:05,500][sqa.training.run][INFO] - Training stopped at step 100: max_steps",
            "[2026-01-01 10:02:00,000][sqa.training.run][INFO] - Exported the best model to x",
        ],
    )
    assert run.seconds_per_step(tmp_path) == pytest.approx(60.5 / 100)


def test_seconds_per_step_reads_the_train_log_a_run_writes(tiny_run):
    _, run_dir = tiny_run
    seconds = run.seconds_per_step(run_dir)
    # The tiny run's 24 steps take seconds, not minutes, in all.
    assert seconds is not None and 0 < seconds * 24 < 120


def test_seconds_per_step_is_none_for_a_log_without_a_finished_fit(tmp_path):
    write_log(tmp_path, ["[2026-01-01 10:00:05,000][sqa.training.callbacks][INFO] - Model summary:"])
    assert run.seconds_per_step(tmp_path) is None


def test_constant_row_is_the_training_mean_through_the_runs_metrics(tmp_path):
    # Systems of 1, 3 and 7 clips: float sums of this mean give system means a bit apart.
    mean = 47.050166297117514
    sizes = {"A": 1, "B": 3, "C": 7}
    rows = [
        (f"{s}{i}", s, "test1", float(10 * k + i)) for k, (s, n) in enumerate(sizes.items()) for i in range(n)
    ]
    rows.append(("r1", "R", "reference", 100.0))
    # predictions.csv and run_info.json's learning check as a run writes them, of a model scoring 50.
    columns = ("sample_id", "system_id", "test_set", "mos")
    artefacts.write_predictions(
        tmp_path, [{**dict(zip(columns, row, strict=True)), "pred": 50.0} for row in rows]
    )
    labels, sets = [r[3] for r in rows], [r[2] for r in rows]
    tested = metrics.evaluate_sets([50.0] * len(rows), labels, [r[1] for r in rows], sets, apart=ROLES)
    check = learning.check(mean, None, tested, labels, sets, apart=ROLES)
    atomic_write_json(tmp_path / "run_info.json", {"learning_check": check})
    figures = run.constant(tmp_path, bootstrap=0, seed=0)
    expected = metrics.evaluate_sets(
        [mean] * len(rows),
        [r[3] for r in rows],
        [r[1] for r in rows],
        [r[2] for r in rows],
        apart=("reference",),
    )["avg"]
    assert figures["utt_rmse"] == pytest.approx(expected["utt"]["rmse"])
    assert figures["sys_rmse"] == pytest.approx(expected["sys"]["rmse"])
    # One score for every clip ranks nothing, at either level.
    assert figures["utt_srcc"] is None and figures["sys_srcc"] is None and figures["sys_srcc_ci"] is None
    # The learning check's constant RMSE: the same training mean over the same sets, references apart.
    assert figures["learning_check_constant_rmse"] == pytest.approx(expected["utt"]["rmse"])


def record(family: str, seed: int | None, value: float, **extra: object) -> dict:
    figures = {f"{level}_{name}": value for level, name in run.FIGURES}
    intervals = {f"{level}_{name}_ci": [value - 0.1, value + 0.1] for level, name in run.FIGURES}
    return {"corpus": "synthetic", "family": family, "seed": seed, **figures, **intervals, **extra}


def test_table_cells_are_the_seeds_mean_sd_and_mean_interval_bounds():
    records = [
        record("ssl_mos", 0, 0.5, seconds_per_step=0.2),
        record("ssl_mos", 1, 0.7, seconds_per_step=0.4),
        record("uncertainty", 0, 0.6, coverage90_clip_mos=0.9, coverage90_single_ratings=0.8),
        record("ensemble", None, 0.65),
    ]
    lines = run.table(records).splitlines()
    ssl = next(line for line in lines if "| ssl_mos |" in line)
    assert "0.600 ± 0.141 [0.50, 0.70]" in ssl
    assert ssl.endswith("| — | 0.30 (0.20–0.40) |")
    uncertainty = next(line for line in lines if "| uncertainty |" in line)
    assert "| 0.900 / 0.800 |" in uncertainty
    ensemble = next(line for line in lines if "| ensemble |" in line)
    # One model: no spread over seeds.
    assert "| 1 (of all seeds) | 0.650 [0.55, 0.75] |" in ensemble


def test_a_failed_family_is_a_row_saying_why():
    failed = {
        "corpus": "synthetic_mushra",
        "family": "aligned",
        "seed": 1,
        "error": "ValueError: bad | scale",
    }
    line = run.table([failed]).splitlines()[-1]
    assert line.startswith("| synthetic_mushra | aligned | 1 | fails (seed 1): ValueError: bad \\| scale |")
    assert line.replace("\\|", "").count("|") == 10  # nine cells; the escaped bar is text


def test_cell_leaves_undefined_values_out():
    assert run.cell([{"utt_srcc": None}, {"utt_srcc": math.nan}], "utt_srcc", 3) == "—"
