"""predictions.csv names each clip's audio file (`wav_path`); files written before it still read."""

from __future__ import annotations

import math

from sqa.core import artefacts
from sqa.reports import compare

ROWS = [
    {"sample_id": "u1", "system_id": "s1", "test_set": "t", "mos": 3.0, "pred": 2.5, "mos_lyrics": 4.0},
    {"sample_id": "u2", "system_id": "s2", "test_set": "t", "mos": 2.0, "pred": 4.5, "mos_lyrics": math.nan},
]


def test_wav_path_is_the_last_column_and_reads_back_as_text(tmp_path):
    rows = [
        {**r, "pred_lyrics": 1.0, "wav_path": path}
        for r, path in zip(ROWS, ["/data/audio/u1.wav", "=rel/u2.flac"], strict=True)
    ]
    artefacts.write_predictions(tmp_path, rows, ["lyrics"])
    lines = (tmp_path / "predictions.csv").read_text(encoding="utf-8").splitlines()
    # Last: the columns before it keep the places they had.
    assert lines[0] == "sample_id,system_id,test_set,mos,pred,mos_lyrics,pred_lyrics,wav_path"
    back = artefacts.read_predictions(tmp_path)
    # Text like every text cell: a path a spreadsheet would run as a formula is neutralised.
    assert [r["wav_path"] for r in back] == ["/data/audio/u1.wav", "'=rel/u2.flac"]
    assert back[0]["pred"] == 2.5 and math.isnan(back[1]["mos_lyrics"])


def test_rows_without_a_file_and_files_written_before_it_keep_the_old_columns(tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    artefacts.write_predictions(old, [{k: v for k, v in r.items() if k != "mos_lyrics"} for r in ROWS])
    header = (old / "predictions.csv").read_text(encoding="utf-8").splitlines()[0]
    assert header == "sample_id,system_id,test_set,mos,pred"
    new = tmp_path / "new"
    new.mkdir()
    artefacts.write_predictions(new, [{**r, "wav_path": f"{r['sample_id']}.wav"} for r in ROWS])
    # sqa-compare reads an old and a new file of the same clips side by side.
    aligned = compare.align([old / "predictions.csv", new / "predictions.csv"])
    assert aligned["preds"] == [[2.5, 4.5], [2.5, 4.5]] and aligned["test_set"] == ["t", "t"]
