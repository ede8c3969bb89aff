"""eval.py: an export scored on a labelled corpus reproduces its training run's test results."""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from hydra import compose, initialize_config_dir

from sqa.core import ownership
from sqa.data.corpus import DEFAULT_DOMAIN, Clip, Corpus, CorpusError
from sqa.data.pitch import F0Extractor
from sqa.data.readers import read_csv_manifest, recorded_corpus
from sqa.data.valid_split import read_valid_split, write_valid_split
from sqa.exports.format import ExportError, export_predictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.scoring.scorer import Scorer
from sqa.training.evaluation import evaluate, evaluation_corpus, recorded_split
from sqa.training.run_outputs import recorded_data
from tests.conftest import REPO
from tests.training.test_selection import compose_train, write_per_system_corpus


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
    with path.open(encoding="utf-8") as fh:
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
        "columns": None,
        # How the table is read (separator, a column per rater) is recorded with it.
        "delimiter": None,
        "rater_columns": None,
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


# 10-20 s of subprocesses or scoring: with the slow tests, as the default run is at its budget.
@pytest.mark.slow
def test_eval_py_command_line(tiny_run, tmp_path):
    _, run_dir = tiny_run
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "eval.py", f"export={run_dir / 'export'}", f"hydra.run.dir={tmp_path}"]
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "metrics.json").read_text() == (run_dir / "metrics.json").read_text()
    # Started over on its own output (Hydra's evaluation.log, .hydra/ and all): replaced, not refused.
    again = subprocess.run(
        [*cmd, "overwrite=true"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "evaluation.log").is_file()
    assert ownership.foreign(tmp_path, also_mine=[".lock"]) == []


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
    known = frozenset({"s"})
    corpus = evaluation_corpus(
        Corpus(clips, ["p1", "p2", "new"], (0.0, 10.0), known), ["p1", "p2"], uses_domains=True
    )
    # The corpus's scale and its list of known systems (which validation checks clips against) are kept.
    assert corpus.score_range == (0.0, 10.0) and corpus.systems == known
    assert [(c.sample_id, c.domain) for c in corpus.clips] == [("a", "p2"), ("b", "p1")]
    assert corpus.domains == ["p1", "p2"]
    assert "domains ['new'] are unknown to the export; scored as its domain 'p1'" in caplog.text
    # A model without domain IDs scores every domain alike: mapped without a warning.
    caplog.clear()
    corpus = evaluation_corpus(Corpus(clips, ["p1", "p2", "new"]), ["p2", "p1"], uses_domains=False)
    assert [(c.sample_id, c.domain) for c in corpus.clips] == [("a", "p2"), ("b", "p2")]
    assert corpus.domains == ["p2", "p1"] and not caplog.records


# The tests below score with an untrained model (no training): each takes seconds.


@pytest.fixture(scope="module")
def corpus_manifest(tmp_path_factory) -> Path:
    """The tiny run's per-system corpus (train, valid and three test systems)."""
    return write_per_system_corpus(tmp_path_factory.mktemp("eval-corpus"))


@pytest.fixture(scope="module")
def untrained() -> MOSPredictor:
    """A small model with domain IDs and a pitch branch: scored with both, as the export says."""
    torch.manual_seed(0)
    return MOSPredictor(
        LogMelBackbone(n_mels=16, channels=8), num_domains=2, domain_dim=4, pitch="midi", pitch_dim=8
    )


def carved_split(manifest: Path, path: Path) -> Path:
    """`path` listing the test clips of `manifest`, written as a run writes the test split it carved."""
    write_valid_split(read_csv_manifest(manifest).split("test"), path)
    return path


def copy_corpus(manifest: Path, folder: Path) -> Path:
    """A copy of the corpus folder of `manifest` at `folder`; the copy's manifest."""
    shutil.copytree(manifest.parent, folder)
    return folder / manifest.name


def labelled_export(
    model: MOSPredictor,
    manifest: Path,
    export: Path,
    domains: list[str],
    test: dict | None = None,
    files: tuple[Path, ...] = (),
    **data_changes,
) -> Path:
    """An export of `model` recording the CSV corpus `manifest` as a training run does, with `data_changes`.

    A change of None removes the key from the recorded `data`.
    """
    data = recorded_data(compose_train(["data=csv", f"data.corpus.path={manifest}"]), export)
    for key, value in data_changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    return export_predictor(
        model, export, 16000, domains, data=data, test=test, files=files, f0_extractor=F0Extractor()
    )


def test_settings_come_from_the_command_line_then_the_export_then_the_defaults(
    untrained, corpus_manifest, tmp_path, monkeypatch, caplog
):
    from sqa.training import evaluation

    manifest = corpus_manifest
    modules, real = [], evaluation.MOSDataModule

    def datamodule(*args, **kwargs):
        modules.append(real(*args, **kwargs))
        return modules[-1]

    recorded, moved = (
        labelled_export(
            untrained,
            source,
            tmp_path / name,
            ["d", "e"],
            test={"seed": 5, "bootstrap": 30},
            eval_batch_size=3,
        )
        for name, source in (("recorded", manifest), ("moved", copy_corpus(manifest, tmp_path / "before")))
    )
    # The corpus of `moved` is no longer where it records: it is named by its new folder.
    (tmp_path / "before").rename(tmp_path / "after")
    # An export without domains (scored as the corpus's default one) nor test settings.
    bare = labelled_export(untrained, manifest, tmp_path / "bare", [], eval_batch_size=None)
    # Named through a link one folder deeper: its record is relative to the export itself.
    (tmp_path / "links").mkdir()
    (tmp_path / "links" / "bare").symlink_to(bare)
    monkeypatch.setattr(evaluation, "MOSDataModule", datamodule)
    monkeypatch.setenv("SQA_EVAL_MANIFEST", str(manifest))
    caplog.set_level(logging.INFO, logger="sqa")
    # Named relative to another working directory: the record is the resolved export folder.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "existing").mkdir()
    named = ["data=csv", "data.corpus.path=${oc.env:SQA_EVAL_MANIFEST}", "data.eval_batch_size=4"]
    # A reader named by its path of an earlier sqa version (as an old config holds it).
    old_reader = "data.corpus._target_=sqa.data.corpus.read_csv_manifest"
    new_root = f"data.corpus.root={tmp_path / 'after'}"
    cases = [
        # (overrides, output folder, seed, bootstrap, eval batch size)
        (["export=recorded"], "out/a/b", 5, 30, 3),
        (["export=moved", "seed=3", "bootstrap=7", "eval_batch_size=2", new_root], "existing", 3, 7, 2),
        (["export=bare", "seed=5", "bootstrap=30"], "c", 5, 30, 8),
        (["export=links/bare"], "d", 0, 1000, 8),
        # The user's corpus (an interpolation, recorded resolved), its batch size and settings.
        (["export=bare", *named, "num_workers=1", old_reader], "e", 0, 1000, 4),
        (["export=bare", *named, "eval_batch_size=2", "seed=3", "bootstrap=30"], "f", 3, 30, 2),
    ]
    infos, metrics = [], []
    for overrides, out, seed, bootstrap, size in cases:
        evaluate(compose_eval(overrides), out)
        info = json.loads((tmp_path / out / "eval_info.json").read_text())
        assert (info["seed"], info["bootstrap"], modules[-1].eval_batch_size) == (seed, bootstrap, size), out
        infos.append(info)
        metrics.append(json.loads((tmp_path / out / "metrics.json").read_text()))
    assert [m.num_workers for m in modules] == [0, 0, 0, 0, 1, 0]
    # Its outputs, the run directory's lock and sqa's record of what it wrote there.
    assert {p.name for p in (tmp_path / "out/a/b").iterdir()} == {
        ".lock",
        ".sqa-owned.json",
        "eval_info.json",
        "metrics.json",
        "predictions.csv",
        "plots",
    }
    assert f"Test results of {recorded.resolve()}:" in caplog.text
    # The corpus's clips are of no domain the export knows: scored as its first.
    unknown = "domains ['default'] are unknown to the export; scored as its domain 'd'"
    assert [r.getMessage() for r in caplog.records].count(unknown) == 2
    # The intervals follow the seed and the resamples, wherever they are set.
    assert_same(metrics[0], metrics[2])
    assert_same(metrics[3], metrics[4])
    # Another seed, or as many resamples from another seed, moves an interval beyond 1e-4.
    for a, b in ((0, 5), (0, 3), (1, 5)):
        with pytest.raises(AssertionError):
            assert_same(metrics[a], metrics[b])
    exports = [recorded.resolve(), moved.resolve(), *[bare.resolve()] * 4]
    assert [i["export"] for i in infos] == [str(e) for e in exports]
    spec = yaml.safe_load((recorded / "config.yaml").read_text())["data"]["corpus"]
    assert infos[0]["corpus"] == spec
    assert infos[1]["corpus"] == {**spec, "root": str(tmp_path / "after")}
    assert infos[4]["corpus"]["path"] == infos[5]["corpus"]["path"] == str(manifest)
    assert infos[4]["corpus"]["_target_"] == "sqa.data.readers.read_csv_manifest"
    # The fingerprint of the clips scored, named by the export's domains.
    corpus = recorded_corpus(spec, recorded / "config.yaml")
    fingerprints = [
        evaluation_corpus(corpus, domains, uses_domains=False).fingerprint()
        for domains in (["d", "e"], [DEFAULT_DOMAIN])
    ]
    assert [i["corpus_fingerprint"] for i in infos] == fingerprints[:1] * 2 + fingerprints[1:] * 4


def test_an_export_without_a_recorded_corpus_needs_one_named(untrained, corpus_manifest, tmp_path):
    export = export_predictor(untrained, tmp_path / "export", 16000, ["d"], f0_extractor=F0Extractor())
    message = (
        f"{export.resolve() / 'config.yaml'}: records no corpus; name one, e.g. data=csv data.corpus.path=..."
    )
    with pytest.raises(CorpusError, match=f"^{re.escape(message)}$"):
        evaluate(compose_eval([f"export={export}"]), tmp_path / "out")
    named = ["data=csv", f"data.corpus.path={corpus_manifest}"]
    assert evaluate(compose_eval([f"export={export}", *named]), tmp_path / "named")["test"]["utt"]["n"] == 9
    # An export of another sample rate scores the clips resampled to it, as sqa-score does.
    slow = export_predictor(untrained, tmp_path / "8k", 8000, ["d"], f0_extractor=F0Extractor())
    evaluate(compose_eval([f"export={slow}", *named, "eval_batch_size=1"]), tmp_path / "8k-out")
    rows = read_rows(tmp_path / "8k-out" / "predictions.csv")
    wavs = {r["sample_id"]: corpus_manifest.parent / r["wav_path"] for r in read_rows(corpus_manifest)}
    scored = Scorer(slow).score_files([wavs[r["sample_id"]] for r in rows])
    expected = [s.score for s in sorted(scored, key=lambda s: s.index)]
    assert [float(r["pred"]) for r in rows] == pytest.approx(expected, abs=1e-4)
    # An export of two score dimensions is evaluated on both.
    lyrics = tmp_path / "lyrics.csv"
    with lyrics.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[*read_rows(corpus_manifest)[0], "score_lyrics"])
        writer.writeheader()
        for r in read_rows(corpus_manifest):
            wav = str(corpus_manifest.parent / r["wav_path"])
            writer.writerow({**r, "wav_path": wav, "score_lyrics": 6 - float(r["score"])})
    torch.manual_seed(0)
    two = MOSPredictor(LogMelBackbone(n_mels=16, channels=8), dimensions=["mos", "lyrics"])
    two_export = export_predictor(two, tmp_path / "two", 16000, ["d"])
    evaluate(
        compose_eval([f"export={two_export}", "data=csv", f"data.corpus.path={lyrics}"]), tmp_path / "two-out"
    )
    assert json.loads((tmp_path / "two-out" / "metrics_lyrics.json").read_text())["test"]["utt"]["n"] == 9
    # A recorded corpus that did not move with the export: the error names the export's config.
    moved = labelled_export(untrained, corpus_manifest, tmp_path / "a" / "export", ["d"])
    shutil.move(moved, tmp_path / "moved")
    where = re.escape(f"{(tmp_path / 'moved').resolve() / 'config.yaml'}: the recorded corpus path")
    with pytest.raises(CorpusError, match=f"^{where}"):
        evaluate(compose_eval([f"export={tmp_path / 'moved'}"]), tmp_path / "out")


