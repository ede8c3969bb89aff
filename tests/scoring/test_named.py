"""A predictor ready by name: `sqa.load("distillmos")`, `sqa-score --checkpoint distillmos`; no download."""

from __future__ import annotations

import csv
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import sqa
from sqa.core.extras import MissingExtraError
from sqa.scoring import cli as score_cli
from sqa.scoring import named

pytest.importorskip(
    "distillmos", reason="the distillmos extra is not installed (pip install 'sqa[distillmos]')"
)


@pytest.fixture(scope="module")
def song(tmp_path_factory) -> Path:
    """A 3 s stereo take at 44.1 kHz."""
    rate = 44100
    t = np.arange(3 * rate) / rate
    voice = 0.3 * np.sin(2 * np.pi * 262 * t) + 0.02 * np.random.default_rng(0).standard_normal(t.size)
    path = tmp_path_factory.mktemp("named") / "take.wav"
    sf.write(path, np.stack([voice, 0.8 * voice], axis=1), rate)
    return path


@pytest.fixture(scope="module")
def predictor():
    return sqa.load("distillmos")


def test_distillmos_by_name_scores_as_the_package_does(predictor, song, no_network):
    from sqa.baselines.distillmos import DistillMOS

    assert predictor.score(song) == pytest.approx(DistillMOS().score_file(song)["mos"], abs=1e-4)
    assert predictor.dimensions == ["mos"] and predictor.learning_warning is None


def test_the_temporary_export_is_removed_after_loading(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sqa.load("distillmos")
    assert list(tmp_path.iterdir()) == []


def test_sqa_score_takes_the_name_as_its_checkpoint(predictor, song, tmp_path):
    out = tmp_path / "scores.csv"
    assert score_cli.main(["--checkpoint", "distillmos", "--output", str(out), str(song)]) == 0
    with out.open() as fh:
        (row,) = list(csv.DictReader(fh))
    assert float(row["score"]) == pytest.approx(predictor.score(song), abs=1e-5)


def test_a_folder_of_that_name_is_the_users_own_export_reached_as_a_path(
    default_export, song, monkeypatch, tmp_path
):
    shutil.copytree(default_export, tmp_path / "distillmos")
    monkeypatch.chdir(tmp_path)
    assert named.is_named("distillmos")  # the bare name stays the built-in (test_named_paths.py)
    assert sqa.load("./distillmos").score(song) == sqa.load(default_export).score(song)


def test_without_the_package_the_error_names_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "distillmos" else real(name, *a)
    )
    with pytest.raises(MissingExtraError, match=r"pip install 'sqa\[distillmos\]'"):
        sqa.load("distillmos")
