"""Files written before the move into subpackages: a run directory resumes, its export scores alike."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import sqa
from sqa.exports.config import read_export_config
from tests.conftest import REPO

MAIN_ERA = REPO / "tests" / "assets" / "main_era" / "run"
# The command line the run was trained with (its .hydra/overrides.yaml).
OVERRIDES = [
    "data.corpus.clips_per_system=3",
    "trainer.val_check_interval=10",
    "bootstrap=0",
    "model.backbone.channels=16",
    "model.backbone.conv_layers=1",
    "model.backbone.n_mels=16",
    "model.head_dim=8",
    "model.domain_dim=4",
]


@pytest.fixture(scope="module")
def era_corpus(small_synthetic_root: Path) -> Path:
    """The data folder of the corpus the run was trained on: the session's small synthetic corpus."""
    assert small_synthetic_root.name == "synthetic-seed0-clips3"
    return small_synthetic_root.parent


def test_the_export_records_old_paths_and_loads():
    text = (MAIN_ERA / "export" / "config.yaml").read_text()
    assert "sqa.models.predictor.MOSPredictor" in text
    assert read_export_config(MAIN_ERA / "export" / "config.yaml")["model"]["domain_dim"] == 4


def test_the_export_scores_its_test_clips_as_the_run_predicted_them(era_corpus):
    with open(MAIN_ERA / "predictions.csv", encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["test_set"] == "test1"][:6]
    model = sqa.load(MAIN_ERA / "export", domain="singmospro-p1")
    wav = era_corpus / "synthetic-seed0-clips3" / "wav"
    clips = [sf.read(wav / f"{row['sample_id']}.wav", dtype="float32") for row in rows]
    scores = [model.score(audio, sample_rate) for audio, sample_rate in clips]
    np.testing.assert_allclose(scores, [float(r["pred"]) for r in rows], atol=1e-4)


@pytest.mark.slow
def test_the_run_directory_resumes_and_finishes(era_corpus, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(MAIN_ERA, run_dir)
    env = {**os.environ, "SQA_DATA_DIR": str(era_corpus), "PYTHONPATH": str(REPO)}
    command = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", *OVERRIDES]
    result = subprocess.run(
        [*command, "trainer.max_steps=30", "resume=true", "overwrite_export=true"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log = (run_dir / "train.log").read_text()
    assert "step 30 (epoch" in log and "step 10 (epoch" in log
    assert (run_dir / "export" / "model.pt").is_file()
