"""A run says whether its model beats the constant training-mean predictor, in every place it reports."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import sqa
from sqa.reports import learning
from sqa.scoring import cli as score
from sqa.scoring.scorer import LearningWarning
from sqa.training.run import run
from tests.training.test_selection import SR, compose_train, tiny_run_overrides


def write_unlearnable_corpus(root: Path) -> Path:
    """Noise clips whose labels, all near 4.6, have nothing to do with the audio."""
    rng = np.random.default_rng(1)
    root.mkdir(parents=True, exist_ok=True)
    rows = ["wav_path,score,system_id,sample_id,split"]
    for split, systems, clips in (("train", 4, 4), ("valid", 2, 3), ("test", 3, 3)):
        for s in range(systems):
            for k in range(clips):
                name = f"{split}{s}-{k}"
                sf.write(root / f"{name}.wav", rng.normal(0, 0.1, SR // 2).astype(np.float32), SR)
                rows.append(f"{name}.wav,{rng.uniform(4.2, 5.0):.2f},{split}{s},{name},{split}")
    (root / "manifest.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root / "manifest.csv"


@pytest.fixture(scope="module")
def untrained_run(tmp_path_factory) -> tuple[Path, Path]:
    """A run that cannot learn (learning rate 0, random head): it scores near 3 for labels near 4.6."""
    manifest = write_unlearnable_corpus(tmp_path_factory.mktemp("unlearnable"))
    run_dir = tmp_path_factory.mktemp("untrained-run")
    overrides = [*tiny_run_overrides(manifest), "optim.lr=0", "trainer.max_steps=4", "head_init=random"]
    run(compose_train(overrides), run_dir)
    return manifest, run_dir


def last_log_line(run_dir: Path) -> str:
    return (run_dir / "train.log").read_text(encoding="utf-8").rstrip("\n").splitlines()[-1]


def learning_warnings(export: Path) -> list[str]:
    """The LearningWarnings that loading `export` with `sqa.load` gives."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sqa.load(export)
    return [str(w.message) for w in caught if issubclass(w.category, LearningWarning)]


def test_a_model_worse_than_the_constant_says_so_everywhere(untrained_run, tmp_path, capsys):
    _, untrained_run = untrained_run
    info = json.loads((untrained_run / "run_info.json").read_text(encoding="utf-8"))
    check = info["learning_check"]
    assert check["verdict"] == "no_better"
    assert check["test"]["rmse"] > check["test"]["constant_rmse"]
    sentence = learning.sentence(check)
    assert sentence.startswith("This model predicts no better than the constant training mean")
    # The console's (and train.log's) last line, as a warning.
    assert last_log_line(untrained_run).endswith(f"[WARNING] - {sentence}")
    # The export's copy of run_info.json and the first line of its model card.
    export = untrained_run / "export"
    exported = json.loads((export / "run_info.json").read_text(encoding="utf-8"))
    assert exported["learning_check"] == check
    card = (export / "README.md").read_text(encoding="utf-8")
    assert card.splitlines()[0] == f"**Warning:** {sentence}"
    assert f"## Against the constant predictor\n\n{sentence}" in card
    # Loading the export for scoring, by the API and by sqa-score (which still scores, exit 0).
    assert learning_warnings(export) == [sentence]
    wav = tmp_path / "clip.wav"
    sf.write(wav, np.zeros(SR, dtype=np.float32) + 0.01, SR)
    capsys.readouterr()
    code = score.main(["--checkpoint", str(export), "--output", str(tmp_path / "s.csv"), str(wav)])
    err = capsys.readouterr().err
    assert code == 0
    assert f"sqa-score: warning: {sentence}\n" in err
    assert "LearningWarning" not in err


def test_the_constant_is_the_mean_of_the_training_labels(untrained_run):
    manifest, run_dir = untrained_run
    rows = [line.split(",") for line in manifest.read_text(encoding="utf-8").splitlines()[1:]]
    train = [float(r[1]) for r in rows if r[4] == "train"]
    check = json.loads((run_dir / "run_info.json").read_text(encoding="utf-8"))["learning_check"]
    assert check["train_mean"] == pytest.approx(np.mean(train))
    test = [float(r[1]) for r in rows if r[4] == "test"]
    assert check["test"]["constant_rmse"] == pytest.approx(learning.constant_rmse(test, np.mean(train)))
    valid = [float(r[1]) for r in rows if r[4] == "valid"]
    assert check["valid"]["constant_rmse"] == pytest.approx(learning.constant_rmse(valid, np.mean(train)))
