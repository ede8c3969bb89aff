"""`--vocal-only` and `vocal_only=True`: silence and a noise floor around a clip leave its score alone."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import soundfile as sf

import sqa
from sqa.scoring import cli as score
from sqa.scoring.scorer import ClipWarning
from tests.scoring.test_scoring import sung_phrase

RATE = 16000
SILENT_REASON = "no vocal activity: every 20 ms frame is below -50 dBFS (silence or a noise floor)"


def padded(wav: np.ndarray, pad: np.ndarray) -> np.ndarray:
    """`wav` (N,) with `pad` before and after it."""
    return np.concatenate([pad, wav, pad]).astype(np.float32)


def test_silence_and_a_noise_floor_around_a_clip_leave_its_vocal_only_score_alone(tiny_run, tmp_path, capsys):
    wav = sung_phrase(4)
    rng = np.random.default_rng(1)
    clips = {
        "sysA-alone": wav,
        "sysA-digital": padded(wav, np.zeros(6 * RATE, np.float32)),
        "sysA-floor": padded(wav, 1e-3 * rng.standard_normal(6 * RATE)),  # -60 dBFS white noise
        "sysB-silent": np.zeros(4 * RATE, np.float32),
    }
    for name, audio in clips.items():
        sf.write(tmp_path / f"{name}.wav", audio, RATE, subtype="FLOAT")
    paths = [str(tmp_path / f"{name}.wav") for name in clips]
    export = str(tiny_run[1])
    out = tmp_path / "scores.json"
    args = ["--checkpoint", export, "--num-workers", "0", "--by-system", "--output", str(out)]
    assert score.main([*args, "--vocal-only", *paths]) == 0
    rows = json.loads(out.read_text())
    alone, digital, floor, silent = (row["score"] for row in rows)
    assert abs(digital - alone) <= 0.02 and abs(floor - alone) <= 0.02
    assert silent is None and rows[3]["reason"] == SILENT_REASON
    assert [row["reason"] for row in rows[:3]] == ["", "", ""]
    assert f"sqa-score: warning: {paths[3]}: {SILENT_REASON}" in capsys.readouterr().err.splitlines()
    systems = json.loads((tmp_path / "scores.systems.json").read_text())
    assert systems[0]["n"] == 3 and systems[0]["score"] == pytest.approx((alone + digital + floor) / 3)
    # The system without a scored clip: no mean, no interval, nothing to compare below it.
    assert systems[1]["system_id"] == "sysB" and systems[1]["n"] == 0
    assert {k: v for k, v in systems[1].items() if k not in ("system_id", "n")} == dict.fromkeys(
        set(systems[1]) - {"system_id", "n"}
    )
    # Without it, the padding moves the score and the silent file gets a number.
    assert score.main([*args, "--overwrite", *paths]) == 0
    whole = [row["score"] for row in json.loads(out.read_text())]
    assert whole[0] == pytest.approx(alone, abs=1e-6) and abs(whole[1] - alone) > 0.02
    assert isinstance(whole[3], float) and "reason" not in json.loads(out.read_text())[0]


def test_vocal_only_in_the_api_scores_the_vocal_span_and_gives_none_with_a_warning(default_export):
    wav = sung_phrase(2)
    plain = sqa.load(default_export)
    vocal = sqa.load(default_export, vocal_only=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scores = vocal.score([padded(wav, np.zeros(RATE, np.float32)), np.zeros(RATE, np.float32)], RATE)
    assert scores[0] == plain.score(wav, RATE) and scores[1] is None
    assert [str(w.message) for w in caught] == [f"audio[1]: {SILENT_REASON}"]
    assert caught[0].category is ClipWarning
    assert vocal.score_waveforms([np.zeros(RATE, np.float32)]) == [None]
    # Noise is loud enough but unpitched: not vocal either, with its own reason.
    with pytest.warns(ClipWarning, match="none of the 50 frame"):
        assert vocal.score(0.1 * np.random.default_rng(0).standard_normal(RATE), RATE) is None


def test_an_export_recording_vocal_only_trims_by_default_and_the_caller_can_say_otherwise(
    default_export, tmp_path
):
    """Both sources of `vocal_only`: the export's record (the default) and the caller's argument."""
    import shutil

    from sqa.exports.format import ExportError

    wav = sung_phrase(2)
    around = padded(wav, np.zeros(3 * RATE, np.float32))
    export = tmp_path / "export"
    shutil.copytree(default_export, export)
    config = export / "config.yaml"
    text = config.read_text(encoding="utf-8")
    assert "vocal_only: false" in text
    config.write_text(text.replace("vocal_only: false", "vocal_only: true"), encoding="utf-8")
    recorded = sqa.load(export)
    assert recorded.vocal_only
    assert recorded.score(around, RATE) == recorded.score(wav, RATE)
    told = sqa.load(export, vocal_only=False)
    assert abs(told.score(around, RATE) - told.score(wav, RATE)) > 0.02
    plain = sqa.load(default_export)
    assert not plain.vocal_only and plain.score(around, RATE) == told.score(around, RATE)
    assert sqa.load(default_export, vocal_only=True).score(around, RATE) == recorded.score(wav, RATE)
    # An export written before the record existed was trained on whole clips.
    config.write_text(text.replace("vocal_only: false\n", ""), encoding="utf-8")
    assert "vocal_only" not in config.read_text(encoding="utf-8")
    assert not sqa.load(export).vocal_only
    config.write_text(text.replace("vocal_only: false", "vocal_only: 'yes'"), encoding="utf-8")
    with pytest.raises(ExportError, match="vocal_only must be true or false, got 'yes'"):
        sqa.load(export)
