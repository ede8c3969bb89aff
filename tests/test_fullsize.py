"""The paper configuration at full size: the real wav2vec2 large LV-60k architecture end to end.

Random weights (no download), 24 transformer layers, 317M parameters: train 2 steps on CPU,
validate, test, export and score one clip with the exported model. Several minutes and about
6 GB of memory on 2 CPU threads, hence `fullsize`: not part of the default run (`pytest -m fullsize`).
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import soundfile as sf
import yaml

from sqa.data.audio import load_audio
from sqa.data.synthetic import generate
from tests.scoring.test_cli import run_cli


@pytest.mark.fullsize
def test_large_lv60k_trains_validates_tests_exports_and_scores(tmp_path):
    root = generate(tmp_path / "corpus", seed=0, clips_per_system=3)
    run_dir = tmp_path / "run"
    result = run_cli(
        "train.py",
        "experiment=paper_protocol",
        f"data.corpus.root={root}",
        "model.backbone.checkpoint=null",
        f"hydra.run.dir={run_dir}",
        "data.batch_size=2",
        "data.eval_batch_size=4",
        "data.num_workers=0",
        "data.max_train_seconds=2.0",
        # Evaluation clips cut to their first second keep the validation and test passes short.
        "data.eval_max_seconds=1.0",
        "trainer.max_steps=2",
        "trainer.val_check_interval=2",
        "trainer.check_val_every_n_epoch=null",
        "trainer.enable_progress_bar=false",
        "bootstrap=0",
    )
    assert "test1/test2|test3|Avg" in result.stdout
    config = yaml.safe_load((run_dir / "export" / "config.yaml").read_text())
    backbone = config["model"]["backbone"]
    assert backbone["arch"] == "large_lv60k" and backbone["config_overrides"] == {}
    # The arch's input contract (no checkpoint to read it from): normalised input.
    assert backbone["normalize"] is True
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert set(metrics) >= {"test1", "test2", "test3", "avg"}
    with (run_dir / "predictions.csv").open() as fh:
        row = next(csv.DictReader(fh))
    # The exported model scores that clip's first second as the test pass did.
    wav = load_audio(root / "wav" / f"{row['sample_id']}.wav", 16000)[:16000]
    clip = tmp_path / "first_second.wav"
    sf.write(clip, wav, 16000, subtype="FLOAT")
    out = tmp_path / "scores.json"
    run_cli("-m", "sqa.scoring.cli", "--checkpoint", str(run_dir / "export"), "--output", str(out), str(clip))
    score = json.loads(out.read_text())[0]["score"]
    assert np.isfinite(score) and score == pytest.approx(float(row["pred"]), abs=1e-3)
