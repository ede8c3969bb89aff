"""sqa-bench: its numbers are sqa.metrics' on the same predictions, its marks, constant and config errors.

The export is the tiny log-mel run of tests/conftest.py (`tiny_run`, trained on the per-system CSV
corpus). The zero-shot predictor is a stand-in for Distill-MOS with the same `score_files`
interface (a score from each file's loudness), so that the bench's plumbing and sqa-baseline's are
compared on equal scores in a second; test_distillmos.py compares Distill-MOS with its package.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import yaml

from sqa import metrics
from sqa.baselines import bench
from sqa.baselines import cli as baseline_cli
from sqa.baselines.bench_config import BenchConfigError, read_config
from sqa.baselines.cli import BASELINES, UNMAPPED, BaselineModel
from sqa.baselines.files import FileScores
from sqa.core import artefacts
from sqa.data.corpus import ROLES, Clip, Corpus
from sqa.data.readers import read_csv_manifest
from sqa.reports import tables
from sqa.training.frame_cache import FrameStore
from tests.training.test_selection import write_per_system_corpus

# The per-system corpus's training labels (tests/training/test_selection.py: SYSTEMS): six systems
# of four clips at 1.5 ... 4.5, so the constant predictor's value is their mean, 3.0.
TRAIN_MEAN = 3.0
TEST_LABELS = [1.8] * 3 + [3.0] * 3 + [4.2] * 3


class LoudnessScorer:
    """Distill-MOS's interface with a score that falls with each file's RMS level (about 1-5)."""

    def score_files(self, paths, num_workers=0):
        """One FileScores per path, in order; an unreadable file gives its error."""
        for i, path in enumerate(paths):
            try:
                wav, _ = sf.read(str(path), dtype="float32")
            except RuntimeError as err:
                yield FileScores(i, None, f"{path}: {err}")
                continue
            yield FileScores(i, {"mos": float(5.0 - 8.0 * np.sqrt(np.mean(wav**2)))}, None)


@pytest.fixture
def fake_distillmos(monkeypatch):
    """`distillmos` scored by LoudnessScorer, for sqa-bench and sqa-baseline alike."""
    model = BASELINES["distillmos"]
    monkeypatch.setitem(BASELINES, "distillmos", BaselineModel(LoudnessScorer, "stand-in", ("mos",), ()))
    yield
    assert BASELINES["distillmos"] is not model


def scaled_copy(manifest: Path, factor: float, name: str) -> Path:
    """The manifest with every score multiplied by `factor` (the same clips on another scale)."""
    with manifest.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    out = manifest.parent / name
    with out.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**r, "score": repr(float(r["score"]) * factor)} for r in rows)
    return out


def write_config(folder: Path, text: str) -> Path:
    path = folder / "bench.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bench_run(tiny_run, tmp_path_factory):
    """The bench of the tiny export and the stand-in on the corpus, its 0-100 copy and the whole corpus."""
    manifest, run_dir = tiny_run
    folder = tmp_path_factory.mktemp("bench")
    scaled = scaled_copy(manifest, 20.0, "manifest100.csv")
    config = write_config(
        folder,
        f"""
corpora:
  - {{name: tones, manifest: {manifest}}}
  - {{name: tones100, manifest: {scaled}, score_range: [0, 100]}}
  - {{name: whole, manifest: {manifest}, test: all}}
predictors:
  - distillmos
  - {{export: {run_dir / "export"}, name: tiny}}
