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
from sqa.training.evaluation import evaluate, evaluation_corpus, recorded_split
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
    assert corpus.domains == ["p1", "p2"]
    assert "domains ['new'] are unknown to the export; scored as its domain 'p1'" in caplog.text
    # A model without domain IDs scores every domain alike: mapped without a warning.
    caplog.clear()
    corpus = evaluation_corpus(Corpus(clips, ["p1", "p2", "new"]), ["p2", "p1"], uses_domains=False)
    assert [(c.sample_id, c.domain) for c in corpus.clips] == [("a", "p2"), ("b", "p2")]
    assert corpus.domains == ["p2", "p1"] and not caplog.records
    with pytest.raises(CorpusError, match="no test clips"):
        evaluation_corpus(Corpus(clips[2:], ["p1"]), ["p1"], uses_domains=False)


def export_copy(run_dir: Path, manifest: Path, export: Path, **changes) -> Path:
    """A copy of the tiny run's export at `export`, its corpus recorded relative to it, with `changes`.

    A change of None removes the key; `corpus` entries update the recorded corpus.
    """
    shutil.copytree(run_dir / "export", export)
    config = yaml.safe_load((export / "config.yaml").read_text())
    config["data"]["corpus"]["root"] = os.path.relpath(manifest.parent, export)
    config["data"]["corpus"].update(changes.pop("corpus", {}))
    for where, key, value in changes.pop("entries", ()):
        section = config[where] if where else config
        if value is None:
            section.pop(key, None)
        else:
            section[key] = value
    (export / "config.yaml").write_text(yaml.safe_dump(config))
    return export


def test_settings_come_from_the_command_line_then_the_export_then_the_defaults(
    tiny_run, tmp_path, monkeypatch
):
    from sqa.training import evaluation

    manifest, run_dir = tiny_run
    sizes, real = [], evaluation.MOSDataModule

    def datamodule(*args, **kwargs):
        sizes.append(kwargs["eval_batch_size"])
        return real(*args, **kwargs)

    recorded = export_copy(
        run_dir,
        manifest,
        tmp_path / "recorded",
        entries=[(None, "test", {"seed": 5, "bootstrap": 30}), ("data", "eval_batch_size", 3)],
    )
    bare = export_copy(
        run_dir,
        manifest,
        tmp_path / "bare",
        entries=[(None, "test", None), ("data", "eval_batch_size", None)],
    )
    monkeypatch.setattr(evaluation, "MOSDataModule", datamodule)
    monkeypatch.setenv("SQA_EVAL_MANIFEST", str(manifest))
    # Named relative to another working directory: the record is the resolved export folder.
    monkeypatch.chdir(tmp_path)
    cases = [
        # (overrides, output folder, seed, bootstrap, eval batch size)
        (["export=recorded"], "out/a/b", 5, 30, 3),
        (["export=recorded", "seed=3", "bootstrap=7", "eval_batch_size=2"], "existing", 3, 7, 2),
        (["export=bare", "seed=5", "bootstrap=30"], "c", 5, 30, 8),
        (["export=bare"], "d", 0, 1000, 8),
        # The user's corpus (an interpolation, recorded resolved) and its own batch size.
        (
            [
                "export=bare",
                "data=csv",
                "data.corpus.path=${oc.env:SQA_EVAL_MANIFEST}",
                "data.eval_batch_size=4",
            ],
            "e",
            0,
            1000,
            4,
        ),
        (
            [
                "export=bare",
                "data=csv",
                f"data.corpus.path={manifest}",
                "data.eval_batch_size=4",
                "eval_batch_size=2",
            ],
            "f",
            0,
            1000,
            2,
        ),
    ]
    (tmp_path / "existing").mkdir()
    infos, metrics = [], []
    for overrides, out, seed, bootstrap, size in cases:
        evaluate(compose_eval(overrides), out)
        info = json.loads((tmp_path / out / "eval_info.json").read_text())
        assert (info["seed"], info["bootstrap"], sizes[-1]) == (seed, bootstrap, size), overrides
        infos.append(info)
        metrics.append(json.loads((tmp_path / out / "metrics.json").read_text()))
    assert {p.name for p in (tmp_path / "out/a/b").iterdir()} == {
        "eval_info.json",
        "metrics.json",
        "predictions.csv",
        "plots",
    }
    # The same seed and resamples, from the export or the command line, give the same intervals.
    assert_same(metrics[0], metrics[2])
    assert metrics[0] != metrics[3]
    assert [i["export"] for i in infos] == [str(recorded.resolve())] * 2 + [str(bare.resolve())] * 4
    config = yaml.safe_load((recorded / "config.yaml").read_text())
    assert infos[0]["corpus"] == config["data"]["corpus"]
    assert infos[4]["corpus"]["path"] == infos[5]["corpus"]["path"] == str(manifest)
    # The fingerprint of the clips scored, named by the export's domains.
    corpus = recorded_corpus(config["data"]["corpus"], recorded / "config.yaml")
    expected = evaluation_corpus(corpus, config["domains"], uses_domains=False).fingerprint()
    assert {i["corpus_fingerprint"] for i in infos} == {expected}


