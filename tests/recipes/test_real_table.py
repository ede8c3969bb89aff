"""recipes/real/table.py on run_info.json records written by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("real_table", REPO / "recipes" / "real" / "table.py")
table = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(table)


def write_run(run_dir: Path, tests: dict[str, tuple[float, float]], winner: str, constant: float) -> Path:
    entries = [{"name": n, "test": {"utt": {"srcc": s, "rmse": r}}} for n, (s, r) in tests.items()]
    info = {
        "candidates": {"entries": entries, "winner": winner},
        "learning_check": {"test": {"constant_rmse": constant}},
    }
    run_dir.mkdir(parents=True)
    (run_dir / "run_info.json").write_text(json.dumps(info), encoding="utf-8")
    return run_dir


def test_each_run_is_a_row_and_each_corpus_gets_the_mean_of_its_runs(tmp_path, capsys):
    a = write_run(
        tmp_path / "quality" / "seed0", {"logmel": (0.2, 20.0), "distillmos": (0.8, 10.0)}, "distillmos", 26.0
    )
    b = write_run(
        tmp_path / "quality" / "seed1",
        {"logmel": (0.4, 18.0), "distillmos": (0.6, 12.0), "ensemble(distillmos, logmel)": (0.7, 11.0)},
        "logmel",
        28.0,
    )
    assert table.main([str(a), str(b)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(
        "| corpus | run | logmel SRCC / RMSE | distillmos SRCC / RMSE | ensemble SRCC | chosen |"
    )
    assert (
        lines[2]
        == "| quality | seed0 | 0.200 / 20.000 | 0.800 / 10.000 | n/a | distillmos | 0.800 | 26.000 |"
    )
    assert (
        lines[3] == "| quality | seed1 | 0.400 / 18.000 | 0.600 / 12.000 | 0.700 | logmel | 0.400 | 28.000 |"
    )
    # Means over the corpus's runs: the chosen SRCC is (0.8 + 0.4) / 2; an ensemble in one run only has none.
    assert lines[4] == "| quality | mean of 2 | 0.300 / 19.000 | 0.700 / 11.000 | n/a | | 0.600 | 27.000 |"


def test_a_run_without_candidates_is_named(tmp_path, capsys):
    run_dir = tmp_path / "c" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "run_info.json").write_text("{}", encoding="utf-8")
    assert table.main([str(run_dir)]) == 2
    assert "records no candidates" in capsys.readouterr().err
