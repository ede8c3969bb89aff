"""Distill-MOS baseline: the package's own model, batched by length, and `sqa-baseline --model distillmos`.

Each clip costs a 7.68 s segment of the network (about a second on one CPU thread), so the clips
are few and short.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json

import numpy as np
import pytest
import soundfile as sf
import torch

from sqa import metrics
from sqa.baselines.cli import main
from sqa.baselines.distillmos import SAMPLE_RATE, DistillMOS
from sqa.core.atomic import json_text
from sqa.reports.results import build_table

from .test_dnsmos import speech_like, write_corpus, write_rows

distillmos = pytest.importorskip(
    "distillmos", reason="the distillmos extra is not installed (pip install 'sqa[distillmos]')"
)


@pytest.fixture(scope="module")
def scorer() -> DistillMOS:
    return DistillMOS()


@pytest.fixture(scope="module")
def reference() -> torch.nn.Module:
    """The package's model as its README uses it (it prints where it loaded its weights from)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return distillmos.ConvTransformerSQAModel().eval()


def package_score(reference: torch.nn.Module, wav: np.ndarray) -> float:
    with torch.no_grad():
        return float(reference(torch.from_numpy(wav)[None]).flatten()[0])


def test_batched_scores_are_the_packages_clip_by_clip(tmp_path, scorer, reference):
    wav = speech_like(seconds=2.0)
    # Two clips of one length (one batch through the package's forward) and a longer one.
    noisy = (wav + 0.05 * np.random.default_rng(0).standard_normal(wav.size)).astype(np.float32)
    clips = [wav, np.tile(wav, 2)[: int(2.6 * SAMPLE_RATE)], noisy]
    expected = [package_score(reference, c) for c in clips]
    assert [s["mos"] for s in scorer.score_batch(clips)] == pytest.approx(expected, abs=1e-6)
    assert abs(expected[0] - expected[2]) > 0.05  # the noise is heard: equal scores would not pass
    paths = []
    for i, c in enumerate(clips):
        paths.append(tmp_path / f"clip{i}.wav")
        sf.write(paths[-1], c, SAMPLE_RATE, subtype="FLOAT")
    (tmp_path / "broken.wav").write_bytes(b"not audio")
    paths.insert(1, tmp_path / "broken.wav")
    results = sorted(scorer.score_files([paths[0], paths[1], paths[3]], batch_size=2))
    assert [r.index for r in results] == [0, 1, 2]
    assert results[1].scores is None and "broken.wav" in results[1].error
    assert [r.scores["mos"] for r in (results[0], results[2])] == pytest.approx(
        [expected[0], expected[2]], abs=1e-6
    )
    with pytest.raises(ValueError, match="mono"):
        scorer.score(np.zeros((2, 100), dtype=np.float32))


def test_cli_writes_the_distillmos_row_as_a_run(tmp_path, capsys):
    manifest = write_corpus(tmp_path)
    run_dir = tmp_path / "run"
    argv = [
        "--model",
        "distillmos",
        "--corpus",
        "csv",
        "--manifest",
        str(manifest),
        "--run-dir",
        str(run_dir),
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Distill-MOS MOS on 6 test clips" in out and "utt    srcc" in out
    with (run_dir / "predictions.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["sample_id", "system_id", "test_set", "mos", "pred", "wav_path"]
    assert len(rows) == 6
    pred = [float(r["pred"]) for r in rows]
    assert all(1.0 < p < 5.0 for p in pred) and np.ptp(pred) > 0
    expected = metrics.evaluate_sets(
        pred,
        [float(r["mos"]) for r in rows],
        [r["system_id"] for r in rows],
        [r["test_set"] for r in rows],
        bootstrap=1000,
    )
    assert json.loads((run_dir / "metrics.json").read_text()) == json.loads(json_text(expected))
    assert {p.name for p in (run_dir / "plots").iterdir()} == {
        f"{s}_{level}.png" for s in ("setA", "setB") for level in ("utt", "sys")
    }
    info = json.loads((run_dir / "run_info.json").read_text())
    assert info["baseline"] == "distillmos" and info["packages"]["distillmos"] == "0.9.1"
    header, table = build_table([("Distill-MOS", str(run_dir))])
    assert table[0][:2] == ["Distill-MOS", "1"]


def test_on_another_scale_distillmos_scores_follow_the_line_of_the_training_clips(
    tmp_path, scorer, reference
):
    # write_corpus's clips on 0-100 (y -> 25 (y - 1)), with its setB clips as training clips.
    manifest = write_corpus(tmp_path)
    with manifest.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r["score"] = repr(25.0 * (float(r["score"]) - 1.0))
        if r["test_set"] == "setB":
            r["split"], r["test_set"] = "train", ""
    wide = write_rows(tmp_path / "wide.csv", rows)
    run_dir = tmp_path / "run"
    argv = ["--model", "distillmos", "--corpus", "csv", "--manifest", str(wide), "--score-range", "0", "100"]
    assert main([*argv, "--run-dir", str(run_dir), "--bootstrap", "0"]) == 0
    train = [r for r in rows if r["split"] == "train"]
    raw_train = [
        package_score(reference, sf.read(tmp_path / r["wav_path"], dtype="float32")[0]) for r in train
    ]
    b, a = np.polyfit(raw_train, [float(r["score"]) for r in train], 1)
    info = json.loads((run_dir / "run_info.json").read_text())
    assert info["scale_map"]["a"] == pytest.approx(a) and info["scale_map"]["b"] == pytest.approx(b)
    with (run_dir / "predictions.csv").open(newline="") as fh:
        predicted = list(csv.DictReader(fh))
    # `pred` is the package's score of the clip mapped by the line.
    first = sf.read(tmp_path / f"{predicted[0]['sample_id']}.wav", dtype="float32")[0]
    assert float(predicted[0]["pred"]) == pytest.approx(a + b * package_score(reference, first), rel=1e-5)
    raw = [(float(r["pred"]) - a) / b for r in predicted]
    saved = json.loads((run_dir / "metrics.json").read_text())["setA"]
    assert saved["utt"]["pair_acc"] == pytest.approx(
        metrics.pair_acc(np.array(raw), np.array([float(r["mos"]) for r in predicted]))
    )


def test_cli_refuses_a_score_distillmos_does_not_give(tmp_path, capsys):
    argv = ["--model", "distillmos", "--output", "sig", "--run-dir", str(tmp_path / "run")]
    assert main(argv) == 2
    assert "--output sig: Distill-MOS gives mos" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
