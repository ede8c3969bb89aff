"""The table of moved dotted paths: every entry resolves, objects win over modules, configs are rewritten."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from hydra.utils import get_object
from omegaconf import OmegaConf

import sqa
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


# Rule: MOVED's entries match whole dotted segments of a path. Neighbour: matching by string
# prefix, under which `sqa.export` (old) also matches `sqa.exports...` (current) and `sqa.baseline`
# matches `sqa.baselines...`, rewriting them to paths that do not exist.
@pytest.mark.parametrize(
    "path",
    [
        "sqa.exports",
        "sqa.exports.format",
        "sqa.exports.format.export_predictor",
        "sqa.exports.config",
        "sqa.exports.model_card",
        "sqa.baselines",
        "sqa.baselines.cli",
        "sqa.baselines.cli.main",
        "sqa.baselines.dnsmos",
    ],
)
def test_a_current_path_that_merely_starts_like_a_moved_one_is_kept(path: str, caplog) -> None:
    assert get_object(path) is not None  # a current path, which nothing should rewrite
    assert current(path) == path
    config = {"model": {"_target_": path}}
    assert rename_targets(config) == {"model": {"_target_": path}}
    assert "moved to" not in caplog.text


def test_the_moved_paths_beside_them_are_still_mapped() -> None:
    """The other half of the rule above: the old paths themselves still map (whole segments)."""
    assert current("sqa.export") == "sqa.exports.format"
    assert current("sqa.export.export_predictor") == "sqa.exports.format.export_predictor"
    assert current("sqa.baseline") == "sqa.baselines.cli"
    assert current("sqa.baseline.main") == "sqa.baselines.cli.main"


SQA_DIR = Path(sqa.__file__).resolve().parent

# Packages whose name an old module of sqa 0.1 took (`sqa.training` was today's sqa.training.run,
# `sqa.scoring` today's sqa.scoring.scorer): the bare name still maps to where that module went,
# while every path through the package (its modules and their objects) is kept. Their __init__.py
# defines no object, so nothing current is reached as `sqa.training.<name>`.
PACKAGES_NAMED_LIKE_OLD_MODULES = {"sqa.training": "sqa.training.run", "sqa.scoring": "sqa.scoring.scorer"}


def public_names(tree: ast.Module) -> set[str]:
    """The public names a module binds at top level: functions, classes, assignments and __all__."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    names.add(target.id)
                    if target.id == "__all__" and isinstance(node.value, ast.List | ast.Tuple):
                        names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
    return {n for n in names if not n.startswith("_")}


def current_public_paths() -> list[str]:
    """Every module path of the sqa package and every `module.PublicName`, read without importing.

    The files are parsed, not imported: several modules need optional extras (s3prl, fairseq2,
    transformers, onnxruntime) that a test environment may lack.
    """
    paths: set[str] = set()
    for file in sorted(SQA_DIR.rglob("*.py")):
        parts = ["sqa", *file.relative_to(SQA_DIR).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        if any(p.startswith("_") for p in parts):
            continue
        module = ".".join(parts)
        paths.add(module)
        names = public_names(ast.parse(file.read_text(encoding="utf-8"), str(file)))
        paths.update(f"{module}.{name}" for name in names)
    return sorted(paths)


def test_the_walk_finds_the_current_modules_and_objects() -> None:
    """Guards the walk itself: an empty or shallow walk would make the test below vacuous."""
    paths = set(current_public_paths())
    assert {
        "sqa",
        "sqa.load",
        "sqa.exports.format.export_predictor",
        "sqa.baselines.cli.main",
        "sqa.training.run",
        "sqa.training.callbacks.MetricHistory",
        "sqa.scoring.scorer.Scorer",
        "sqa.data.readers.read_csv_manifest",
        "sqa.models.ssl.TorchaudioWav2Vec2",
        "sqa.core.renames.MOVED",
    } <= paths
    assert len(paths) > 300


def test_every_current_public_path_is_left_as_it_is(caplog) -> None:
    """Rule: current() rewrites only old paths; no module of sqa nor a public object in one is old.

    Neighbours: prefix matching (sqa.exports.* read as sqa.export + "s..."), a MOVED entry whose
    old path is still a current module or object, a package that took an old module's name
    mapping the paths through it (sqa.training.run.build -> sqa.training.run.run.build).
    """
    paths = [p for p in current_public_paths() if p not in PACKAGES_NAMED_LIKE_OLD_MODULES]
    changed = {p: current(p) for p in paths if current(p) != p}
    assert changed == {}
    config = {"targets": [{"_target_": p} for p in paths]}
    rename_targets(config)
    assert [c["_target_"] for c in config["targets"]] == paths
    assert "moved to" not in caplog.text
    # The two packages themselves: their bare names are the old modules' paths (see above).
    assert {p: current(p) for p in PACKAGES_NAMED_LIKE_OLD_MODULES} == PACKAGES_NAMED_LIKE_OLD_MODULES
