"""The export format's config.yaml: what it may hold, parsed and checked before anything is built.

An export is data, never code: config.yaml is read with `yaml.safe_load` rules (no tags, no
aliases), any interpolation (`${`), Hydra special key or `_target_` outside `ALLOWED_TARGETS` or
outside its place (`model`, `model.backbone`, `f0`, `data.corpus`) is refused, and every argument
is checked against its constructor before `build_node` constructs it with sqa's own classes.
An ensemble's `model` holds its members as a list (`model.members`), each checked as a `model`
node of its own; a member is never an ensemble. A fusion backbone holds two plain backbones
(`model.backbone.first`, `.second`), each checked as a backbone node; they are never fusions.
"""

from __future__ import annotations

import inspect
import math
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from sqa.core.renames import rename_targets
from sqa.data.audio import MAX_SAMPLE_RATE
from sqa.data.pitch import F0Extractor
from sqa.data.readers import CORPUS_READERS
from sqa.models.aligner import AlignedPredictor
from sqa.models.backbone import LogMelBackbone
from sqa.models.crepe import CrepeBackbone
from sqa.models.distillmos import DistillMosBackbone, DistillMosZeroShot
from sqa.models.ensemble import EnsemblePredictor
from sqa.models.fusion import FusionBackbone
from sqa.models.predictor import MOSPredictor
from sqa.models.ssl import SSL_BACKBONES, TransformersWav2Vec2
from sqa.models.uncertainty import UncertainMOSPredictor

FORMAT_VERSION = 1
# The classes an export may build, by the `_target_` each writes (see sqa.models.config).
BACKBONE_CLASSES = (LogMelBackbone, DistillMosBackbone, CrepeBackbone, *SSL_BACKBONES)
# MOSPredictor, its uncertainty and aligner families, and Distill-MOS with its own head (zero-shot).
PREDICTOR_CLASSES = (MOSPredictor, UncertainMOSPredictor, AlignedPredictor, DistillMosZeroShot)
PREDICTOR_TARGETS = frozenset(cls.export_target() for cls in PREDICTOR_CLASSES)
ENSEMBLE_TARGET = EnsemblePredictor.export_target()
BACKBONE_TARGETS = frozenset(cls.export_target() for cls in BACKBONE_CLASSES)
# A fusion stands where a backbone does; its two parts are plain backbones, so nesting stops there.
FUSION_TARGET = FusionBackbone.export_target()
F0_TARGET = "sqa.data.pitch.F0Extractor"
CONSTRUCTORS: dict[str, type] = {
    **{cls.export_target(): cls for cls in PREDICTOR_CLASSES},
    ENSEMBLE_TARGET: EnsemblePredictor,
    FUSION_TARGET: FusionBackbone,
    F0_TARGET: F0Extractor,
    **{cls.export_target(): cls for cls in BACKBONE_CLASSES},
}
ALLOWED_TARGETS = frozenset(CONSTRUCTORS)
# Stands for any index of an ensemble's `model.members` list in TARGET_PLACES.
MEMBER = "*"
# Where a `_target_` may stand in config.yaml, and which classes it may name there.
TARGET_PLACES = {
    ("model",): PREDICTOR_TARGETS | {ENSEMBLE_TARGET},
    ("model", "backbone"): BACKBONE_TARGETS | {FUSION_TARGET},
    **{("model", "backbone", part): BACKBONE_TARGETS for part in FusionBackbone.exported_children},
    ("model", "members", MEMBER): PREDICTOR_TARGETS,
    ("model", "members", MEMBER, "backbone"): BACKBONE_TARGETS | {FUSION_TARGET},
    **{
        ("model", "members", MEMBER, "backbone", part): BACKBONE_TARGETS
        for part in FusionBackbone.exported_children
    },
    ("f0",): frozenset({F0_TARGET}),
    # The corpus a run was tested on, for `eval.py`; never built by `load_export`, and
    # `sqa.data.readers.recorded_corpus` checks it again before reading it.
    ("data", "corpus"): CORPUS_READERS,
}
# Constructor arguments that read or write files: an export records an architecture, never a
# path (its weights are in model.pt), so these are refused wherever they appear. `pretrained`
# reads an installed package's weight file (Distill-MOS).
PATH_ARGUMENTS = frozenset({"checkpoint", "upstream", "path", "cache_dir", "pretrained"})
MAX_CONFIG_BYTES = 1 << 20
# Bounds on what an export declares, checked before anything is allocated: every integer of the
# model and f0 settings (widths, layers, kernels), every list there, and the test settings.
MAX_ARCH_INTEGER = 1 << 16
MAX_ARCH_LIST = 256
MAX_BOOTSTRAP = 100_000
MAX_EVAL_BATCH_SIZE = 1024
# The most digits of an integer anywhere in config.yaml: far beyond any size, seed or count, and
# short enough to convert and print (Python refuses past 4300 digits, naming no file).
MAX_INTEGER_DIGITS = 100