def test_a_carved_test_split_applies_only_to_a_corpus_without_test_clips(tiny_run, tmp_path):
    manifest, run_dir = tiny_run
    expected = json.loads((run_dir / "metrics.json").read_text())
    rows = read_rows(manifest)
    test_ids = [r["sample_id"] for r in rows if r["split"] == "test"]
    # The corpus with its test clips as training clips (its audio named by absolute paths).
    untested = tmp_path / "corpus" / "untested.csv"
    untested.parent.mkdir()
    with untested.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            split = "train" if r["split"] == "test" else r["split"]
            writer.writerow({**r, "wav_path": str(manifest.parent / r["wav_path"]), "split": split})
    split = tmp_path / "test_split.csv"
    split.write_text("sample_id\n" + "\n".join(test_ids) + "\n")
    named = ["data=csv", f"data.corpus.path={untested}"]
    with pytest.raises(CorpusError, match="no test clips"):
        evaluate(compose_eval([f"export={run_dir / 'export'}", *named]), tmp_path / "none")
    results = evaluate(
        compose_eval([f"export={run_dir / 'export'}", *named, f"data.test_split_csv={split}"]),
        tmp_path / "named",
    )
    assert_same(results, expected)
    # A corpus with its own test clips keeps them (its test clips listed again are no training clips).
    own = ["data=csv", f"data.corpus.path={manifest}", f"data.test_split_csv={split}"]
    assert_same(evaluate(compose_eval([f"export={run_dir / 'export'}", *own]), tmp_path / "own"), expected)
    # The export's own copy of the split, whatever folder its record names.
    export = export_copy(
        run_dir,
        manifest,
        tmp_path / "export",
        corpus={"root": os.path.relpath(untested.parent, tmp_path / "export"), "path": untested.name},
        entries=[("data", "test_split_csv", "/trainer/runs/x/test_split.csv")],
    )
    shutil.copy(split, export / "test_split.csv")
    assert_same(evaluate(compose_eval([f"export={export}"]), tmp_path / "recorded"), expected)
    assert recorded_split(export, None) is None
    assert recorded_split(export, "/trainer/runs/x/test_split.csv") == export / "test_split.csv"


def test_main_writes_into_hydras_folder_and_ends_a_bad_export_in_one_line(tiny_run, tmp_path, monkeypatch):
    from sqa.training import evaluation

    _, run_dir = tiny_run
    logging = ["hydra/job_logging=none", "hydra/hydra_logging=none", "hydra.output_subdir=null"]
    monkeypatch.setattr(
        sys,
        "argv",
        ["eval.py", f"export={run_dir / 'export'}", f"hydra.run.dir={tmp_path / 'run'}", *logging],
    )
    evaluation.main()
    assert_same(
        json.loads((tmp_path / "run" / "metrics.json").read_text()),
        json.loads((run_dir / "metrics.json").read_text()),
    )
    missing = tmp_path / "missing"
    monkeypatch.setattr(
        sys, "argv", ["eval.py", f"export={missing}", f"hydra.run.dir={tmp_path / 'b'}", *logging]
    )
    with pytest.raises(SystemExit) as exit_info:
        evaluation.main()
    assert str(exit_info.value).startswith(f"Error: {missing}: not found")
