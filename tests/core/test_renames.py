"""The table of moved dotted paths: every entry resolves, objects win over modules, configs are rewritten."""

from __future__ import annotations

import importlib

import pytest
from hydra.utils import get_object
from omegaconf import OmegaConf

from sqa.core.renames import MOVED, current, rename_targets


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_every_moved_path_resolves_and_the_old_one_no_longer_exists(old, new):
    assert get_object(new) is not None
    module, _, name = old.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ModuleNotFoundError, AttributeError):
        found = None
    # An old module whose name a package took (sqa.training, sqa.scoring) still maps its objects.
    assert found is None or hasattr(found, "__path__"), f"{old} still exists: it needs no entry"


def test_an_object_entry_wins_over_its_module_entry():
    assert current("sqa.plots.MetricHistory") == "sqa.training.callbacks.MetricHistory"
    assert current("sqa.plots.scatter") == "sqa.reports.plots.scatter"
    assert current("sqa.plots") == "sqa.reports.plots"


def test_only_whole_path_segments_are_mapped():
    assert current("sqa.score.main") == "sqa.scoring.cli.main"
    assert current("sqa.score_inputs.expand") == "sqa.scoring.inputs.expand"
    assert current("sqa.scoring.Scorer") == "sqa.scoring.scorer.Scorer"
    assert current("sqa.training.build") == "sqa.training.run.build"


@pytest.mark.parametrize(
    "path", ["sqa.training.datamodule.MOSDataModule", "sqa.training.run.build", "sqa.scoring.cli.main"]
)
def test_a_current_path_through_a_package_that_took_an_old_module_name_is_kept(path):
    assert current(path) == path


def test_targets_are_rewritten_at_any_depth_in_dicts_lists_and_configs(caplog):
    config = {
        "loss": {"_target_": "sqa.losses.margin_l1", "margin": 0.1},
        "callbacks": [{"_target_": "sqa.plots.MetricHistory"}, {"_target_": "lightning.Trainer"}],
        "data": {"corpus": {"_target_": "sqa.data.corpus.read_csv_manifest", "path": "m.csv"}},
        "note": "sqa.losses.margin_l1 stays text outside a _target_",
    }
    composed = OmegaConf.create({**config, "missing": "???", "ref": "${loss.margin}"})
    for tree in (config, composed):
        rename_targets(tree)
        assert tree["loss"]["_target_"] == "sqa.training.losses.margin_l1"
        assert [c["_target_"] for c in tree["callbacks"]] == [
            "sqa.training.callbacks.MetricHistory",
            "lightning.Trainer",
        ]
        assert tree["data"]["corpus"]["_target_"] == "sqa.data.readers.read_csv_manifest"
        assert tree["note"] == "sqa.losses.margin_l1 stays text outside a _target_"
    assert OmegaConf.is_missing(composed, "missing") and composed.ref == 0.1
    assert "sqa.losses.margin_l1 moved to sqa.training.losses.margin_l1" in caplog.text