bootstrap: 50
seed: 3
""",
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(BASELINES, "distillmos", BaselineModel(LoudnessScorer, "stand-in", ("mos",), ()))
        assert bench.main([str(config), "--out", str(folder / "out")]) == 0
    out = folder / "out"
    record = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    rows = {(r["corpus"], r["predictor"]): r for r in record["rows"]}
    with (out / "bench_predictions.csv").open(encoding="utf-8") as fh:
        clips = list(csv.DictReader(fh))
    return {
        "out": out,
        "rows": rows,
        "clips": clips,
        "run_dir": run_dir,
        "manifest": manifest,
        "config": config,
    }


def clips_of(bench_run, corpus: str, predictor: str) -> list[dict[str, str]]:
    return [c for c in bench_run["clips"] if c["corpus"] == corpus and c["predictor"] == predictor]


def same_block(a, b) -> None:
    """Equal metric blocks (JSON's null for NaN)."""
    for level in metrics.LEVELS:
        for name in metrics.METRIC_NAMES:
            x, y = a[level][name], b[level][name]
            assert (x is None or math.isnan(x)) == (y is None or math.isnan(y)), (level, name, x, y)
            if x is not None and not math.isnan(x):
                assert x == pytest.approx(y, rel=1e-12, abs=1e-12), (level, name)


@pytest.mark.parametrize(
    ("corpus", "predictor"),
    [
        ("tones", "tiny"),
        ("tones", "distillmos"),
        ("tones100", "tiny"),
        ("tones100", "distillmos"),
        ("whole", "tiny"),
    ],
)
def test_each_rows_numbers_are_sqa_metrics_on_its_predictions(bench_run, corpus, predictor):
    clips = clips_of(bench_run, corpus, predictor)
    raw = [float(c["raw"]) for c in clips]
    pred = [float(c["pred"]) for c in clips]
    true, systems, sets = (
        [float(c["mos"]) for c in clips],
        [c["system_id"] for c in clips],
        [c["test_set"] for c in clips],
    )
    # Correlations are the predictor's own scores', errors the scores' on the corpus's scale.
    own = metrics.evaluate_sets(raw, true, systems, sets, bootstrap=50, seed=3, apart=ROLES)
    mapped = metrics.evaluate_sets(pred, true, systems, sets, bootstrap=50, seed=3, apart=ROLES)
    got = bench_run["rows"][(corpus, predictor)]["results"][metrics.AVERAGE_KEY]
    for level in metrics.LEVELS:
        for name in metrics.METRIC_NAMES:
            source = mapped if name in metrics.ERROR_METRICS else own
            want = source[metrics.AVERAGE_KEY][level][name]
            assert got[level][name] == pytest.approx(want, rel=1e-12)
            assert got["ci"][level][name] == source[metrics.AVERAGE_KEY]["ci"][level][name]


def test_the_in_corpus_export_reproduces_its_runs_test_metrics(bench_run):
    trained = artefacts.read_metrics(bench_run["run_dir"])[metrics.AVERAGE_KEY]
    got = bench_run["rows"][("tones", "tiny")]["results"][metrics.AVERAGE_KEY]
    same_block(got, trained)
    assert got["utt"]["n"] == 9


def test_exports_are_marked_in_corpus_on_their_recorded_corpus_only(bench_run):
    kinds = {key: row["kind"] for key, row in bench_run["rows"].items()}
    assert kinds[("tones", "tiny")] == "in-corpus"
    assert kinds[("whole", "tiny")] == "in-corpus"  # the same manifest, every clip tested
    assert kinds[("tones100", "tiny")] == "cross-corpus"  # the same clips, another file
    assert kinds[("tones", "distillmos")] == "zero-shot"
    assert kinds[("tones", "constant")] == "constant"


def test_the_constant_is_the_training_mean_for_every_clip(bench_run):
    clips = clips_of(bench_run, "tones", "constant")
    assert [float(c["pred"]) for c in clips] == [TRAIN_MEAN] * 9
    assert sorted(float(c["mos"]) for c in clips) == TEST_LABELS
    row = bench_run["rows"][("tones", "constant")]
    assert row["train_mean"] == TRAIN_MEAN
    rmse = math.sqrt(np.mean([(TRAIN_MEAN - y) ** 2 for y in TEST_LABELS]))
    assert row["results"]["avg"]["utt"]["rmse"] == pytest.approx(rmse)  # sqrt(0.96)
    assert row["results"]["avg"]["utt"]["srcc"] is None
    # On the 0-100 copy the constant is the copy's own training mean, 20 times as large.
    scaled = bench_run["rows"][("tones100", "constant")]
    assert scaled["train_mean"] == pytest.approx(20 * TRAIN_MEAN)
    assert scaled["results"]["avg"]["utt"]["rmse"] == pytest.approx(20 * rmse)


def test_a_corpus_without_training_clips_has_no_constant_and_no_map(bench_run):
    row = bench_run["rows"][("whole", "constant")]
    assert row["train_mean"] is None and row["results"]["avg"]["utt"]["rmse"] is None
    reasons = row["results"]["test"]["undefined"]["utt"]
    assert reasons["rmse"] == "the corpus has no training clips to take a mean of"
    # Every clip is tested: the training clips too.
    assert row["results"]["avg"]["utt"]["n"] == 24 + 8 + 9


def test_testing_on_valid_leaves_the_corpus_own_test_clips_out():
    splits = {"t0": "train", "t1": "train", "v0": "valid", "v1": "valid", "e0": "test", "e1": "test"}
    clips = [Clip(k, Path(f"{k}.wav"), 3.0, "s", "d", split) for k, split in splits.items()]
    corpus = Corpus(clips, ["d"], (1.0, 5.0))
    tested = bench.tested_corpus(corpus, "valid")
    assert [(c.sample_id, c.split) for c in tested.clips] == [
        ("t0", "train"),
        ("t1", "train"),
        ("v0", "test"),
        ("v1", "test"),
    ]
    assert [c.sample_id for group in tested.test_sets().values() for c in group] == ["v0", "v1"]
    # The corpus itself is left as it was.
    assert [c.split for c in corpus.clips] == list(splits.values())


def test_a_recipe_testing_on_valid_scores_the_valid_clips_only(fake_distillmos, tmp_path):
    manifest = write_per_system_corpus(tmp_path / "corpus")
    config = write_config(
        tmp_path,
        f"corpora: [{{name: tones, manifest: {manifest}, test: valid}}]\n"
        "predictors: [distillmos]\nbootstrap: 20\n",
    )
    assert bench.main([str(config), "--out", str(tmp_path / "out")]) == 0
    with (tmp_path / "out" / "bench_predictions.csv").open(encoding="utf-8") as fh:
        clips = list(csv.DictReader(fh))
    valid = [f"va{s}-{k}" for s in (0, 1) for k in range(4)]
    for predictor in ("constant", "distillmos"):
        assert sorted(c["sample_id"] for c in clips if c["predictor"] == predictor) == valid
    record = json.loads((tmp_path / "out" / "bench.json").read_text(encoding="utf-8"))
    rows = {r["predictor"]: r for r in record["rows"]}
    assert [rows[p]["results"]["avg"]["utt"]["n"] for p in ("constant", "distillmos")] == [8, 8]
    # The training clips stay training clips: the constant is still their mean.
    assert rows["constant"]["train_mean"] == TRAIN_MEAN


def test_an_export_on_another_scale_is_mapped_by_the_line_fitted_on_the_training_clips(bench_run):
    # The export's own scores of the training clips, scored as the bench scores them (its rows
    # leave those clips out: the export was trained on them).
    training = bench.tested_corpus(read_csv_manifest(bench_run["manifest"]), "train")
    args = argparse.Namespace(num_workers=0, on_error="raise")
    rows, _ = bench.export_rows(bench_run["run_dir"] / "export", training, args, "tiny")
    raw = {r["sample_id"]: float(r["raw"]) for r in rows}
    with bench_run["manifest"].open(encoding="utf-8") as fh:
        train = [r for r in csv.DictReader(fh) if r["split"] == "train"]
    b, a = np.polyfit([raw[r["sample_id"]] for r in train], [20 * float(r["score"]) for r in train], 1)
    record = bench_run["rows"][("tones100", "tiny")]["scale_map"]
    assert record["train_clips"] == 24
    assert (record["a"], record["b"]) == (pytest.approx(a), pytest.approx(b))
    for clip in clips_of(bench_run, "tones100", "tiny"):
        assert float(clip["pred"]) == pytest.approx(a + b * float(clip["raw"]))
    # The corpus on the export's own scale is not mapped.
    assert bench_run["rows"][("tones", "tiny")]["scale_map"] is None


def test_zero_shot_rows_are_sqa_baselines_numbers(bench_run, fake_distillmos, tmp_path, capsys):
    scaled = bench_run["manifest"].parent / "manifest100.csv"
    run_dir = tmp_path / "baseline"
    argv = [
        "--model",
        "distillmos",
        "--corpus",
        "csv",
        "--manifest",
        str(scaled),
        "--score-range",
        "0",
        "100",
    ]
    assert baseline_cli.main([*argv, "--run-dir", str(run_dir), "--bootstrap", "50"]) == 0
    baseline = artefacts.read_metrics(run_dir)
    info = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))
    row = bench_run["rows"][("tones100", "distillmos")]
    assert row["scale_map"] == pytest.approx(info["scale_map"])
    # sqa-baseline's bootstrap seed is 0, the bench's 3: the values are equal, the intervals need not be.
    same_block(row["results"]["avg"], baseline["avg"])


