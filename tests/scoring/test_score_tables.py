"""Scores as a pandas DataFrame in one call: `score_files(...)`, `score(folder)` and per system.

Each table is checked against the results it was made from and against the CSV `sqa-score` writes
for the same files (`--by-system` for the per-system table).
"""

from __future__ import annotations

import copy
import json
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import sqa
from sqa.core.extras import MissingExtraError
from sqa.exports.format import export_predictor
from sqa.scoring import cli as score_cli
from sqa.scoring.scorer import FileScores, FolderScores
from tests.models.test_uncertainty import tiny

pd = pytest.importorskip("pandas", reason="pandas comes with the train extra (pip install 'sqa[train]')")

# Two clips of each of two systems of the synthetic corpus: enough for per-system means.
TAKES = ["sys0001-utt0001", "sys0001-utt0002", "sys0002-utt0001", "sys0002-utt0002"]


@pytest.fixture(scope="module")
def takes(synthetic_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of four `<sys>-<utt>` takes of the synthetic corpus."""
    folder = tmp_path_factory.mktemp("tables") / "takes"
    folder.mkdir()
    for name in TAKES:
        shutil.copy(synthetic_root / "wav" / f"{name}.wav", folder)
    return folder


@pytest.fixture(scope="module")
def predictor(default_export):
    return sqa.load(default_export)


@pytest.fixture(scope="module")
def spread_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained tiny Gaussian uncertain predictor: an export with a spread."""
    return export_predictor(
        tiny(score_range=[0.0, 10.0]), tmp_path_factory.mktemp("spread") / "export", 16000, []
    )


def cli_table(export: Path, inputs: list[str], tmp_path: Path, *flags: str) -> Path:
    """The CSV `sqa-score` writes for `inputs` (its path)."""
    out = tmp_path / "scores.csv"
    args = ["--checkpoint", str(export), "--output", str(out), "--num-workers", "0", *flags, *inputs]
    assert score_cli.main(args) == 0
    return out


def test_score_files_gives_one_row_per_file_in_input_order_equal_to_its_results(predictor, takes):
    paths = [str(takes / f"{name}.wav") for name in reversed(TAKES)]
    results = list(predictor.score_files(paths))
    frame = predictor.score_files(paths).to_pandas()
    assert isinstance(predictor.score_files(paths), FileScores)
    assert list(frame.columns) == ["path", "score", "warning", "error"]
    assert list(frame.index) == [0, 1, 2, 3]
    assert frame["path"].tolist() == paths == [r.path for r in results]
    assert frame["score"].tolist() == [r.score for r in results]
    assert frame["score"].dtype == np.float64
    # Batches finishing out of order still give rows in input order.
    unordered = predictor.score_files(paths, ordered=False).to_pandas()
    pd.testing.assert_frame_equal(unordered, frame)


def test_an_unreadable_file_is_a_row_with_its_error_and_no_score(predictor, takes, tmp_path):
    broken = tmp_path / "broken.wav"
    broken.write_bytes(b"not audio")
    paths = [str(takes / "sys0001-utt0001.wav"), str(broken)]
    (good, bad) = list(predictor.score_files(paths))
    frame = predictor.score_files(paths).to_pandas()
    assert len(frame) == 2 and frame["score"][0] == good.score
    assert np.isnan(frame["score"][1]) and frame["error"][1] == bad.error and bad.error
    assert frame["error"].isna()[0]


def test_score_files_table_equals_what_sqa_score_writes_spread_and_interval_included(
    spread_export, takes, tmp_path
):
    paths = [str(takes / f"{name}.wav") for name in TAKES]
    frame = sqa.load(spread_export).score_files(paths).to_pandas()
    assert list(frame.columns) == ["path", "score", "spread", "lo90", "hi90", "warning", "error"]
    written = pd.read_csv(cli_table(spread_export, paths, tmp_path))
    columns = ["path", "score", "spread", "lo90", "hi90"]
    pd.testing.assert_frame_equal(frame[columns], written[columns], atol=1e-6)


def test_score_of_a_folder_is_still_the_dict_it_was(predictor, takes):
    scores = predictor.score(takes)
    expected = {str(takes / f"{name}.wav"): predictor.score(takes / f"{name}.wav") for name in TAKES}
    assert isinstance(scores, dict) and isinstance(scores, FolderScores)
    assert scores == expected and list(scores) == list(expected)
    assert scores[str(takes / "sys0001-utt0001.wav")] == expected[str(takes / "sys0001-utt0001.wav")]
    assert json.loads(json.dumps(scores)) == expected
    assert dict(scores) == expected and {**scores} == expected
    assert pickle.loads(pickle.dumps(scores)) == expected and copy.deepcopy(scores) == expected


def test_score_of_a_folder_converts_in_one_call(predictor, takes):
    scores = predictor.score(takes)
    frame = scores.to_pandas()
    assert list(frame.columns) == ["path", "score"]
    assert frame["path"].tolist() == list(scores)
    assert frame["score"].tolist() == list(scores.values())


def test_score_with_spread_of_a_folder_gives_its_interval_columns(spread_export, takes):
    scorer = sqa.load(spread_export)
    spreads = scorer.score_with_spread(takes)
    frame = spreads.to_pandas()
    assert list(frame.columns) == ["path", "score", "spread", "lo90", "hi90"]
    assert frame["lo90"].tolist() == [s.interval90[0] for s in spreads.values()]
    assert frame["spread"].tolist() == [s.spread for s in spreads.values()]


def test_several_dimensions_each_get_a_column():
    scores = FolderScores({"a.wav": {"mos": 3.0, "lyrics": 2.5}, "b.wav": None}, ["mos", "lyrics"])
    frame = scores.to_pandas()
    assert list(frame.columns) == ["path", "score", "score_lyrics"]
    assert frame["score_lyrics"][0] == 2.5 and frame[["score", "score_lyrics"]].iloc[1].isna().all()


def test_by_system_equals_the_table_sqa_score_by_system_writes(predictor, default_export, takes, tmp_path):
    cli_table(default_export, [str(takes)], tmp_path, "--by-system")
    written = pd.read_csv(tmp_path / "scores.systems.csv")
    for frame in (
        predictor.score_files(takes).to_pandas(by_system=True),
        predictor.score(takes).to_pandas(by_system=True),
    ):
        assert list(frame.columns)[:5] == ["system_id", "n", "score", "lo", "hi"]
        assert sorted(frame["system_id"]) == ["sys0001", "sys0002"] and frame["n"].tolist() == [2, 2]
        # The last system has nothing below it: None in the frame, an empty cell (NaN) read back.
        missing = frame.isna()
        pd.testing.assert_frame_equal(
            frame.astype(object).mask(missing, np.nan), written.astype(object), atol=1e-6, check_dtype=False
        )


def test_by_system_names_a_clip_without_a_system(predictor, takes, tmp_path):
    shutil.copy(takes / "sys0001-utt0001.wav", tmp_path / "take.wav")
    with pytest.raises(ValueError, match=r"cannot tell the system of 1 clip\(s\), e\.g\. .*take\.wav"):
        predictor.score_files([takes / "sys0001-utt0001.wav", tmp_path / "take.wav"]).to_pandas(
            by_system=True
        )


def test_to_pandas_after_iterating_is_refused_rather_than_short(predictor, takes):
    results = predictor.score_files(takes)
    next(results)
    with pytest.raises(ValueError, match="1 were already iterated: call it on a fresh score_files"):
        results.to_pandas()


def test_without_pandas_the_error_names_the_extra_that_installs_it(predictor, takes, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    extra = r"needs the Python package 'pandas', which is not installed: pip install 'sqa\[train\]'"
    with pytest.raises(MissingExtraError, match=extra):
        predictor.score_files(takes).to_pandas()
    with pytest.raises(MissingExtraError, match=extra):
        predictor.score(takes).to_pandas()
    # The dict itself needs no pandas.
    assert len(predictor.score(takes)) == len(TAKES)
