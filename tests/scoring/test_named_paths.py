"""A built-in predictor's name cannot be shadowed: "distillmos" is the built-in, "./distillmos" a path.

Whatever the working directory holds (a folder with another export, a folder of junk, a file), the
bare name loads the built-in; the user's own is reached as a path, and the loaded scorer's
`source`, repr and INFO log line say which was loaded. A bare word close to a name that is no path
gets "did you mean".
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
from pathlib import Path

import pytest

import sqa
from sqa.exports.format import ExportError
from sqa.models.predictor import MOSPredictor
from sqa.scoring import cli as score_cli
from sqa.scoring import named

needs_distillmos = pytest.mark.skipif(
    importlib.util.find_spec("distillmos") is None,
    reason="the distillmos extra is not installed (pip install 'sqa[distillmos]')",
)


def built_in(scorer: sqa.Scorer) -> bool:
    """Whether `scorer` is the built-in Distill-MOS (its zero-shot head), not a user's export."""
    from sqa.models.distillmos import DistillMosZeroShot

    return isinstance(scorer.predictor, DistillMosZeroShot) and scorer.source == "built-in 'distillmos'"


@needs_distillmos
def test_a_folder_holding_another_export_does_not_shadow_the_name(
    default_export, monkeypatch, tmp_path, caplog
):
    shutil.copytree(default_export, tmp_path / "distillmos")
    monkeypatch.chdir(tmp_path)
    with caplog.at_level(logging.INFO, logger="sqa.scoring.scorer"):
        scorer = sqa.load("distillmos")
    assert built_in(scorer)
    assert caplog.messages == [
        f"loaded the built-in predictor 'distillmos' ({named.NAMED_PREDICTORS['distillmos']}); the "
        "'distillmos' in the working directory is not it: load it as './distillmos'"
    ]
    assert repr(scorer) == (
        "Scorer(source=\"built-in 'distillmos'\", kind='DistillMosZeroShot(DistillMosBackbone)', "
        "dimensions=['mos'], device='cpu')"
    )
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="sqa.scoring.scorer"):
        own = sqa.load("./distillmos")
    assert type(own.predictor) is MOSPredictor and own.source == str(tmp_path / "distillmos")
    assert caplog.messages == [f"loaded the export at {tmp_path / 'distillmos'}"]
    assert repr(own) == (
        f"Scorer(source={str(tmp_path / 'distillmos')!r}, kind='MOSPredictor(LogMelBackbone)', "
        "dimensions=['mos'], device='cpu')"
    )


@needs_distillmos
@pytest.mark.parametrize("junk", ["folder", "file"])
def test_junk_of_that_name_in_the_working_directory_changes_nothing(junk, monkeypatch, tmp_path):
    if junk == "folder":
        (tmp_path / "distillmos").mkdir()
        (tmp_path / "distillmos" / "notes.txt").write_text("not an export", encoding="utf-8")
    else:
        (tmp_path / "distillmos").write_bytes(b"\0junk")
    monkeypatch.chdir(tmp_path)
    assert built_in(sqa.load("distillmos"))
    # The path is the user's, read as an export (a folder, or a weights file beside its config.yaml).
    with pytest.raises(ExportError, match="config.yaml: not found"):
        sqa.load("./distillmos")


def test_only_the_bare_name_is_a_name(tmp_path):
    assert named.is_named("distillmos")
    for path in ("./distillmos", "distillmos/", f"{tmp_path}/distillmos", "runs/distillmos", "DistillMOS"):
        assert not named.is_named(path)
    assert not named.is_named(tmp_path / "distillmos") and not named.is_named(Path("distillmos"))


@pytest.mark.parametrize("typo", ["distilmos", "distillmoss", "DistillMOS", "distill-mos"])
def test_a_word_close_to_a_name_gets_did_you_mean(typo, monkeypatch, tmp_path, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ExportError) as err:
        sqa.load(typo)
    assert str(err.value) == (
        f"{typo}: no such export, and no built-in predictor of that name: did you mean 'distillmos'? "
        "(built-in: 'distillmos')"
    )
    assert score_cli.main(["--checkpoint", typo, "song.wav"]) == 2
    assert "did you mean 'distillmos'?" in capsys.readouterr().err


def test_did_you_mean_only_where_the_word_is_neither_a_path_nor_close_to_a_name(
    default_export, monkeypatch, tmp_path
):
    monkeypatch.chdir(tmp_path)
    # Another model's name, a path with a separator or a leading dot (a hidden folder), a word far
    # from any name: the usual not-found.
    for word in ("dnsmos", "runs/distilmos", "./distilmos", ".distilmos", "my-model"):
        with pytest.raises(ExportError, match="not found") as err:
            sqa.load(word)
        assert "did you mean" not in str(err.value)
    # An existing path spelled like a typo is the user's export.
    shutil.copytree(default_export, tmp_path / "distilmos")
    assert sqa.load("distilmos").source == str(tmp_path / "distilmos")


@needs_distillmos
@pytest.mark.parametrize("shadow", [False, True])
def test_sqa_score_says_it_scores_with_the_built_in_and_how_to_reach_a_folder_of_that_name(
    shadow, default_export, synthetic_root, monkeypatch, tmp_path, capsys
):
    if shadow:
        shutil.copytree(default_export, tmp_path / "distillmos")
    monkeypatch.chdir(tmp_path)
    clip = sorted((synthetic_root / "wav").iterdir())[0]
    assert score_cli.main(["--checkpoint", "distillmos", "--output", str(tmp_path / "s.csv"), str(clip)]) == 0
    line = f"sqa-score: loaded the built-in predictor 'distillmos' ({named.NAMED_PREDICTORS['distillmos']})"
    if shadow:
        line += "; the 'distillmos' in the working directory is not it: load it as './distillmos'"
    assert capsys.readouterr().err.splitlines() == [line]
    # A path loads the user's export, and says nothing of the built-in.
    if shadow:
        out = str(tmp_path / "own.csv")
        assert score_cli.main(["--checkpoint", "./distillmos", "--output", out, str(clip)]) == 0
        assert "built-in" not in capsys.readouterr().err