def test_a_carved_test_split_applies_only_to_a_corpus_without_test_clips(
    untrained, corpus_manifest, tmp_path
):
    manifest = corpus_manifest
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
    split = carved_split(manifest, tmp_path / "test_split.csv")
    assert read_valid_split(split) == sorted(test_ids)
    export = labelled_export(untrained, manifest, tmp_path / "export", ["d"])
    expected = evaluate(compose_eval([f"export={export}"]), tmp_path / "expected")
    named = [f"export={export}", "data=csv", f"data.corpus.path={untested}"]
    with pytest.raises(CorpusError, match="no test clips"):
        evaluate(compose_eval(named), tmp_path / "none")
    assert_same(
        evaluate(compose_eval([*named, f"data.test_split_csv={split}"]), tmp_path / "named"), expected
    )
    unknown = tmp_path / "unknown_split.csv"
    # Kept by hand: a split naming a clip the corpus lacks, which no run writes.
    unknown.write_text("sample_id\nnot-a-clip\n")
    message = f"{unknown}: 1 listed test clip(s) are not training clips of this corpus (first: 'not-a-clip')"
    with pytest.raises(CorpusError, match=f"^{re.escape(message)}$"):
        evaluate(compose_eval([*named, f"data.test_split_csv={unknown}"]), tmp_path / "unknown")
    # A corpus with its own test clips keeps them (its test clips listed again are no training clips).
    own = [f"export={export}", "data=csv", f"data.corpus.path={manifest}", f"data.test_split_csv={split}"]
    assert_same(evaluate(compose_eval(own), tmp_path / "own"), expected)
    # The export's own copy of the split, whatever folder its record names.
    carved = labelled_export(
        untrained,
        untested,
        tmp_path / "carved",
        ["d"],
        files=(split,),
        test_split_csv="/trainer/runs/x/test_split.csv",
    )
    assert_same(evaluate(compose_eval([f"export={carved}"]), tmp_path / "recorded"), expected)
    assert recorded_split(carved, None) is None
    assert recorded_split(carved, "/trainer/runs/x/test_split.csv") == carved / "test_split.csv"


