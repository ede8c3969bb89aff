"""The export format's config.yaml: what it may hold, parsed and checked before anything is built.

An export is data, never code: config.yaml is read with `yaml.safe_load` rules (no tags, no
aliases: `sqa.exports.yaml_safe`), any interpolation (`${`), Hydra special key or `_target_`
outside `ALLOWED_TARGETS` or outside its place (`model`, `model.backbone`, `f0`, `data.corpus`;
both in `sqa.exports.targets`) is refused, every number and list is bounded (`sqa.exports.bounds`),
and every argument is checked against its constructor before `build_node` constructs it with
sqa's own classes.
An ensemble's `model` holds its members as a list (`model.members`), each checked as a `model`
node of its own; a member is never an ensemble. A fusion backbone holds two plain backbones
(`model.backbone.first`, `.second`), each checked as a backbone node; they are never fusions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sqa.core.renames import rename_targets
from sqa.data.audio import MAX_SAMPLE_RATE
from sqa.exports.bounds import (
    MAX_ARCH_INTEGER,
    MAX_ARCH_LIST,
    MAX_BOOTSTRAP,
    MAX_CONFIG_BYTES,
    MAX_EVAL_BATCH_SIZE,
    MAX_INTEGER_DIGITS,
    _check_bounds,
    read_bounded,
)
from sqa.exports.errors import ExportError, _key_path
from sqa.exports.targets import (
    ALLOWED_TARGETS,
    BACKBONE_CLASSES,
    BACKBONE_TARGETS,
    CONSTRUCTORS,
    ENSEMBLE_TARGET,
    F0_TARGET,
    FUSION_TARGET,
    MEMBER,
    PREDICTOR_CLASSES,
    PREDICTOR_TARGETS,
    TARGET_PLACES,
    _constructor,
    _place,
)
from sqa.exports.yaml_safe import _LongInteger, _PlainYamlLoader
from sqa.models.config import constructor_parameters
from sqa.models.ssl import TransformersWav2Vec2

# This module's names, and those that moved out of it (bounds, errors, targets) and stay importable here.
__all__ = [
    "ALLOWED_TARGETS",
    "BACKBONE_CLASSES",
    "BACKBONE_TARGETS",
    "CONSTRUCTORS",
    "ENSEMBLE_TARGET",
    "F0_TARGET",
    "FORMAT_VERSION",
    "FUSION_TARGET",
    "MAX_ARCH_INTEGER",
    "MAX_ARCH_LIST",
    "MAX_BOOTSTRAP",
    "MAX_CONFIG_BYTES",
    "MAX_EVAL_BATCH_SIZE",
    "MAX_INTEGER_DIGITS",
    "MEMBER",
    "PATH_ARGUMENTS",
    "PREDICTOR_CLASSES",
    "PREDICTOR_TARGETS",
    "TARGET_PLACES",
    "ExportError",
    "build_node",
    "read_bounded",
    "read_export_config",
]

FORMAT_VERSION = 1
# Constructor arguments that read or write files: an export records an architecture, never a
# path (its weights are in model.pt), so these are refused wherever they appear. `pretrained`
# reads an installed package's weight file (Distill-MOS).
PATH_ARGUMENTS = frozenset({"checkpoint", "upstream", "path", "cache_dir", "pretrained"})


def read_export_config(config_path: Path) -> dict[str, Any]:
    """Parse and check an export's config.yaml (plain YAML data only); ExportError names the key."""
    try:
        config = yaml.load(
            read_bounded(config_path, MAX_CONFIG_BYTES).decode("utf-8"), Loader=_PlainYamlLoader
        )  # noqa: S506
    except UnicodeDecodeError as err:
        raise ExportError(f"{config_path}: not UTF-8 text ({err})") from err
    except yaml.YAMLError as err:
        raise ExportError(f"{config_path}: not a plain YAML file ({err})") from err
    except RecursionError as err:
        raise ExportError(f"{config_path}: nested too deeply") from err
    if not isinstance(config, dict):
        raise ExportError(f"{config_path}: expected a mapping at the top level, got {type(config).__name__}")
    # Exports written before a module moved name it by its old path.
    rename_targets(config)
    _check_plain(config, (), config_path)
    _check_top_level(config, config_path)
    _check_arguments(config["model"], ("model",), config_path)
    _check_bounds(config["model"], ("model",), config_path)
    if config.get("f0") is not None:
        _check_arguments(config["f0"], ("f0",), config_path)
        _check_bounds(config["f0"], ("f0",), config_path)
    return config


