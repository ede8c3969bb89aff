"""Where sqa's dotted paths moved: the one table that keeps old `_target_`s resolving.

Files that users hold name sqa's classes and functions by dotted path: an export's config.yaml,
a run directory's config, a sweep or experiment config of their own. When a module or an object
moves, its old path goes into `MOVED`. `current` maps one path through it; `rename_targets`
rewrites every `_target_` of a config before anything is checked or built, so the checks see
only current paths. Nothing else in sqa resolves old paths.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import MutableMapping, MutableSequence
from typing import Any

log = logging.getLogger(__name__)

# Old module or object path -> current path. An object entry wins over its module's entry.
MOVED: dict[str, str] = {
    # The flat package of sqa 0.1 became subpackages (docs/architecture.md).
    "sqa.atomic": "sqa.core.atomic",
    "sqa.artefacts": "sqa.core.artefacts",
    "sqa.masking": "sqa.core.masking",
    "sqa.prediction": "sqa.core.prediction",
    "sqa.extras": "sqa.core.extras",
    "sqa.provenance": "sqa.core.provenance",
    "sqa.resampling": "sqa.core.resampling",
    "sqa.config": "sqa.core.resolvers",
    "sqa.training": "sqa.training.run",
    "sqa.lit_module": "sqa.training.lit_module",
    "sqa.datamodule": "sqa.training.datamodule",
    "sqa.callbacks": "sqa.training.callbacks",
    "sqa.selection": "sqa.training.selection",
    "sqa.losses": "sqa.training.losses",
    "sqa.run_dir": "sqa.training.run_dir",
    "sqa.run_outputs": "sqa.training.run_outputs",
    "sqa.evaluation": "sqa.training.evaluation",
    "sqa.score": "sqa.scoring.cli",
    "sqa.scoring": "sqa.scoring.scorer",
    "sqa.score_inputs": "sqa.scoring.inputs",
    "sqa.score_outputs": "sqa.scoring.outputs",
    "sqa.clip_input": "sqa.scoring.clips",
    "sqa.export": "sqa.exports.format",
    "sqa.export_config": "sqa.exports.config",
    "sqa.model_card": "sqa.exports.model_card",
    "sqa.importers": "sqa.exports.importers",
    "sqa.results": "sqa.reports.results",
    "sqa.tables": "sqa.reports.tables",
    "sqa.compare": "sqa.reports.compare",
    "sqa.plots": "sqa.reports.plots",
    "sqa.dnsmos": "sqa.baselines.dnsmos",
    "sqa.baseline": "sqa.baselines.cli",
    # Objects that moved to another module.
    "sqa.plots.MetricHistory": "sqa.training.callbacks.MetricHistory",
    "sqa.data.corpus.read_csv_manifest": "sqa.data.readers.read_csv_manifest",
    "sqa.data.corpus.read_singmos_pro": "sqa.data.readers.read_singmos_pro",
    "sqa.data.corpus.read_vmc24": "sqa.data.readers.read_vmc24",
}


def current(path: str) -> str:
    """`path` with its longest moved prefix (an object, else a module) replaced by its current path."""
    parts = path.split(".")
    for end in range(len(parts), 1, -1):
        prefix = ".".join(parts[:end])
        if prefix in MOVED:
            # `sqa.training` and `sqa.scoring` were modules and are packages now: a path through
            # one of their current modules (`sqa.training.datamodule...`) is not an old path.
            if end < len(parts) and _is_module(f"{prefix}.{parts[end]}"):
                return path
            return ".".join([MOVED[prefix], *parts[end:]])
    return path


def _is_module(name: str) -> bool:
    """Whether `name` is an importable module (its parents are imported to find out)."""
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a parent is a module, not a package
        return False


def rename_targets(config: Any) -> Any:
    """Rewrite every string `_target_` in a nested config (dict, list or DictConfig) in place; returns it."""
    if isinstance(config, MutableMapping):
        for key in list(config.keys()):
            try:
                value = config[key]
            except Exception:  # noqa: BLE001 - a missing or unresolvable value holds no target
                continue
            if key == "_target_" and isinstance(value, str) and current(value) != value:
                log.warning("%s moved to %s; the old path still works", value, current(value))
                config[key] = current(value)
            else:
                rename_targets(value)
    elif isinstance(config, MutableSequence):
        for item in config:
            rename_targets(item)
    return config