def test_bad_test_clips_stop_the_evaluation_unless_skipped(untrained, corpus_manifest, tmp_path):
    broken = tmp_path / "broken.csv"
    (tmp_path / "empty.wav").write_bytes(b"")
    rows = read_rows(corpus_manifest)
    with broken.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        for r in rows:
            writer.writerow({**r, "wav_path": str(corpus_manifest.parent / r["wav_path"])})
        writer.writerow({**rows[-1], "wav_path": str(tmp_path / "empty.wav"), "sample_id": "empty"})
    export = export_predictor(untrained, tmp_path / "export", 16000, ["d"], f0_extractor=F0Extractor())
    named = [f"export={export}", "data=csv", f"data.corpus.path={broken}"]
    with pytest.raises(CorpusError, match="empty"):
        evaluate(compose_eval(named), tmp_path / "raise")
    evaluate(compose_eval([*named, "on_error=skip"]), tmp_path / "skip")
    assert len(read_rows(tmp_path / "skip" / "predictions.csv")) == 9


def test_eval_tests_with_the_trainer_of_its_config(untrained, corpus_manifest, tmp_path, capfd):
    # conf/trainer's progress bar shows; a setting given on the command line holds (`tested` alone
    # shows none).
    export = labelled_export(untrained, corpus_manifest, tmp_path / "export", ["d"])
    evaluate(compose_eval([f"export={export}"]), tmp_path / "shown")
    assert "Testing" in "".join(capfd.readouterr())
    evaluate(compose_eval([f"export={export}", "trainer.enable_progress_bar=false"]), tmp_path / "hidden")
    assert "Testing" not in "".join(capfd.readouterr())


