"""eval.py: an export scored on a labelled corpus reproduces its training run's test results."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from sqa.data.corpus import Clip, Corpus, CorpusError
from sqa.data.readers import recorded_corpus
from sqa.exports.format import ExportError
from sqa.training.evaluation import evaluate, evaluation_corpus
from sqa.training.run_outputs import recorded_data
from tests.conftest import REPO
from tests.training.test_selection import compose_train


def compose_eval(overrides: list[str]):
    with initialize_config_dir(str(REPO / "conf"), version_base="1.3"):
        return compose("eval", overrides=overrides)


def assert_same(a, b, where: str = "") -> None:
    """Nested metrics equal to 1e-4 (NaN equal to NaN)."""
    if isinstance(a, dict):
        assert set(a) == set(b), where
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), where
    else:
        assert a == pytest.approx(b, abs=1e-4), where


def read_rows(path: Path) -> list[dict]:
    with path.open() as fh:
        return list(csv.DictReader(fh))


def test_eval_of_a_runs_export_reproduces_its_test_results(tiny_run, tmp_path):
    manifest, run_dir = tiny_run
    config = yaml.safe_load((run_dir / "export" / "config.yaml").read_text())
    assert config["data"]["name"] == "read_csv_manifest"
    assert config["data"]["corpus"] == {
        "_target_": "sqa.data.readers.read_csv_manifest",
        # The manifest's folder relative to the export, the manifest relative to that folder.
        "root": os.path.relpath(manifest.parent, run_dir / "export"),
        "path": "manifest.csv",
        "default_split": None,
        "sample_rate_filter": None,
        "score_range": [1.0, 5.0],
        "encoding": None,
        "replicates": "per_listener",
        "reference_systems": [],
        "anchor_systems": [],
    }
    assert config["test"] == {"seed": 0, "bootstrap": 20}
    # The corpus recorded in the export, and the same corpus named on the command line.
    for name, extra in (("recorded", []), ("named", ["data=csv", f"data.corpus.path={manifest}"])):
        out = tmp_path / name
        results = evaluate(compose_eval([f"export={run_dir / 'export'}", *extra]), out)
        expected = json.loads((run_dir / "metrics.json").read_text())
        assert_same(json.loads((out / "metrics.json").read_text()), expected)
        assert_same(results, expected)
        ours, theirs = read_rows(out / "predictions.csv"), read_rows(run_dir / "predictions.csv")
        assert [r["sample_id"] for r in ours] == [r["sample_id"] for r in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert float(a["pred"]) == pytest.approx(float(b["pred"]), abs=1e-5)
        assert {p.name for p in (out / "plots").iterdir()} == {"test_utt.png", "test_sys.png"}


def test_eval_refuses_a_recorded_reader_outside_sqa(tiny_run, tmp_path):
    _, run_dir = tiny_run
    export = tmp_path / "export"
    export.mkdir()
    (export / "model.pt").write_bytes((run_dir / "export" / "model.pt").read_bytes())
    config = yaml.safe_load((run_dir / "export" / "config.yaml").read_text())
    marker = tmp_path / "ran"
    hostile = (
        {"_target_": "os.system", "command": f"touch {marker}"},
        {"_target_": "sqa.data.readers.read_csv_manifest", "path": "${oc.env:HOME}/m.csv"},
    )
    # The export loader refuses both before eval.py reads anything ...
    for corpus, message in zip(
        hostile, ("refusing to build 'os.system'", "holds an interpolation"), strict=True
    ):
        config["data"]["corpus"] = corpus
        (export / "config.yaml").write_text(yaml.safe_dump(config))
        with pytest.raises(ExportError, match=message):
            evaluate(compose_eval([f"export={export}"]), tmp_path / "out")
    # ... and the corpus reader checks the recorded corpus again on its own.
    messages = ("refusing corpus reader 'os.system'", "corpus argument 'path' is not a plain value")
    for corpus, message in zip(hostile, messages, strict=True):
        with pytest.raises(CorpusError, match=message):
            recorded_corpus(corpus, export / "config.yaml")
    assert not marker.exists()


def test_eval_py_command_line(tiny_run, tmp_path):
    _, run_dir = tiny_run
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "eval.py", f"export={run_dir / 'export'}", f"hydra.run.dir={tmp_path}"]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "metrics.json").read_text() == (run_dir / "metrics.json").read_text()


def test_recorded_corpus_is_relative_to_the_export_and_readable(synthetic_root, tmp_path, monkeypatch):
    export = tmp_path / "runs" / "x" / "export"
    spec = recorded_data(compose_train([f"data.corpus.root={synthetic_root}"]), export)
    assert spec["corpus"]["_target_"] == "sqa.data.synthetic.load_synthetic"
    assert spec["corpus"]["root"] == os.path.relpath(synthetic_root, export)
    export.mkdir(parents=True)
    corpus = recorded_corpus(spec["corpus"], export / "config.yaml")
    assert len(corpus.test_sets()) == 3
    # The default root is an interpolation relative to the working directory: recorded from
    # where it resolves, relative to the export (a relative export path too).
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SQA_DATA_DIR", raising=False)
    spec = recorded_data(compose_train([]), Path("runs/x/export"))
    assert spec["corpus"]["root"] == os.path.join("..", "..", "..", "data", "synthetic-seed0-clips14")
    # A manifest named relative to a root is recorded relative to that root.
    csv_train = compose_train(["data=csv", "data.corpus.root=corpus", "data.corpus.path=sub/m.csv"])
    recorded = recorded_data(csv_train, "runs/x/export")["corpus"]
    assert (recorded["root"], recorded["path"]) == (os.path.join("..", "..", "..", "corpus"), "sub/m.csv")


def test_a_moved_export_evaluates_on_its_moved_corpus_and_names_no_path_of_the_trainer(tiny_run, tmp_path):
    manifest, run_dir = tiny_run
    # Both moved together, keeping their relative places: no option is needed.
    together = tmp_path / "together"
    shutil.copytree(manifest.parent, together / manifest.parent.name)
    shutil.copytree(run_dir, together / run_dir.name)
    assert_same(
        evaluate(compose_eval([f"export={together / run_dir.name / 'export'}"]), tmp_path / "a"),
        json.loads((run_dir / "metrics.json").read_text()),
    )
    # Named by its run directory, the export's record is still read relative to the export.
    assert_same(
        evaluate(compose_eval([f"export={together / run_dir.name}"]), tmp_path / "a2"),
        json.loads((run_dir / "metrics.json").read_text()),
    )
    # The export alone on another machine: the corpus is named by its new folder.
    export = tmp_path / "elsewhere" / "model"
    shutil.copytree(run_dir / "export", export)
    corpus = tmp_path / "data" / "my corpus"
    shutil.copytree(manifest.parent, corpus)
    moved = r"not a .csv file; if the corpus has moved, .* data.corpus.root=DIR"
    with pytest.raises(CorpusError, match=moved):
        evaluate(compose_eval([f"export={export}"]), tmp_path / "b")
    results = evaluate(compose_eval([f"export={export}", f"data.corpus.root={corpus}"]), tmp_path / "c")
    assert_same(results, json.loads((run_dir / "metrics.json").read_text()))
    # No file of the export names the training machine's folders.
    for path in export.iterdir():
        text = path.read_bytes()
        for folder in (manifest.parent, run_dir, Path(tempfile.gettempdir())):
            assert str(folder).encode() not in text, path.name


def test_clips_of_domains_the_export_does_not_know_are_scored_as_its_first(caplog):
    clips = [
        Clip("a", Path("a.wav"), 3.0, "s", "p2", "test", "test1"),
        Clip("b", Path("b.wav"), 3.0, "s", "new", "test", "test1"),
        Clip("c", Path("c.wav"), 3.0, "s", "p1", "train"),
    ]
    corpus = evaluation_corpus(Corpus(clips, ["p1", "p2", "new"]), ["p1", "p2"], uses_domains=True)
    assert [(c.sample_id, c.domain) for c in corpus.clips] == [("a", "p2"), ("b", "p1")]
    assert corpus.domains == ["p1", "p2"] and "['new'] are unknown to the export" in caplog.text
    with pytest.raises(CorpusError, match="no test clips"):
        evaluation_corpus(Corpus(clips[2:], ["p1"]), ["p1"], uses_domains=False)