def _check_plain(node: Any, keys: tuple[str | int, ...], where: Path) -> None:
    """Refuse anything but plain data: interpolations, special keys, misplaced targets, tags."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, _LongInteger):
                raise key.refusal(where, f"a key under {_key_path(keys)}")
            if isinstance(key, str):
                _check_key(key, value, keys, where)
            elif isinstance(key, bool) or not isinstance(key, int):
                raise ExportError(f"{where}: key {key!r} under {_key_path(keys)} is not a string or integer")
            _check_plain(value, (*keys, key), where)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_plain(value, (*keys, i), where)
    elif isinstance(node, _LongInteger):
        raise node.refusal(where, _key_path(keys))
    elif isinstance(node, str):
        if "${" in node:
            raise ExportError(
                f"{where}: {_key_path(keys)} holds an interpolation ({node[:80]!r}); exports are plain data"
            )
    elif node is not None and not isinstance(node, bool | int | float):
        raise ExportError(f"{where}: {_key_path(keys)}: unsupported value of type {type(node).__name__}")


def _check_key(key: str, value: Any, keys: tuple[str | int, ...], where: Path) -> None:
    """Refuse an interpolated key, a Hydra special key, and a `_target_` out of place or allow-list."""
    here = _key_path((*keys, key))
    if "${" in key:
        raise ExportError(f"{where}: key {here} holds an interpolation; exports are plain data")
    if key == "_target_":
        allowed = TARGET_PLACES.get(_place(keys))
        if allowed is None:
            raise ExportError(
                f"{where}: {here}: a _target_ is only allowed at "
                f"{', '.join(_key_path(p) for p in TARGET_PLACES)}"
            )
        if value not in allowed:
            raise ExportError(
                f"{where}: {here}: refusing to build {value!r}; allowed there: {', '.join(sorted(allowed))}"
            )
    elif key.startswith("_") and key.endswith("_"):
        raise ExportError(f"{where}: {here}: special key {key!r} is not allowed")


def _check_top_level(config: dict[str, Any], where: Path) -> None:
    version = config.get("format")
    if version != FORMAT_VERSION:
        raise ExportError(f"{where}: format is {version!r}; this sqa reads format {FORMAT_VERSION}")
    rate = config.get("sample_rate")
    if isinstance(rate, bool) or not isinstance(rate, int) or not 0 < rate <= MAX_SAMPLE_RATE:
        raise ExportError(f"{where}: sample_rate must be an integer in 1..{MAX_SAMPLE_RATE}, got {rate!r}")
    domains = config.get("domains", [])
    if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
        raise ExportError(f"{where}: domains must be a list of names, got {domains!r}")
    if not isinstance(config.get("vocal_only", False), bool):
        raise ExportError(f"{where}: vocal_only must be true or false, got {config['vocal_only']!r}")
    for key in ("model", "f0"):
        node = config.get(key)
        if (key == "model" or node is not None) and not (isinstance(node, dict) and "_target_" in node):
            raise ExportError(f"{where}: {key} must be a mapping with a _target_, got {node!r}")
    if config["model"]["_target_"] == ENSEMBLE_TARGET:
        members = config["model"].get("members")
        if not isinstance(members, list) or not members:
            raise ExportError(f"{where}: model.members must be a list of predictors, got {members!r}")
        models = {f"model.members[{i}]": member for i, member in enumerate(members)}
    else:
        models = {"model": config["model"]}
    for here, model in models.items():
        if not isinstance(model, dict) or "_target_" not in model:
            raise ExportError(f"{where}: {here} must be a mapping with a _target_")
        if not isinstance(model.get("backbone"), dict) or "_target_" not in model["backbone"]:
            raise ExportError(f"{where}: {here}.backbone must be a mapping with a _target_")
    bounds = {
        ("test", "bootstrap"): MAX_BOOTSTRAP,
        ("test", "seed"): None,
        ("data", "eval_batch_size"): MAX_EVAL_BATCH_SIZE,
    }
    for (section, key), limit in bounds.items():
        node = config.get(section)
        if node is not None and not isinstance(node, dict):
            raise ExportError(f"{where}: {section} must be a mapping, got {node!r}")
        value = (node or {}).get(key)
        if value is None:
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or value < 0
            or (limit is not None and value > limit)
        ):
            allowed = "an integer ≥ 0" if limit is None else f"an integer in 0..{limit}"
            raise ExportError(f"{where}: {section}.{key} must be {allowed}, got {value!r}")


def _accepted_types(annotation: str) -> tuple[type, ...] | None:
    """Plain-data types an argument annotated `annotation` accepts; None where not checkable."""
    simple = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,), "None": (type(None),)}
    types: list[type] = []
    for part in annotation.split("|"):
        base = part.strip().split("[")[0]
        if base in simple:
            types.extend(simple[base])
        elif base in ("dict", "Mapping"):
            types.append(dict)
        elif base in ("list", "Sequence"):
            types.append(list)
        else:
            return None
    return tuple(types)


def _check_arguments(node: dict[str, Any], keys: tuple[str | int, ...], where: Path) -> None:
    """Check each argument of `node` against its constructor; recurse into nested nodes and members."""
    target = node["_target_"]
    parameters = constructor_parameters(_constructor(target))
    for key, value in node.items():
        here = _key_path((*keys, key))
        if key == "_target_":
            continue
        if key in PATH_ARGUMENTS:
            raise ExportError(
                f"{where}: {here}: an export never names files to read or write (its weights are in model.pt)"
            )
        if key not in parameters or key == "self":
            raise ExportError(f"{where}: {here}: {target} has no argument {key!r}")
        if _place((*keys, key)) in TARGET_PLACES:
            # A node of its own (a predictor's backbone, a fusion's parts): checked as one.
            if not isinstance(value, dict) or "_target_" not in value:
                raise ExportError(f"{where}: {here} must be a mapping with a _target_")
            _check_arguments(value, (*keys, key), where)
            continue
        if key == "members":
            # `_check_top_level` has checked the list and its entries' targets.
            for i, member in enumerate(value):
                _check_arguments(member, (*keys, key, i), where)
            continue
        annotation = parameters[key].annotation
        accepted = _accepted_types(annotation) if isinstance(annotation, str) else None
        if accepted is not None and (
            not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted)
        ):
            raise ExportError(f"{where}: {here} must be {annotation}, got {value!r}")
    if _constructor(target) is TransformersWav2Vec2 and node.get("config") is not None:
        refused = sorted(set(node["config"]) - TransformersWav2Vec2.allowed_config_keys())
        if refused:
            raise ExportError(
                f"{where}: {_key_path((*keys, 'config'))}: refusing {refused}; a backbone config holds "
                "only architecture keys (docs/failures.md)"
            )


def build_node(node: dict[str, Any], keys: tuple[str | int, ...], where: Path) -> Any:
    """Construct a checked config node with sqa's own class for its `_target_`."""
    kwargs = {
        k: build_node(v, (*keys, k), where) if _place((*keys, k)) in TARGET_PLACES else v
        for k, v in node.items()
        if k != "_target_"
    }
    if "members" in kwargs:
        kwargs["members"] = [
            build_node(member, (*keys, "members", i), where) for i, member in enumerate(kwargs["members"])
        ]
    try:
        return _constructor(node["_target_"])(**kwargs)
    except Exception as err:  # a constructor rejecting the export's arguments, of any type
        raise ExportError(f"{where}: cannot build {_key_path(keys)} ({node['_target_']}): {err}") from err
