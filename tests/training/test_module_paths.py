"""The split training modules keep every public path they had, and the classes configs name stay put.

run.py, ensemble.py, callbacks.py, run_outputs.py and lit_module.py each handed helpers to modules
of their own (builder, ridge, run_callbacks, ...) and import them back. Users' code imports these
paths, and configs, exports and checkpoints name the classes by module; a missing re-export or a
moved class would break them silently.
"""

from __future__ import annotations

import importlib

import pytest
from hydra.utils import get_object

from sqa.core.renames import current

# Every public name each module defined before the split (its logger aside).
OLD_NAMES = {
    "sqa.training.run": (
        "ARCHITECTURES",
        "HEAD_INITS",
        "RunResult",
        "RunSettings",
        "build",
        "check_resumable",
        "init_from",
        "log_interval",
        "run",
        "train_means",
    ),
    "sqa.training.ensemble": (
        "DEFAULT_ALPHA",
        "METHODS",
        "VALID_SPLIT",
        "EnsembleError",
        "Member",
        "build_ensemble",
        "check_members",
        "clip_keys",
        "fit_ridge",
        "main",
        "member_corpus",
        "member_record",
        "read_member",
        "rebased_data",
        "ridge_weights",
        "shared_corpus",
        "tested",
        "validation_corpus",
    ),
    "sqa.training.callbacks": (
        "AtomicCheckpointIO",
        "CHECKPOINTS",
        "MetricHistory",
        "ParameterSummary",
        "REQUIRED",
        "SELECTION_WATCHERS",
        "SelectionCheckpoint",
        "SelectionEarlyStopping",
        "StartedOver",
        "ValidationLog",
        "checkpoint_step",
        "instantiate_callbacks",
        "logged_tiebreak",
        "progress_bar",
        "summary_table",
    ),
    "sqa.training.run_outputs": (
        "RECORDED_PACKAGES",
        "corpus_name",
        "corpus_summary",
        "curve_set_names",
        "describe_objective",
        "hparam_metrics",
        "learning_check",
        "log_figures",
        "log_hparams",
        "objective_record",
        "recorded_data",
        "report_selection",
        "run_info",
        "run_sigma",
        "scale_shift",
        "shift_record",
        "training_end",
        "write_test_outputs",
    ),
    "sqa.training.lit_module": ("LossFn", "MOSModule", "OptimizerFactory", "labelled"),
}
OLD_PATHS = [f"{module}.{name}" for module, names in OLD_NAMES.items() for name in names]
# The classes that conf/**/*.yaml, exported configs or checkpoints (callback state keys) name.
NAMED_CLASSES = [
    "sqa.training.callbacks.MetricHistory",
    "sqa.training.callbacks.ParameterSummary",
    "sqa.training.callbacks.SelectionCheckpoint",
    "sqa.training.callbacks.SelectionEarlyStopping",
    "sqa.training.callbacks.StartedOver",
    "sqa.training.callbacks.ValidationLog",
    "sqa.training.lit_module.MOSModule",
]


@pytest.mark.parametrize("path", OLD_PATHS)
def test_every_public_path_of_the_split_modules_is_current_and_resolves(path: str) -> None:
    assert current(path) == path  # not an old path: nothing rewrites it
    assert get_object(path) is not None


@pytest.mark.parametrize("module", sorted(OLD_NAMES))
def test_each_split_module_exports_exactly_its_old_names(module: str) -> None:
    assert sorted(importlib.import_module(module).__all__) == sorted(OLD_NAMES[module])


@pytest.mark.parametrize("path", NAMED_CLASSES)
def test_the_classes_that_configs_and_checkpoints_name_are_defined_where_they_are_named(path: str) -> None:
    module, _, name = path.rpartition(".")
    assert get_object(path).__module__ == module


# `run` itself is the exception that predates the split: sqa.training.run is the module.
@pytest.mark.parametrize("name", [n for n in OLD_NAMES["sqa.training.run"] if n != "run"])
def test_no_new_module_takes_the_old_flat_path_of_a_run_object(name: str) -> None:
    # `sqa.training` was today's sqa.training.run: `sqa.training.<name>` must still map there, which
    # a module sqa/training/<name>.py would prevent (sqa.core.renames.current keeps module paths).
    assert current(f"sqa.training.{name}") == f"sqa.training.run.{name}"