def test_the_printed_table_has_each_rows_average_with_its_interval(bench_run, tiny_run, capsys):
    config = bench_run["config"]
    out = bench_run["out"].parent / "again"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(BASELINES, "distillmos", BaselineModel(LoudnessScorer, "stand-in", ("mos",), ()))
        assert bench.main([str(config), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = list(bench_run["rows"].values())
    table = tables.bench_table(rows)
    assert table in printed
    lines = table.splitlines()
    assert len([line for line in lines[2:] if line.startswith(("tones ", "tones100 ", "whole "))]) == 9
    cell = tables.metric_cell(rows[2]["results"]["avg"], "utt", "srcc")
    assert "[" in cell and cell in lines[2 + 2]
    assert "n/a: whole / constant utt rmse, lcc, srcc, ktau: the corpus has no training clips" in table
    assert "n/a: tones / constant utt lcc, srcc, ktau: every clip has the same prediction" in table
    # Both runs wrote the same numbers: the bench is deterministic.
    assert (out / "bench.csv").read_text(encoding="utf-8") == (bench_run["out"] / "bench.csv").read_text(
        encoding="utf-8"
    )


def test_the_csv_has_a_line_per_row_with_nulls_explained(bench_run):
    with (bench_run["out"] / "bench.csv").open(encoding="utf-8") as fh:
        lines = list(csv.DictReader(fh))
    assert len(lines) == 9
    constant = next(r for r in lines if r["corpus"] == "whole" and r["predictor"] == "constant")
    assert constant["utt_rmse"] == "" and "no training clips" in constant["undefined"]
    tiny = next(r for r in lines if r["corpus"] == "tones" and r["predictor"] == "tiny")
    avg = bench_run["rows"][("tones", "tiny")]["results"]["avg"]
    assert float(tiny["utt_srcc"]) == avg["utt"]["srcc"]
    assert [float(tiny["utt_rmse_lo"]), float(tiny["utt_rmse_hi"])] == avg["ci"]["utt"]["rmse"]


def test_an_unmapped_zero_shot_score_has_errors_undefined_with_the_reason(bench_run, tmp_path, capsys):
    scaled = bench_run["manifest"].parent / "manifest100.csv"
    config = write_config(
        tmp_path,
        f"corpora: [{{name: all100, manifest: {scaled}, score_range: [0, 100], test: all}}]\n"
        "predictors: [distillmos]\n",
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(BASELINES, "distillmos", BaselineModel(LoudnessScorer, "stand-in", ("mos",), ()))
        assert bench.main([str(config), "--out", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "bench.json").read_text(encoding="utf-8"))
    row = next(r for r in record["rows"] if r["predictor"] == "distillmos")
    block = row["results"]["test"]
    assert block["utt"]["rmse"] is None and block["ci"]["utt"]["rmse"] is None
    assert block["undefined"]["utt"]["rmse"] == UNMAPPED
    assert block["utt"]["srcc"] is not None  # the ranking needs no map


def test_outputs_are_replaced_only_with_overwrite_and_never_a_users_file(bench_run, tmp_path, capsys):
    config, out = bench_run["config"], tmp_path / "out"
    small = write_config(
        tmp_path, f"corpora: [{{name: t, manifest: {bench_run['manifest']}}}]\npredictors: [distillmos]\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(BASELINES, "distillmos", BaselineModel(LoudnessScorer, "stand-in", ("mos",), ()))
        assert bench.main([str(small), "--out", str(out)]) == 0
        before = (out / "bench.json").read_bytes()
        capsys.readouterr()
        assert bench.main([str(small), "--out", str(out)]) == 2
        assert "--overwrite" in capsys.readouterr().err
        assert (out / "bench.json").read_bytes() == before
        (out / "notes.txt").write_text("mine", encoding="utf-8")
        assert bench.main([str(small), "--out", str(out), "--overwrite"]) == 2
        assert "notes.txt" in capsys.readouterr().err
        assert (out / "notes.txt").read_text(encoding="utf-8") == "mine"
        (out / "notes.txt").unlink()
        assert bench.main([str(small), "--out", str(out), "--overwrite"]) == 0
    assert config.is_file()


def test_an_unreadable_clip_stops_the_bench_unless_skipped(bench_run, tmp_path, capsys):
    manifest = scaled_copy(bench_run["manifest"], 1.0, "broken.csv")
    broken = manifest.parent / "te0-0.wav"
    manifest.write_text(
        manifest.read_text(encoding="utf-8").replace("te0-0.wav", str(tmp_path / "missing.wav")),
        encoding="utf-8",
    )
    assert broken.is_file()
    config = write_config(
        tmp_path, f"corpora: [{{name: t, manifest: {manifest}}}]\npredictors: [distillmos]\n"
    )
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(BASELINES, "distillmos", BaselineModel(LoudnessScorer, "stand-in", ("mos",), ()))
        assert bench.main([str(config), "--out", str(tmp_path / "a")]) == 1
        err = capsys.readouterr().err
        assert "missing.wav" in err and "--on-error skip" in err
        assert not (tmp_path / "a").exists()
        assert bench.main([str(config), "--out", str(tmp_path / "b"), "--on-error", "skip"]) == 0
    record = json.loads((tmp_path / "b" / "bench.json").read_text(encoding="utf-8"))
    assert (
        next(r for r in record["rows"] if r["predictor"] == "distillmos")["results"]["avg"]["utt"]["n"] == 8
    )


GOOD = "corpora: [{name: c, manifest: m.csv}]\npredictors: [distillmos]\n"


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("corpora: []\npredictors: [distillmos]\n", "corpora", "non-empty list"),
        ("corpora: [{name: c, manifest: m.csv}]\n", "predictors", "non-empty list"),
        (GOOD + "seeds: 1\n", "seeds", "unknown key"),
        (GOOD + "bootstrap: -1\n", "bootstrap", "at least 0"),
        ("corpora: [{manifest: m.csv}]\npredictors: [distillmos]\n", "corpora[0].name", "missing"),
        (
            "corpora: [{name: c, manifest: gone.csv}]\npredictors: [distillmos]\n",
            "corpora[0].manifest",
            "gone.csv",
        ),
        ("corpora: [{name: c}]\npredictors: [distillmos]\n", "corpora[0].corpus", "must be one of"),
        ("corpora: [{name: c, corpus: csv}]\npredictors: [distillmos]\n", "corpora[0].manifest", "missing"),
        (
            "corpora: [{name: c, corpus: singmos_pro}]\npredictors: [distillmos]\n",
            "corpora[0].root",
            "missing",
        ),
        (
            "corpora: [{name: c, manifest: m.csv, test: eval}]\npredictors: [distillmos]\n",
            "corpora[0].test",
            "eval",
        ),
        (
            "corpora: [{name: c, manifest: m.csv, score_range: [5, 1]}]\npredictors: [distillmos]\n",
            "corpora[0].score_range",
            "low < high",
        ),
        (
            "corpora: [{name: c, manifest: m.csv, split: x}]\npredictors: [distillmos]\n",
            "corpora[0].split",
            "unknown",
        ),
        (
            "corpora: [{name: c, manifest: m.csv}, {name: c, manifest: m.csv}]\npredictors: [distillmos]\n",
            "corpora[1].name",
            "corpora[0]",
        ),
        ("corpora: [{name: c, manifest: m.csv}]\npredictors: [utmos]\n", "predictors[0].zero_shot", "utmos"),
        (
            "corpora: [{name: c, manifest: m.csv}]\npredictors: [{zero_shot: dnsmos, output: mos}]\n",
            "predictors[0].output",
            "ovrl",
        ),
        (
            "corpora: [{name: c, manifest: m.csv}]\npredictors: [{export: nowhere}]\n",
            "predictors[0].export",
            "nowhere",
        ),
        (
            "corpora: [{name: c, manifest: m.csv}]\npredictors: [{name: x}]\n",
            "predictors[0]",
            "names no predictor",
        ),
        (
            "corpora: [{name: c, manifest: m.csv}]\npredictors: [{zero_shot: dnsmos, name: constant}]\n",
            "predictors[0].name",
            "the constant predictor's row",
        ),
        (
            "corpora: [{name: c, manifest: m.csv}]\npredictors: [{export: m.csv, trained_on: d}]\n",
            "predictors[0].trained_on",
            "'d' is none of the corpora",
        ),
        # Both sides of each bound, each message whole.
        (
            "corpora: [{name: c, manifest: m.csv, score_range: [3, 3]}]\npredictors: [distillmos]\n",
            "corpora[0].score_range",
            "must be [low, high], two finite numbers with low < high, got [3, 3]",
        ),
        (
            "corpora: [{name: c, manifest: ' '}]\npredictors: [distillmos]\n",
            "corpora[0].manifest",
            "must be a non-empty string, got ' '",
        ),
        (
            "corpora: [{name: c, corpus: singmos_pro, root: ., manifest: m.csv}]\npredictors: [distillmos]\n",
            "corpora[0].manifest",
            "only a csv corpus has a manifest, this is singmos_pro",
        ),
        (
            "corpora: [{name: c, corpus: singmos_pro, root: m.csv}]\npredictors: [distillmos]\n",
            "corpora[0].root",
            "folder '",
        ),
        (
            "corpora: [{name: c, manifest: none.csv}]\npredictors: [distillmos]\n",
            "corpora[0].manifest",
            "file '",
        ),
        (
            "corpora: [{name: c, manifest: m.csv, sample_rate_filter: -1}]\npredictors: [distillmos]\n",
            "corpora[0].sample_rate_filter",
            "must be an integer of at least 0, got -1",
        ),
        (
            "corpora: [{name: c, corpus: synthetic, clips_per_system: 0}]\npredictors: [distillmos]\n",
            "corpora[0].clips_per_system",
            "must be an integer of at least 1, got 0",
        ),
        (
            "corpora: [{name: c, manifest: m.csv}]\npredictors: [{export: ''}]\n",
            "predictors[0].export",
            "must be a non-empty string, got ''",
        ),
        ("corpora: [{name: c, manifest: m.csv}\n", None, "not a YAML file"),
        ("- a\n", None, "expected a mapping"),
    ],
)
def test_a_bad_config_is_one_line_naming_the_file_and_the_key(tmp_path, capsys, text, key, problem):
    (tmp_path / "m.csv").write_text("wav_path,score,system_id\n", encoding="utf-8")
    config = write_config(tmp_path, text)
    with pytest.raises(BenchConfigError) as caught:
        read_config(config)
    message = str(caught.value)
    assert message.startswith(f"{config}: ") and problem in message
    if key is not None:
        assert message.startswith(f"{config}: {key}: ")
    assert bench.main([str(config), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"sqa-bench: {message}"]
    assert not (tmp_path / "out").exists()


def test_a_good_config_reads_its_defaults_and_relative_paths(tmp_path):
    (tmp_path / "m.csv").write_text("wav_path,score,system_id\n", encoding="utf-8")
    text = (
        "corpora: [{name: c, manifest: m.csv}]\npredictors: [distillmos, {zero_shot: dnsmos, output: sig}]\n"
    )
    config = read_config(write_config(tmp_path, text))
    corpus = config.corpora[0]
    assert corpus.options.manifest == tmp_path / "m.csv" and corpus.test == "test"
    assert corpus.options.score_range is None and corpus.options.corpus == "csv"
    assert [p.name for p in config.predictors] == ["distillmos", "dnsmos-sig"]
    assert (config.bootstrap, config.seed) == (1000, 0)


def test_a_corpus_reads_its_settings_and_a_synthetic_ones_defaults(tmp_path):
    (tmp_path / "m.csv").write_text("wav_path,score,system_id\n", encoding="utf-8")
    text = (
        "corpora:\n  - {name: a, manifest: m.csv, sample_rate_filter: 0}\n"
        "  - {name: b, corpus: synthetic, root: gen, seed: 3, clips_per_system: 2,"
        " sample_rate_filter: 22050}\n"
        "  - {name: c, corpus: synthetic, root: gen}\npredictors: [distillmos]\n"
    )
    csv, given, default = (c.options for c in read_config(write_config(tmp_path, text)).corpora)
    assert csv.sample_rate_filter == 0
    assert (given.seed, given.clips_per_system, given.sample_rate_filter) == (3, 2, 22050)
    assert (default.seed, default.clips_per_system, default.sample_rate_filter) == (0, 14, None)
    assert given.root == tmp_path / "gen"


def test_a_missing_config_is_one_line(tmp_path, capsys):
    assert bench.main([str(tmp_path / "none.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"sqa-bench: {tmp_path / 'none.yaml'}: file not found"


def test_exports_over_the_same_backbone_pass_each_clip_through_it_once(bench_run, tmp_path, monkeypatch):
    export = bench_run["run_dir"] / "export"
    config = write_config(
        tmp_path,
        f"""
corpora:
  - {{name: tones, manifest: {bench_run["manifest"]}}}
predictors:
  - {{export: {export}, name: first}}
  - {{export: {export}, name: second}}
bootstrap: 10
""",
    )
    caches = []
    found = FrameStore.cache_for

    def recorded(self, backbone, max_bytes):
        caches.append(found(self, backbone, max_bytes))
        return caches[-1]

    monkeypatch.setattr(FrameStore, "cache_for", recorded)
    assert bench.main([str(config), "--out", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "bench.json").read_text(encoding="utf-8"))
    rows = {r["predictor"]: r for r in record["rows"]}
    # One cache for both; the second export found every clip the first had passed.
    assert len(caches) == 2 and caches[0] is caches[1]
    assert caches[0].misses == caches[0].hits > 0
    assert rows["first"]["results"] == rows["second"]["results"]


RECIPES = Path(__file__).resolve().parents[2] / "recipes" / "bench"


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("*.yaml")))
def test_each_shipped_recipe_reads_on_the_tree_it_names(recipe, tmp_path):
    """recipes/bench/*.yaml, copied into a repository laid out with every file they name, read whole."""
    text = (RECIPES / recipe).read_text()
    copy = tmp_path / "recipes" / "bench" / recipe
    copy.parent.mkdir(parents=True)
    copy.write_text(text)
    raw = yaml.safe_load(text)
    for corpus in raw["corpora"]:
        manifest = copy.parent / corpus["manifest"]
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text("wav_path,score\n")
    exports = [p for p in raw["predictors"] if isinstance(p, dict) and "export" in p]
    for predictor in exports:
        (copy.parent / predictor["export"]).mkdir(parents=True)
    config = read_config(copy)
    assert [c.name for c in config.corpora] == [c["name"] for c in raw["corpora"]]
    assert [p.zero_shot for p in config.predictors if p.export is None][:1] == ["distillmos"]
    assert [p.export for p in config.predictors if p.export is not None] == [
        copy.parent / p["export"] for p in exports
    ]


def test_the_default_recipe_tests_each_seeds_export_on_both_corpora_in_and_across():
    """real-default.yaml: zero-shot Distill-MOS and DNSMOS, and 3 seeds of the default run per corpus."""
    raw = yaml.safe_load((RECIPES / "real-default.yaml").read_text())
    corpora = [c["name"] for c in raw["corpora"]]
    assert [p for p in raw["predictors"] if isinstance(p, str)] == ["distillmos", "dnsmos"]
    for corpus in corpora:
        runs = [p for p in raw["predictors"] if isinstance(p, dict) and p["trained_on"] == corpus]
        assert [p["export"] for p in runs] == [f"../../runs/real/{corpus}/seed{s}/export" for s in range(3)]
