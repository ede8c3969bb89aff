"""The core install in a fresh venv with another torch: it installs, imports and scores an export.

Run with `pytest -m core_install` (minutes: it creates a venv and installs torch into it).
SQA_CORE_TORCH names the torch release (default 2.13.0, the newest the ranges allow that lies on
this machine's disk); SQA_CORE_PYTHON the interpreter (default python3.11).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from sqa.scoring.scorer import Scorer
from tests.core.test_extras import console_scripts

REPO = Path(__file__).resolve().parents[1]
TORCH = os.environ.get("SQA_CORE_TORCH", "2.13.0")
PYTHON = os.environ.get("SQA_CORE_PYTHON", "python3.11")

pytestmark = pytest.mark.core_install


def _run(*cmd: str | Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env, timeout=1200)


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv holding torch==TORCH and sqa's core (a copy of this tree, not editable)."""
    if shutil.which(PYTHON) is None:
        pytest.skip(f"{PYTHON} is not on PATH")
    root = tmp_path_factory.mktemp("core")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "sqa", source / "sqa", ignore=shutil.ignore_patterns("__pycache__"))
    venv = root / "venv"
    assert _run(PYTHON, "-m", "venv", venv).returncode == 0
    pip = [venv / "bin" / "python", "-m", "pip", "install", "-q"]
    for step in ([f"torch=={TORCH}"], [str(source)]):
        done = _run(*pip, *step)
        assert done.returncode == 0, done.stderr[-3000:]
    return venv


def test_core_install_keeps_the_users_torch_and_leaves_the_extras_out(core_venv):
    code = (
        "import importlib.util, sys, torch, sqa.scoring.scorer, sqa.models.backbone;"
        "print(torch.__version__);"
        "print(*[m for m in ('torchaudio', 'hydra', 'lightning') if importlib.util.find_spec(m)])"
    )
    done = _run(core_venv / "bin" / "python", "-c", code)
    assert done.returncode == 0, done.stderr
    version, extras = (done.stdout.splitlines() + [""])[:2]
    assert version.split("+")[0] == TORCH
    assert extras == ""


def test_core_install_scores_an_export_as_the_dev_install_does(core_venv, default_export, tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for i, seconds in enumerate((1.0, 2.5)):
        t = np.arange(int(16000 * seconds)) / 16000
        wav = 0.3 * np.sin(2 * np.pi * (220 + 110 * i) * t) + 0.01 * rng.standard_normal(t.size)
        path = tmp_path / f"clip{i}.wav"
        sf.write(path, wav.astype(np.float32), 16000, subtype="FLOAT")
        paths.append(path)
    out = tmp_path / "scores.csv"
    done = _run(core_venv / "bin" / "sqa-score", "--checkpoint", default_export, "--output", out, *paths)
    assert done.returncode == 0, done.stderr[-3000:]
    with out.open() as f:
        fresh = {Path(row["path"]).name: float(row["score"]) for row in csv.DictReader(f)}
    for result in Scorer(default_export).score_files(paths):
        # Another torch release may order float sums differently, nothing more.
        assert fresh[Path(result.path).name] == pytest.approx(result.score, abs=1e-4)


# Each console script of pyproject.toml, and the repository's Hydra entry points.
COMMANDS = [*console_scripts(), "train.py", "eval.py"]


def test_every_entry_point_works_or_names_its_extra_in_one_line(core_venv):
    said = {}
    for command in COMMANDS:
        if command.endswith(".py"):
            done = _run(core_venv / "bin" / "python", REPO / command, "--help")
        else:
            done = _run(core_venv / "bin" / command, "--help")
        assert "Traceback" not in done.stderr, (command, done.stderr[-2000:])
        if done.returncode == 0:
            assert "usage" in done.stdout.lower(), command
            said[command] = "works"
        else:
            lines = [line for line in done.stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and "pip install 'sqa[" in lines[0], (command, done.stderr)
            said[command] = lines[0]
    # Scoring, tables and comparisons need nothing but the core.
    assert {said[c] for c in ("sqa-score", "sqa-table", "sqa-compare")} == {"works"}
    print(json.dumps(said, indent=1))


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-m", "core_install", "-q"]))
