"""sqa-bench scores an export only on clips it was not trained on, and marks rows from its record.

The export is a tiny log-mel run trained on a 0-100 table without a split column (the per-system
corpus of tests/training/test_selection.py, its labels times 20): its run carves the test split
(test_split.csv) and the validation split (valid_split.csv) that its export keeps. Distill-MOS is
test_bench.py's stand-in (a score from each file's loudness), so that its scale map is computed
in a second.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from sqa import metrics
from sqa.baselines import bench, bench_training
from sqa.baselines.bench_config import read_config
from sqa.baselines.cli import BASELINES, BaselineModel
from sqa.data.corpus import Clip
from sqa.training.evaluation import evaluate
from sqa.training.run import run
from tests.baselines.test_bench import LoudnessScorer
from tests.conftest import REPO
from tests.training.test_selection import SR, compose_train, tiny_run_overrides, write_per_system_corpus

# The table's scale: the per-system corpus's 1-5 labels times 20, so that Distill-MOS's 1-5 scores
# need the scale map that a table without training clips cannot fit.
SCALE = 20.0


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of the CSV file `path`."""
    with path.open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def write_table(path: Path, rows: list[dict[str, str]], split: bool = True, factor: float = SCALE) -> Path:
    """`rows` as the CSV table `path`, scores times `factor`, without the split column unless `split`."""
    columns = [c for c in rows[0] if split or c != "split"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({**r, "score": repr(float(r["score"]) * factor)} for r in rows)
    return path


def split_ids(path: Path) -> set[str]:
    """The sample IDs a split file (test_split.csv, valid_split.csv) lists."""
    return {r["sample_id"] for r in read_rows(path)}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict[str, Path]:
    """The tiny run trained on `ratings.csv` (0-100, no split column), its export and the corpora benched.

    - `ratings`: the training table itself;
    - `copy`: its clips copied elsewhere under other file names, the table's sample IDs kept, with
      the per-system corpus's split column (whose test rows the run partly trained on);
    - `relabelled`: the training clips rated on 1-5 (the same audio, other labels);
    - `other`: another corpus of the same sample IDs, file names and table name, other audio.
    """
    folder = tmp_path_factory.mktemp("leak")
    manifest = write_per_system_corpus(folder / "corpus")
    rows = read_rows(manifest)
    ratings = write_table(folder / "corpus" / "ratings.csv", rows, split=False)
    run_dir = folder / "run"
    run(compose_train([*tiny_run_overrides(ratings), "data.corpus.score_range=[0,100]"]), run_dir)
    copied = folder / "copy"
    copied.mkdir()
    for r in rows:
        shutil.copyfile(manifest.parent / r["wav_path"], copied / f"renamed-{r['wav_path']}")
    copy = write_table(copied / "copy.csv", [{**r, "wav_path": f"renamed-{r['wav_path']}"} for r in rows])
    relabelled = write_table(folder / "corpus" / "relabelled.csv", rows, split=False, factor=1.0)
    rng = np.random.default_rng(1)
    other_folder = folder / "other"
    other_folder.mkdir()
    for r in rows:
        sf.write(other_folder / r["wav_path"], rng.normal(0, 0.2, SR // 2).astype(np.float32), SR)
    other = write_table(other_folder / "ratings.csv", rows, split=False)
    return {
        "folder": folder,
        "export": run_dir / "export",
        "ratings": ratings,
        "copy": copy,
        "relabelled": relabelled,
        "other": other,
    }


@pytest.fixture
def stand_in(monkeypatch):
    """`distillmos` scored by test_bench.py's LoudnessScorer."""
    monkeypatch.setitem(BASELINES, "distillmos", BaselineModel(LoudnessScorer, "stand-in", ("mos",), ()))


def recipe(folder: Path, corpora: list[str], predictors: list[str]) -> Path:
    """A recipe bench.yaml in `folder` of these corpora and predictors (YAML flow entries)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "bench.yaml"
    lines = ["corpora:", *(f"  - {c}" for c in corpora), "predictors:", *(f"  - {p}" for p in predictors)]
    path.write_text("\n".join([*lines, "bootstrap: 20", ""]), encoding="utf-8")
    return path


def corpus_entry(trained, name: str, **keys: object) -> str:
    """The recipe's entry of corpus `name` of `trained` (on 0-100 unless relabelled)."""
    scale = "[1, 5]" if name == "relabelled" else "[0, 100]"
    extra = "".join(f", {k}: {v}" for k, v in keys.items())
    return f"{{name: {name}, manifest: {trained[name]}, score_range: {scale}{extra}}}"


def export_entry(export: Path, name: str = "tiny", trained_on: str | None = None) -> str:
    """The recipe's entry of the export at `export`."""
    return f"{{export: {export}, name: {name}" + (f", trained_on: {trained_on}" if trained_on else "") + "}"


def benched(config: Path, out: Path) -> tuple[dict[tuple[str, str], dict], list[dict[str, str]]]:
    """bench.json's rows by (corpus, predictor) and bench_predictions.csv of a bench that succeeded."""
    assert bench.main([str(config), "--out", str(out)]) == 0
    record = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    return {(r["corpus"], r["predictor"]): r for r in record["rows"]}, read_rows(
        out / "bench_predictions.csv"
    )


def refused(config: Path, out: Path, capsys) -> str:
    """The one line of a bench refused before anything is scored (exit 2, nothing written)."""
    capsys.readouterr()
    assert bench.main([str(config), "--out", str(out)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sqa-bench: ")
    assert not out.exists()
    return lines[0].removeprefix("sqa-bench: ")


def compose_eval(overrides: list[str]) -> DictConfig:
    """eval.py's configuration with `overrides`."""
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("eval", overrides=overrides)


def copied_export(trained, name: str) -> Path:
    """A copy of the export beside the run (its recorded corpus is relative to the export's folder)."""
    export = trained["folder"] / name / "export"
    shutil.copytree(trained["export"], export)
    return export


def test_a_table_without_splits_gives_eval_pys_numbers_on_the_exports_test_split(
    trained, stand_in, tmp_path, capsys
):
    export = trained["export"]
    config = recipe(tmp_path, [corpus_entry(trained, "ratings")], ["distillmos", export_entry(export)])
    rows, clips = benched(config, tmp_path / "out")
    printed = capsys.readouterr().out
    expected = evaluate(compose_eval([f"export={export}"]), tmp_path / "eval")
    row = rows[("ratings", "tiny")]
    assert row["kind"] == "in-corpus"
    for block in (metrics.AVERAGE_KEY, "test"):
        for level in metrics.LEVELS:
            for name in metrics.METRIC_NAMES:
                got, want = row["results"][block][level][name], expected[block][level][name]
                # bench.json writes an undefined value as null.
                assert (got is None) == math.isnan(want), (block, level, name)
                assert got is None or got == pytest.approx(want, rel=1e-9, abs=1e-12), (block, level, name)
    # Its clips are the export's test split, each with eval.py's prediction.
    tested = split_ids(export / "test_split.csv")
    predicted = {r["sample_id"]: float(r["pred"]) for r in read_rows(tmp_path / "eval" / "predictions.csv")}
    mine = {c["sample_id"]: float(c["pred"]) for c in clips if c["predictor"] == "tiny"}
    assert set(mine) == set(predicted) == tested
    assert mine == pytest.approx(predicted, abs=1e-6)
    # Every row of the table tests the same clips; the constant and Distill-MOS's scale map use
    # the training clips the export records (its recorded corpus less its test and valid splits).
    for predictor in ("constant", "distillmos"):
        assert {c["sample_id"] for c in clips if c["predictor"] == predictor} == tested
    held = tested | split_ids(export / "valid_split.csv")
    train = [float(r["score"]) for r in read_rows(trained["ratings"]) if r["sample_id"] not in held]
    assert rows[("ratings", "constant")]["train_mean"] == pytest.approx(np.mean(train))
    assert rows[("ratings", "distillmos")]["scale_map"]["train_clips"] == len(train)
    for predictor in ("constant", "distillmos"):
        assert rows[("ratings", predictor)]["results"]["avg"]["utt"]["rmse"] is not None
    note = (
        f"ratings has no training or validation clips (a table without a split column): split as tiny "
        f"recorded it, its {len(tested)} test clips those eval.py tests, beside {len(held) - len(tested)} "
        f"validation and {len(train)} training clips"
    )
    assert f"note: {note}" in printed.splitlines()
    assert all(r["notes"] == [note] for r in rows.values())


def test_rows_are_marked_from_the_exports_record_not_its_file_name(trained, tmp_path):
    names = ("ratings", "copy", "relabelled", "other")
    config = read_config(
        recipe(tmp_path, [corpus_entry(trained, n) for n in names], [export_entry(trained["export"])])
    )
    plans = bench.planned(config)
    kinds = {name: plans[name].exports["tiny"][0] for name in names}
    # The training table; its clips under other file names beside a split column; the same audio
    # rated anew; another corpus of the training table's file name, sample IDs and file names.
    assert kinds == {
        "ratings": "in-corpus",
        "copy": "in-corpus",
        "relabelled": "cross-corpus",
        "other": "cross-corpus",
    }
    # Another corpus keeps every clip: none is one the export heard.
    assert plans["other"].exports["tiny"][1].clips == plans["other"].corpus.clips


def test_a_split_column_whose_test_rows_it_trained_on_loses_them_with_a_note(
    trained, stand_in, tmp_path, capsys
):
    export = trained["export"]
    config = recipe(tmp_path, [corpus_entry(trained, "copy")], ["distillmos", export_entry(export)])
    rows, clips = benched(config, tmp_path / "out")
    printed = capsys.readouterr().out
    test_rows = {r["sample_id"] for r in read_rows(trained["copy"]) if r["split"] == "test"}
    tested = split_ids(export / "test_split.csv")
    # The table's test rows for the constant and Distill-MOS; for the export those it was not trained on.
    for predictor in ("constant", "distillmos"):
        assert {c["sample_id"] for c in clips if c["predictor"] == predictor} == test_rows
    kept = {c["sample_id"] for c in clips if c["predictor"] == "tiny"}
    assert kept == test_rows & tested and 0 < len(kept) < len(test_rows)
    assert rows[("copy", "tiny")]["results"]["avg"]["utt"]["n"] == len(kept)
    source = trained["ratings"].resolve()
    note = (
        f"tiny on copy: {len(test_rows) - len(kept)} of {len(test_rows)} test clips left out, as the export "
        f"was trained or validated on them (the corpus its config.yaml records ({source}) less its test "
        f"split of {len(tested)} clips)"
    )
    assert printed.splitlines().count(f"note: {note}") == 1
    assert rows[("copy", "tiny")]["notes"] == [note] and rows[("copy", "distillmos")]["notes"] == []
    lines = {(r["corpus"], r["predictor"]): r for r in read_rows(tmp_path / "out" / "bench.csv")}
    assert lines[("copy", "tiny")]["notes"] == note


def test_every_clip_of_its_own_table_tested_still_leaves_out_those_it_trained_on(trained, tmp_path):
    config = read_config(
        recipe(tmp_path, [corpus_entry(trained, "ratings", test="all")], [export_entry(trained["export"])])
    )
    kind, corpus, notes = bench.planned(config)["ratings"].exports["tiny"]
    assert kind == "in-corpus"
    assert {c.sample_id for c in corpus.split("test")} == split_ids(trained["export"] / "test_split.csv")
    assert "test clips left out, as the export was trained or validated on them" in notes[-1]


def test_an_export_without_a_test_split_is_refused_on_its_own_table(trained, tmp_path, capsys):
    export = copied_export(trained, "untested")
    (export / "test_split.csv").unlink()
    config = yaml.safe_load((export / "config.yaml").read_text(encoding="utf-8"))
    del config["data"]["test_split_csv"]
    (export / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    unsplit = recipe(tmp_path / "a", [corpus_entry(trained, "ratings")], [export_entry(export, "untested")])
    assert refused(unsplit, tmp_path / "a" / "out", capsys) == (
        "untested on ratings: the corpus has no training or validation clips (a table without a split "
        "column) and the export records no test split, so any clip of it may be one the export was trained "
        "on; give the table a split column whose test rows it was not trained on"
    )
    # With a split column, every test row is one of its training clips: refused too.
    split = recipe(tmp_path / "b", [corpus_entry(trained, "copy")], [export_entry(export, "untested")])
    assert refused(split, tmp_path / "b" / "out", capsys) == (
        "untested on copy: all 9 test clips are clips the export was trained or validated on (the corpus "
        f"its config.yaml records ({trained['ratings'].resolve()}), every clip of it: the export records no "
        "test split); bench it on clips it was not trained on, e.g. a table whose split column's test rows "
        "are its test split (its test_split.csv)"
    )


def test_exports_that_split_one_table_differently_are_refused_on_it(trained, tmp_path, capsys):
    export = copied_export(trained, "resplit")
    ids = sorted(split_ids(export / "test_split.csv"))
    (export / "test_split.csv").write_text("sample_id\n" + "\n".join(ids[1:]) + "\n", encoding="utf-8")
    predictors = [export_entry(trained["export"]), export_entry(export, "resplit")]
    config = recipe(tmp_path / "a", [corpus_entry(trained, "ratings")], predictors)
    assert refused(config, tmp_path / "a" / "out", capsys) == (
        "ratings: the corpus has no training or validation clips (a table without a split column), and tiny "
        "and resplit record different splits of it; give the table a split column (e.g. from one export's "
        "test_split.csv), or bench those exports in separate recipes"
    )
    # A table with a split column: each export leaves out its own training clips.
    plans = bench.planned(read_config(recipe(tmp_path / "b", [corpus_entry(trained, "copy")], predictors)))
    kept = {
        name: {c.sample_id for c in plans["copy"].exports[name][1].split("test")}
        for name in ("tiny", "resplit")
    }
    assert kept["resplit"] == kept["tiny"] - {ids[0]}


def test_trained_on_is_checked_against_the_record(trained, tmp_path, capsys):
    export = trained["export"]
    corpora = [corpus_entry(trained, "ratings"), corpus_entry(trained, "relabelled")]
    agrees = recipe(tmp_path / "a", corpora, [export_entry(export, trained_on="ratings")])
    assert bench.planned(read_config(agrees))["ratings"].exports["tiny"][0] == "in-corpus"
    wrong = recipe(tmp_path / "b", corpora, [export_entry(export, trained_on="relabelled")])
    assert refused(wrong, tmp_path / "b" / "out", capsys) == (
        f"{wrong}: predictors[0].trained_on: relabelled is not the corpus tiny was trained on: not every "
        f"clip of it is one of the corpus its config.yaml records ({trained['ratings'].resolve()}) with the "
        "same label; leave trained_on out, the record marks the rows"
    )


def test_an_export_that_records_no_corpus_is_refused(trained, default_export, tmp_path, capsys):
    config = recipe(tmp_path, [corpus_entry(trained, "ratings")], [export_entry(default_export, "bare")])
    assert refused(config, tmp_path / "out", capsys) == (
        f"bare: sqa-bench cannot tell which clips {default_export.resolve()} was trained on: its config.yaml "
        "records no training corpus (a reader outside sqa's, or an export written by hand); bench an export "
        "of a training run, which records its corpus"
    )


def test_a_clip_is_the_recorded_one_by_sample_id_and_audio(tmp_path):
    audio = np.random.default_rng(0).normal(0, 0.1, SR // 4).astype(np.float32)
    sf.write(tmp_path / "a.wav", audio, SR)
    shutil.copyfile(tmp_path / "a.wav", tmp_path / "copy.wav")
    sf.write(tmp_path / "b.wav", audio * 0.5, SR)

    def clip(sample_id: str, name: str) -> Clip:
        """A test clip of the file `name`."""
        return Clip(sample_id, tmp_path / name, 3.0, "s", "d", "test")

    record = bench_training.Training("x", None, {"a": clip("a", "a.wav")})
    assert record.twin(clip("a", "a.wav")) is not None
    assert record.twin(clip("a", "copy.wav")) is not None  # the same bytes elsewhere
    assert record.twin(clip("a", "b.wav")) is None  # another recording of the same name
    assert record.twin(clip("z", "a.wav")) is None  # the file, under a sample ID the record lacks
    assert record.twin(clip("a", "gone.wav")) is None


def test_no_number_is_left_blank_without_its_reason(trained, stand_in, tmp_path):
    """A table without splits and no export trained on it: the blanks carry their reasons."""
    config = recipe(tmp_path, [corpus_entry(trained, "other")], ["distillmos"])
    rows, _ = benched(config, tmp_path / "out")
    for line in read_rows(tmp_path / "out" / "bench.csv"):
        for level in metrics.LEVELS:
            for name in ("rmse", "lcc", "srcc", "ktau"):
                cell = line[f"{level}_{name}"]
                assert (cell != "" and math.isfinite(float(cell))) or name in line["undefined"], (line, name)
    assert rows[("other", "distillmos")]["results"]["avg"]["undefined"]["utt"]["rmse"].startswith(
        "the scores are on another scale"
    )
