"""The model card of an export: every section from its sources, undefined values said plainly."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import sqa
from sqa.exports import model_card
from sqa.exports.format import export_predictor, load_export
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor

# Kept by hand: the renderer's inputs with values a run rarely writes (undefined metrics, an older
# run's records); a trained run's card: tests/training/test_run_outputs.py and test_learning_check.py.
CONFIG = {
    "sample_rate": 16000,
    "model": {"_target_": "sqa.models.predictor.MOSPredictor", "backbone": {"_target_": "x.LogMelBackbone"}},
    "f0": None,
}
METRICS = {
    "test1": {
        "utt": {"rmse": 0.5, "srcc": 0.71234, "n": 40},
        "sys": {"rmse": 0.3, "srcc": None, "n": 1},
        "ci": {"utt": {"rmse": [0.4, 0.6], "srcc": [0.6, 0.8]}, "sys": {"rmse": [math.nan, math.nan]}},
        "undefined": {"sys": {"srcc": "1 system"}},
    },
    "avg": {"utt": {"rmse": 0.5, "srcc": 0.71234, "n": 40}, "sys": {"rmse": 0.3, "srcc": math.nan, "n": 1}},
}
RUN_INFO = {
    "sqa": "0.1.0",
    "python": "3.11.7",
    "platform": "Linux",
    "packages": {"torch": "2.9.1", "pyworld": None},
    "corpus": {
        "reader": "sqa.data.readers.read_singmos_pro",
        "fingerprint": "abc123",
        "clips": {"train": 100, "test (test1)": 40},
        "systems": 9,
        "domains": ["singmospro-p1"],
        "score_range": [1.0, 5.0],
    },
}
TRAINING = {
    "seed": 3,
    "optim": {"_target_": "torch.optim.SGD", "lr": 0.001},
    "data": {"batch_size": 15, "corpus": {"root": "/home/me/private/SingMOS-Pro"}},
    "trainer": {"max_epochs": 200, "accelerator": "gpu"},
}


def test_metrics_rows_hold_values_and_intervals_and_say_what_is_undefined():
    card = model_card.render(CONFIG, METRICS, run_info=RUN_INFO, training=TRAINING)
    assert "| test1 | utterance | 40 | 0.500 [0.400, 0.600] | 0.712 [0.600, 0.800] |" in card
    # An undefined metric (null or NaN) and an interval that cannot exist are not printed as numbers.
    assert "| test1 | system | 1 | 0.300 | n/a |" in card
    # One test set: its rows are the average's, which is not repeated.
    assert "| average |" not in card
    assert "- test1, system SRCC: 1 system" in card


def test_metrics_of_one_level_get_rows_of_that_level_only():
    utt_only = {"test1": {"utt": METRICS["test1"]["utt"]}}
    rows = [line for line in model_card.render(CONFIG, utt_only).splitlines() if line.startswith("| test1")]
    assert rows == ["| test1 | utterance | 40 | 0.500 | 0.712 |"]


def test_data_configuration_software_use_and_citation_sections():
    card = model_card.render(CONFIG, METRICS, run_info=RUN_INFO, training=TRAINING)
    for heading in (
        "## Intended use",
        "## Data",
        "## Test results",
        "## Configuration",
        "## Software",
        "## Citation",
    ):
        assert heading in card
    assert "`sqa.data.readers.read_singmos_pro`; fingerprint `abc123`" in card
    assert "- train: 100 clips" in card and "- systems: 9" in card
    assert "torch 2.9.1" in card and "pyworld" not in card
    assert "lr: 0.001" in card and "batch_size: 15" in card and "max_epochs: 200" in card
    # Local paths of the training machine stay out of a card meant to be shared.
    assert "/home/me" not in card and "accelerator" not in card
    assert "synthetic corpus" not in card
    synthetic = {**RUN_INFO, "corpus": {**RUN_INFO["corpus"], "reader": model_card.SYNTHETIC_READER}}
    assert "synthetic corpus" in model_card.render(CONFIG, METRICS, run_info=synthetic)


def test_an_export_without_run_records_still_gets_a_card_and_loads(tmp_path):
    export = export_predictor(MOSPredictor(LogMelBackbone()), tmp_path / "export", 16000, ["d"], METRICS)
    card = (export / "README.md").read_text()
    assert card.count("Not recorded") == 3 and "| test1 | utterance |" in card
    assert not (export / "run_info.json").exists()
    load_export(export)


def test_a_card_on_another_scale_says_so_and_how_the_head_maps_onto_it():
    model = {**CONFIG["model"], "range_clip": True, "score_range": [0.0, 100.0]}
    corpus = {
        **RUN_INFO["corpus"],
        "reader": "sqa.data.synthetic.load_synthetic_mushra",
        "score_range": [0, 100],
    }
    card = model_card.render({**CONFIG, "model": model}, METRICS, run_info={**RUN_INFO, "corpus": corpus})
    assert "on the 0–100 scale of its training ratings" in card
    assert "mapped linearly onto 0–100 (`score_range`)" in card and "synthetic corpus" in card
    # On 1-5 (recorded or not) nothing is said about a map.
    assert "mapped linearly" not in model_card.render(CONFIG, METRICS, run_info=RUN_INFO)


SELECTION = {
    "rule": "system-level srcc over valid sets p1, p2 (max)",
    "checks": 49,
    "best_checkpoint": "best-step=925.ckpt",
    "selected_step": 925,
}
END = {
    "step": 1225,
    "stopped_by": "early_stopping",
    "reason": "early stopping: val/selection did not improve in 12 validation checks",
}


def test_the_card_states_the_selected_step_and_why_training_stopped():
    card = model_card.render(
        CONFIG, METRICS, run_info={**RUN_INFO, "selection": SELECTION, "training_end": END}
    )
    assert (
        "- exported weights: step 925 (`best-step=925.ckpt`), the best system-level srcc over valid sets"
        " p1, p2 (max) of 49 validation checks" in card
    )
    assert (
        "- training stopped at step 1225: early stopping: val/selection did not improve in 12"
        " validation checks" in card
    )
    assert card.index("## Selected checkpoint") < card.index("## Test results")
    # A run from before these were recorded: what is known, and what is not.
    old = {**RUN_INFO, "selection": {"best_checkpoint": "best-step=50.ckpt"}}
    card = model_card.render(CONFIG, METRICS, run_info=old)
    assert "- exported weights: an unrecorded step (`best-step=50.ckpt`)" in card
    assert "- why training stopped: not recorded" in card


def test_domains_are_listed_only_for_a_model_that_embeds_them():
    card = model_card.render({**CONFIG, "domains": ["singmospro-p1"]}, METRICS, run_info=RUN_INFO)
    assert "singmospro-p1" not in card and "domain" not in card
    model = {**CONFIG["model"], "domain_dim": 4, "num_domains": 2}
    card = model_card.render({**CONFIG, "model": model, "domains": ["p1", "p2"]}, METRICS, run_info=RUN_INFO)
    assert "one of the domains (annotation batches) it was trained on: `p1`, `p2`; the first unless" in card
    assert "`sqa-score` says so in one line when none is named. `--domain mean`" in card


def test_the_python_example_runs_as_written(tmp_path):
    export = export_predictor(MOSPredictor(LogMelBackbone()), tmp_path / "export", 16000, ["d"], METRICS)
    card = (export / "README.md").read_text()
    (code,) = re.findall(r"```python\n(.*?)```", card, flags=re.S)
    assert len(code.splitlines()) == 3
    audio, sample_rate = 0.1 * np.sin(np.linspace(0, 2000, 32000)).astype(np.float32), 32000
    scope = {"audio": audio, "sample_rate": sample_rate}
    exec(code.replace("<this folder>", str(export)), scope)
    assert scope["score"] == sqa.load(export).score(audio, sample_rate)


def test_the_card_shows_the_sqa_score_command_and_every_input_of_score():
    card = model_card.render(CONFIG, METRICS, run_info=RUN_INFO)
    assert "\nsqa-score --checkpoint <this folder> --output scores.csv clip.wav more/clips/\n" in card
    assert "python -m" not in card
    assert 'model.score("clip.wav")' in card and "`(samples, channels)`" in card


IMPORTED = {
    "singmos_pro": (
        "# SingMOS-Pro predictor (s3prl `wav2vec2_large_ll60k`), imported into sqa",
        "Yuxun Tang, Lan Liu, Wenhao Feng, Yiwen Zhao, Jionghao Han, Yifeng Yu, Jiatong Shi and Qin Jin",
        "SingMOS-Pro's overall MOS",
    ),
    "singmos_v1": (
        "# SingMOS v1 predictor (s3prl `wav2vec2_base_960`), imported into sqa",
        "Yuxun Tang et al.",
        "SingMOS, the singing track of the VoiceMOS Challenge 2024",
    ),
    "sheet": (
        "# SHEET SSL-MOS predictor (s3prl `wav2vec2`), imported into sqa",
        "Wen-Chin Huang et al.",
        "SHEET's released predictors are trained on speech",
    ),
}


@pytest.mark.parametrize("kind", list(IMPORTED))
def test_an_imported_card_names_the_release_its_training_data_and_its_authors(kind):
    title, authors, data = IMPORTED[kind]
    upstream = title.split("`")[1]
    release = {"kind": kind, "weights": "released.pt", "upstream": upstream, "sqa": "0.1.0"}
    card = model_card.render(CONFIG, {}, run_info={"release": release})
    assert card.splitlines()[0] == title
    assert "for singing" not in card.splitlines()[0]
    # What it was trained on as far as its authors say, the rest left to the release.
    (trained,) = [line for line in card.splitlines() if line.startswith("- trained by its authors on ")]
    assert data in trained and trained.endswith("see the release")
    assert f"by {authors}, converted into an sqa export by `sqa-import`" in card
    assert f"If you use this model, cite its authors ({authors}): " in card
    assert "- released weights: `released.pt`, from " in card and f"`sqa-import {kind}` of sqa 0.1.0" in card
    # Nothing of a training run is claimed, nor said to be missing.
    assert "Not recorded" not in card and "trained with sqa" not in card and "Selected checkpoint" not in card
    assert "None recorded by sqa; for its authors' results, see the release." in card


@pytest.mark.usefixtures("no_network")
@pytest.mark.parametrize("layout", ["singmos_pro", "singmos_v1", "sheet_wav2vec2_base"])
def test_sqa_import_writes_the_card_of_its_release(layout, tmp_path):
    import json

    from sqa.exports import importers
    from tests.exports.test_import import LAYOUTS, released_model

    _, export, args = released_model(layout, tmp_path)
    assert importers.main(args) == 0
    kind = LAYOUTS[layout][0]
    card = (export / "README.md").read_text(encoding="utf-8")
    assert card.splitlines()[0] == IMPORTED[kind][0]
    release = json.loads((export / "run_info.json").read_text(encoding="utf-8"))["release"]
    # File names, never the paths of the machine that imported it.
    assert release["weights"] == "released.pt" and str(tmp_path) not in card + str(release)
    assert release.get("config") == ("config.yml" if kind == "sheet" else None)
    assert sqa.load(export).learning_warning is None