def test_main_writes_into_hydras_folder_and_ends_a_bad_export_in_one_line(
    untrained, corpus_manifest, tmp_path, monkeypatch
):
    from sqa.training import evaluation

    export = labelled_export(untrained, corpus_manifest, tmp_path / "export", ["d"])
    logging_off = ["hydra/job_logging=none", "hydra/hydra_logging=none", "hydra.output_subdir=null"]
    run = ["eval.py", f"export={export}", f"hydra.run.dir={tmp_path / 'run'}", *logging_off]
    monkeypatch.setattr(sys, "argv", run)
    evaluation.main()
    info = json.loads((tmp_path / "run" / "eval_info.json").read_text())
    assert info["export"] == str(export.resolve()) and (tmp_path / "run" / "metrics.json").is_file()
    missing = tmp_path / "missing"
    run = ["eval.py", f"export={missing}", f"hydra.run.dir={tmp_path / 'b'}", *logging_off]
    monkeypatch.setattr(sys, "argv", run)
    with pytest.raises(SystemExit) as exit_info:
        evaluation.main()
    assert str(exit_info.value).startswith(f"Error: {missing}: not found")


def suggested(message: str, **places: Path) -> list[str]:
    """The settings `message` suggests (`data...=...`), its <placeholders> filled in from `places`."""
    for name, value in places.items():
        message = message.replace(f"<{name.replace('_', ' ')}>", str(value))
    return [s.rstrip(");,") for s in re.findall(r"data[\w.]*=\S+", message)]


