"""Many clips at once, as a SHEET or SingMOS user passes them: a folder, a glob, a (B, T) tensor, a list."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

import sqa
from sqa.scoring import cli as score_cli
from sqa.scoring.scorer import Scorer
from tests.scoring.test_api_inputs import write


@pytest.fixture(scope="module")
def predictor(default_export: Path) -> Scorer:
    return sqa.load(default_export, batch_size=3)


@pytest.fixture
def takes(tmp_path: Path) -> Path:
    """A folder of three takes (one stereo at 44.1 kHz, one in a subfolder) and a note that is no audio."""
    folder = tmp_path / "takes"
    (folder / "anna").mkdir(parents=True)
    write(folder / "b.wav", 1.0, seed=1)
    write(folder / "a.wav", 0.6, rate=44100, channels=2, seed=2)
    sf.write(folder / "anna" / "c.flac", sf.read(write(tmp_path / "c.wav", 0.8, seed=3))[0], 16000)
    (folder / "notes.txt").write_text("not audio", encoding="utf-8")
    return folder


def test_a_folder_string_scores_each_audio_file_keyed_by_path(predictor, takes):
    files = [takes / "a.wav", takes / "anna" / "c.flac", takes / "b.wav"]
    expected = {str(p): predictor.score(p) for p in files}
    assert predictor.score(str(takes)) == expected
    assert list(predictor.score(takes)) == [str(p) for p in files]  # os.PathLike, sorted path order
    spreads = predictor.score_with_spread(str(takes))
    assert {p: s.score for p, s in spreads.items()} == expected


def test_score_files_of_a_folder_string_gives_one_result_per_file_never_per_character(predictor, takes):
    results = list(predictor.score_files(str(takes)))
    assert [r.path for r in results] == [
        str(takes / "a.wav"),
        str(takes / "anna" / "c.flac"),
        str(takes / "b.wav"),
    ]
    assert [r.error for r in results] == [None, None, None]
    assert [r.index for r in results] == [0, 1, 2]
    # A folder in a list stands for its files too, beside a plain file.
    mixed = list(predictor.score_files([takes / "anna", takes / "b.wav"]))
    assert [r.path for r in mixed] == [str(takes / "anna" / "c.flac"), str(takes / "b.wav")]
    assert [r.score for r in mixed] == pytest.approx([results[1].score, results[2].score], abs=1e-6)


def test_a_glob_scores_the_files_it_matches(predictor, takes):
    assert predictor.score(f"{takes}/*.wav") == {
        str(takes / "a.wav"): predictor.score(takes / "a.wav"),
        str(takes / "b.wav"): predictor.score(takes / "b.wav"),
    }
    assert list(predictor.score(f"{takes}/**/*.flac")) == [str(takes / "anna" / "c.flac")]
    assert [r.path for r in predictor.score_files(f"{takes}/b.*")] == [str(takes / "b.wav")]


def test_sqa_score_reads_a_glob_the_shell_left_alone(default_export, takes, tmp_path):
    out = tmp_path / "scores.csv"
    assert score_cli.main(["--checkpoint", str(default_export), "--output", str(out), f"{takes}/*.wav"]) == 0
    with out.open() as fh:
        rows = list(csv.DictReader(fh))
    assert [Path(r["path"]).name for r in rows] == ["a.wav", "b.wav"]


def test_an_empty_folder_or_a_glob_matching_nothing_is_one_clear_error(predictor, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.txt").write_text("x", encoding="utf-8")
    folder = re.escape(f"{tmp_path / 'empty'}: the folder holds no audio files (")
    pattern = re.escape(f"{tmp_path}/*.wav: no file matches this pattern")
    for call in (predictor.score, predictor.score_files):
        with pytest.raises(ValueError, match=f"^{folder}"):
            call(str(tmp_path / "empty"))
        with pytest.raises(ValueError, match=f"^{pattern}$"):
            call(f"{tmp_path}/*.wav")


def test_a_folder_inside_a_list_of_clips_is_refused_naming_it(predictor, takes):
    with pytest.raises(
        ValueError, match=r"^audio\[1\]: '.*takes' is a folder or a glob pattern; score it alone"
    ):
        predictor.score([takes / "b.wav", str(takes)])


def test_a_batch_tensor_gives_one_score_per_row_as_singmos_predictors_do(predictor):
    torch.manual_seed(0)
    for rows in (1, 2, 4, 8, 12):
        batch = torch.rand(rows, 16000) - 0.5
        scores = predictor.score(batch, sample_rate=16000)
        assert isinstance(scores, list) and len(scores) == rows
        assert scores == [predictor.score(row, 16000) for row in batch]
        assert scores == predictor.score(list(batch), 16000)
    two = predictor.score(torch.rand(2, 16000) - 0.5, 16000)
    assert two[0] != two[1]  # two clips, not two channels averaged into one score
    # A numpy batch is read alike, and so is a batch at another rate (each row resampled).
    batch = np.random.default_rng(1).uniform(-0.3, 0.3, (3, 22050)).astype(np.float32)
    assert predictor.score(batch, 22050) == [predictor.score(row, 22050) for row in batch]


def test_a_batch_gives_one_spread_per_row(predictor):
    batch = torch.rand(3, 8000) - 0.5
    spreads = predictor.score_with_spread(batch, 16000)
    assert [s.score for s in spreads] == predictor.score(batch, 16000)
