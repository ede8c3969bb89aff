"""recipes/real/table.py on run_info.json records written by sqa's own writers.

The candidates' record is `sqa.training.candidates.record` of the candidates a run tried, the
constant's RMSE `sqa.reports.learning.check` of the test labels, each written as a run writes
run_info.json; a run that trained one model is the tiny run of tests/conftest.py.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import SimpleNamespace

from sqa.core.atomic import atomic_write_json
from sqa.data.corpus import LabelCounts
from sqa.reports import learning
from sqa.training import candidates
from sqa.training.candidates import Tried
from sqa.training.racing import Standing
from sqa.training.selection import choose_rule

REPO = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("real_table", REPO / "recipes" / "real" / "table.py")
table = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(table)

# The selection rule of a run whose validation sets can rank systems (candidates compare on it).
RULE = choose_rule({"v": LabelCounts(40, 9, 20, 9, clips_per_system=4)})
TRAIN_MEAN = 50.0


def tried(name: str, srcc: float, rmse: float, members: tuple[str, ...] = ()) -> Tried:
    """A candidate after its test step: test average utterance SRCC and RMSE `srcc`, `rmse`."""
    prepared = SimpleNamespace(module=SimpleNamespace(selection=RULE))
    tested = SimpleNamespace(test_results={"avg": {"utt": {"srcc": srcc, "rmse": rmse}}})
    return Tried(name, prepared, None, None, Standing(srcc, None), members=members, tested=tested)


def write_run(run_dir: Path, tests: dict[str, tuple[float, float]], winner: str, constant: float) -> Path:
    """A run's run_info.json: its candidates' record and a learning check of constant RMSE `constant`."""
    entries = [
        tried(n, s, r, ("distillmos", "logmel") if n.startswith("ensemble") else ())
        for n, (s, r) in tests.items()
    ]
    record = candidates.record(entries, next(t for t in entries if t.name == winner), {})
    # Test labels the training mean misses by `constant` each: the constant's RMSE is `constant`.
    labels = [TRAIN_MEAN - constant, TRAIN_MEAN + constant]
    results = entries[0].tested.test_results
    check = learning.check(TRAIN_MEAN, None, results, labels, ["test"] * 2)
    run_dir.mkdir(parents=True)
    atomic_write_json(run_dir / "run_info.json", {"candidates": record, "learning_check": check})
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


def test_runs_chosen_another_way_add_their_choice_and_its_srcc_matched_by_corpus_and_run(tmp_path, capsys):
    tests = {"logmel": (0.2, 20.0), "distillmos": (0.8, 10.0)}
    old = write_run(tmp_path / "old" / "quality" / "s0", tests, "logmel", 26.0)
    old1 = write_run(tmp_path / "old" / "quality" / "s1", tests, "logmel", 26.0)
    new = write_run(tmp_path / "new" / "quality" / "s0", tests, "distillmos", 26.0)
    new1 = write_run(tmp_path / "new" / "quality" / "s1", tests, "logmel", 26.0)
    # Given in another order: matched by corpus and run, not by position.
    args = [str(old), str(old1), "--other", str(new1), str(new), "--other-name", "folds"]
    assert table.main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("| chosen | chosen SRCC | folds chose | folds SRCC | constant RMSE |")
    assert lines[2].endswith("| logmel | 0.200 | distillmos | 0.800 | 26.000 |")
    assert lines[3].endswith("| logmel | 0.200 | logmel | 0.200 | 26.000 |")
    assert lines[4].endswith("| | 0.200 | | 0.500 | 26.000 |")
    assert table.main([str(old), "--other", str(new1)]) == 2
    assert (
        "--other has no run quality/s0 (runs are matched by corpus and run name)" in capsys.readouterr().err
    )


def test_a_run_without_candidates_is_named(tiny_run, tmp_path, capsys):
    # A run that trained one model, as train.py leaves it: its run_info.json has no candidates.
    run_dir = tmp_path / "c" / "r"
    run_dir.mkdir(parents=True)
    shutil.copy(tiny_run[1] / "run_info.json", run_dir / "run_info.json")
    assert table.main([str(run_dir)]) == 2
    assert "records no candidates" in capsys.readouterr().err