class ExportError(ValueError):
    """An export directory is missing, incomplete or unsafe to load."""


class _LongInteger:
    """An integer of more than MAX_INTEGER_DIGITS digits, left unconverted for `_check_plain` to refuse."""

    def __init__(self, digits: int) -> None:
        self.digits = digits

    def refusal(self, where: Path, what: str) -> ExportError:
        """The error naming the file and `what` holds this integer."""
        return ExportError(
            f"{where}: {what} is an integer of {self.digits} digits; config.yaml integers have at most "
            f"{MAX_INTEGER_DIGITS}"
        )


class _PlainYamlLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` without aliases (nested aliases expand exponentially; exports need none)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)

    def construct_long_int(self, node: yaml.ScalarNode) -> int | _LongInteger:
        """An integer, or a `_LongInteger` where converting it would fail or take long."""
        # Converted here, the ValueError (past 4300 digits) could not name the key that holds it.
        digits = sum(c.isalnum() for c in node.value)
        return _LongInteger(digits) if digits > MAX_INTEGER_DIGITS else self.construct_yaml_int(node)


_PlainYamlLoader.add_constructor("tag:yaml.org,2002:int", _PlainYamlLoader.construct_long_int)


def _key_path(keys: tuple[str | int, ...]) -> str:
    """`('model', 'backbone', 'arch_kwargs', 0)` -> 'model.backbone.arch_kwargs[0]'."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "(top level)"


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


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of `path` if it is a regular file (no link, FIFO or device) of at most `limit` bytes."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as err:
        raise ExportError(f"{path}: cannot open ({err.strerror})") from err
    try:
        # Checked before wrapping the descriptor in a file object, which refuses a directory.
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ExportError(f"{path}: not a regular file")
        if info.st_size > limit:
            raise ExportError(f"{path}: {info.st_size} bytes; at most {limit} are read")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise ExportError(f"{path}: more than {limit} bytes; at most {limit} are read")
    return data


def _is_probability_key(key: str | int) -> bool:
    """Whether `key` names a dropout-like probability (MOSPredictor's, a wav2vec2 config's)."""
    return isinstance(key, str) and ("dropout" in key or key == "layerdrop")


def _check_bounds(node: Any, keys: tuple[str | int, ...], where: Path) -> None:
    """Bound a model or f0 node: integers, list lengths, finite floats and probabilities in [0, 1).

    Every integer within ±MAX_ARCH_INTEGER and every list within MAX_ARCH_LIST entries; a NaN or
    infinite float, or a dropout of 1 or more, would only fail (or score NaN) once built.
    """
    if isinstance(node, dict):
        for key, value in node.items():
            # A number only: a flag such as `use_dropout: true` or a null is the constructor's to check.
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if _is_probability_key(key) and number and not 0 <= value < 1:
                raise ExportError(
                    f"{where}: {_key_path((*keys, key))} must be a probability in [0, 1), got {value!r}"
                )
            _check_bounds(value, (*keys, key), where)
    elif isinstance(node, list):
        if len(node) > MAX_ARCH_LIST:
            raise ExportError(f"{where}: {_key_path(keys)} has {len(node)} entries; at most {MAX_ARCH_LIST}")
        for i, value in enumerate(node):
            _check_bounds(value, (*keys, i), where)
    elif isinstance(node, int) and not isinstance(node, bool) and abs(node) > MAX_ARCH_INTEGER:
        raise ExportError(
            f"{where}: {_key_path(keys)} is {node}; an export's sizes are at most {MAX_ARCH_INTEGER}"
        )
    elif isinstance(node, float) and not math.isfinite(node):
        raise ExportError(f"{where}: {_key_path(keys)} is {node}; an export's settings are finite numbers")


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


def _place(keys: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """`keys` with the index of an ensemble member (`model.members[2]`) as MEMBER: its TARGET_PLACES key."""
    if keys[:2] == ("model", "members") and len(keys) > 2 and isinstance(keys[2], int):
        return (*keys[:2], MEMBER, *keys[3:])
    return keys


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


def _constructor(target: str) -> type:
    """The class an allowed `_target_` names (callers have checked it against ALLOWED_TARGETS)."""
    return CONSTRUCTORS[target]


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
    parameters = inspect.signature(_constructor(target).__init__).parameters
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