def test_a_table_without_a_split_is_evaluated_whole_and_every_suggested_fix_works(
    untrained, corpus_manifest, tmp_path, caplog
):
    rows = read_rows(corpus_manifest)
    test_ids = [r["sample_id"] for r in rows if r["split"] == "test"]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    carved_split(corpus_manifest, run_dir / "test_split.csv")

    def table(name: str, split: dict | None) -> Path:
        """The corpus as `name`.csv, its audio by absolute paths; `split` renames splits (None: no column)."""
        path = tmp_path / f"{name}.csv"
        columns = [c for c in rows[0] if split is not None or c != "split"]
        with path.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=columns, extrasaction="ignore")
            writer.writeheader()
            for r in rows:
                changed = {"split": split.get(r["split"], r["split"])} if split is not None else {}
                writer.writerow({**r, "wav_path": str(corpus_manifest.parent / r["wav_path"]), **changed})
        return path

    export = export_predictor(untrained, tmp_path / "export", 16000, ["d"], f0_extractor=F0Extractor())
    caplog.set_level(logging.INFO, logger="sqa")
    # A table without a split column: every clip, said in one line that names the carved split's fix.
    unsplit = [f"export={export}", "data=csv", f"data.corpus.path={table('unsplit', None)}"]
    whole = evaluate(compose_eval(unsplit), tmp_path / "whole")
    assert whole["test"]["utt"]["n"] == len(rows)
    lines = [r.getMessage() for r in caplog.records if "evaluating all of its" in r.getMessage()]
    assert lines == [
        f"the corpus has no test or validation clips (no split): evaluating all of its {len(rows)} clips "
        "as test set 'test' (to evaluate only the test split a run carved from it instead: "
        "data.test_split_csv=<run dir>/test_split.csv)"
    ]
    fix = suggested(lines[0], run_dir=run_dir)
    assert evaluate(compose_eval([*unsplit, *fix]), tmp_path / "carved")["test"]["utt"]["n"] == len(test_ids)
    # The documented setting does what the default does.
    assert_same(evaluate(compose_eval([*unsplit, "data.corpus.default_split=test"]), tmp_path / "d"), whole)
    # A split column without test rows: the error's fix evaluates the run's test clips.
    untested = [f"export={export}", "data=csv", f"data.corpus.path={table('untested', {'test': 'train'})}"]
    with pytest.raises(CorpusError) as err:
        evaluate(compose_eval(untested), tmp_path / "none")
    assert str(err.value) == (
        "the corpus has no test clips to evaluate (its split names none); to evaluate the test split a "
        "run carved from it: data.test_split_csv=<run dir>/test_split.csv"
    )
    fixed = evaluate(compose_eval([*untested, *suggested(str(err.value), run_dir=run_dir)]), tmp_path / "f")
    assert fixed["test"]["utt"]["n"] == len(test_ids)
    # An export recording such a corpus without a test split of its own: its fixes, as named.
    recorded = labelled_export(untrained, tmp_path / "untested.csv", tmp_path / "recorded", ["d"])
    with pytest.raises(CorpusError) as err:
        evaluate(compose_eval([f"export={recorded}"]), tmp_path / "none2")
    assert str(err.value) == (
        f"{recorded.resolve() / 'config.yaml'}: the corpus it records has no test clips, and the export no "
        "test split; name the corpus and the test split a run carved from it: data=csv "
        "data.corpus.path=<table> data.test_split_csv=<run dir>/test_split.csv (a table named without a "
        "split file is evaluated whole)"
    )
    fix = suggested(str(err.value), table=tmp_path / "untested.csv", run_dir=run_dir)
    assert fix[0] == "data=csv" and len(fix) == 3
    assert_same(evaluate(compose_eval([f"export={recorded}", *fix]), tmp_path / "g"), fixed)
    whole_fix = suggested(str(err.value), table=tmp_path / "unsplit.csv", run_dir=run_dir)[:2]
    assert_same(evaluate(compose_eval([f"export={recorded}", *whole_fix]), tmp_path / "h"), whole)
