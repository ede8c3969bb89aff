"""Exported predictors: one directory with model.pt (state_dict), config.yaml and metrics.json.

An export is data, never code: a user may load one downloaded from a stranger. Loading reads
config.yaml with `yaml.safe_load` (no tags, no anchors), refuses any interpolation (`${`), any
Hydra special key and any `_target_` outside `ALLOWED_TARGETS` or outside its place (`model`,
`model.backbone`, `f0`), checks every argument against its constructor before anything is built,
builds with sqa's own constructors (no Hydra), and reads weights only with
`torch.load(weights_only=True)`. Every file it reads must be a regular file inside the folder.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import yaml

from sqa.atomic import atomic_dir, json_text
from sqa.data.corpus import CORPUS_READERS
from sqa.data.pitch import F0Extractor
from sqa.models.backbone import LogMelBackbone
from sqa.models.predictor import MOSPredictor
from sqa.models.ssl import SSL_BACKBONES, TransformersWav2Vec2

FORMAT_VERSION = 1
# The classes an export may build, by the `_target_` each writes (see sqa.models.config).
BACKBONE_CLASSES = (LogMelBackbone, *SSL_BACKBONES)
PREDICTOR_TARGET = MOSPredictor.export_target()
BACKBONE_TARGETS = frozenset(cls.export_target() for cls in BACKBONE_CLASSES)
F0_TARGET = "sqa.data.pitch.F0Extractor"
CONSTRUCTORS: dict[str, type] = {
    PREDICTOR_TARGET: MOSPredictor,
    F0_TARGET: F0Extractor,
    **{cls.export_target(): cls for cls in BACKBONE_CLASSES},
}
ALLOWED_TARGETS = frozenset(CONSTRUCTORS)
# Where a `_target_` may stand in config.yaml, and which classes it may name there.
TARGET_PLACES = {
    ("model",): frozenset({PREDICTOR_TARGET}),
    ("model", "backbone"): BACKBONE_TARGETS,
    ("f0",): frozenset({F0_TARGET}),
    # The corpus a run was tested on, for `eval.py`; never built by `load_export`, and
    # `sqa.data.corpus.recorded_corpus` checks it again before reading it.
    ("data", "corpus"): CORPUS_READERS,
}
# Constructor arguments that read or write files: an export records an architecture, never a
# path (its weights are in model.pt), so these are refused wherever they appear.
PATH_ARGUMENTS = frozenset({"checkpoint", "upstream", "path", "cache_dir"})
MAX_CONFIG_BYTES = 1 << 20


class ExportError(ValueError):
    """An export directory is missing, incomplete or unsafe to load."""


def export_predictor(
    predictor: MOSPredictor,
    directory: str | Path,
    sample_rate: int,
    domains: list[str],
    metrics: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    f0_extractor: F0Extractor | None = None,
    dimension_metrics: Mapping[str, Mapping[str, Any]] | None = None,
    data: Mapping[str, Any] | None = None,
    test: Mapping[str, Any] | None = None,
    run_info: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
) -> Path:
    """Write `predictor` to `directory` atomically; replace an existing one only if `overwrite`.

    `metrics` (of the overall MOS) go to metrics.json, each of `dimension_metrics` (other score
    dimensions) to metrics_<dim>.json. config.yaml's `model` records the predictor's score
    dimensions and judge count; `data` (plain values: the corpus reader and its arguments) and
    `test` (seed and bootstrap of the test metrics) let `eval.py` recompute those metrics.
    README.md is the model card (`sqa.model_card`), drawn also from the run's `run_info` (copied
    to run_info.json) and resolved `training` configuration.
    """
    # Here, not at the top: loading an export needs only the core install (no omegaconf).
    from omegaconf import OmegaConf

    from sqa import model_card

    directory = Path(directory)
    if directory.exists() and not overwrite:
        raise ExportError(f"{directory}: already exists; pass overwrite=True to replace it")
    config = {
        "format": FORMAT_VERSION,
        "sample_rate": sample_rate,
        "domains": list(domains),
        "model": predictor.export_config(),
        "f0": f0_extractor.export_config() if f0_extractor is not None else None,
        "data": dict(data) if data is not None else None,
        "test": dict(test) if test is not None else None,
    }
    with atomic_dir(directory, replace=overwrite) as tmp:
        state = {k: v.detach().cpu().contiguous() for k, v in predictor.state_dict().items()}
        torch.save(state, tmp / "model.pt")
        (tmp / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
        (tmp / "metrics.json").write_text(json_text(metrics or {}))
        for dim, dim_metrics in (dimension_metrics or {}).items():
            (tmp / f"metrics_{dim}.json").write_text(json_text(dim_metrics))
        if run_info is not None:
            (tmp / "run_info.json").write_text(json_text(run_info))
        card = model_card.render(config, metrics or {}, dimension_metrics, run_info, training)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return directory


class _PlainYamlLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` without aliases (nested aliases expand exponentially; exports need none)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed", event.start_mark
            )
        return super().compose_node(parent, index)


def _key_path(keys: tuple[str | int, ...]) -> str:
    """`('model', 'backbone', 'arch_kwargs', 0)` -> 'model.backbone.arch_kwargs[0]'."""
    out = ""
    for key in keys:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "(top level)"


def _regular_file(directory: Path, name: str) -> Path:
    """`directory/name` if it is a regular file inside `directory` (no link), else ExportError."""
    path = directory / name
    if path.is_symlink():
        raise ExportError(f"{path}: is a symbolic link; an export's files must be regular files inside it")
    if not path.exists():
        raise ExportError(f"{path}: not found; is {directory} an sqa export directory?")
    if not path.is_file():
        raise ExportError(f"{path}: not a regular file")
    if path.resolve().parent != directory.resolve():
        raise ExportError(f"{path}: resolves outside {directory}")
    return path


def resolve_export(path: str | Path) -> tuple[Path, Path]:
    """(config.yaml, weights file) of an export dir, a run dir holding export/, or a model.pt file."""
    path = Path(path).expanduser()
    if path.is_file():
        directory = path.parent.resolve()
        if path.is_symlink():
            raise ExportError(f"{path}: is a symbolic link; name the weights file itself")
        return _regular_file(directory, "config.yaml"), _regular_file(directory, path.name)
    if not path.is_dir():
        raise ExportError(
            f"{path}: not found; expected an export directory (config.yaml, model.pt), "
            "a run directory holding export/, or a model.pt beside its config.yaml"
        )
    directory = path.resolve()
    # A run directory holds its own config.yaml (the training config) beside export/.
    if not (directory / "model.pt").exists() and (directory / "export").exists():
        if (directory / "export").is_symlink():
            raise ExportError(f"{directory / 'export'}: is a symbolic link out of the run directory")
        directory = directory / "export"
    return _regular_file(directory, "config.yaml"), _regular_file(directory, "model.pt")


def read_export_config(config_path: Path) -> dict[str, Any]:
    """Parse and check an export's config.yaml (plain YAML data only); ExportError names the key."""
    size = config_path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ExportError(f"{config_path}: {size} bytes; an export config is at most {MAX_CONFIG_BYTES}")
    try:
        config = yaml.load(config_path.read_bytes().decode("utf-8"), Loader=_PlainYamlLoader)  # noqa: S506
    except UnicodeDecodeError as err:
        raise ExportError(f"{config_path}: not UTF-8 text ({err})") from err
    except yaml.YAMLError as err:
        raise ExportError(f"{config_path}: not a plain YAML file ({err})") from err
    except RecursionError as err:
        raise ExportError(f"{config_path}: nested too deeply") from err
    if not isinstance(config, dict):
        raise ExportError(f"{config_path}: expected a mapping at the top level, got {type(config).__name__}")
    _check_plain(config, (), config_path)
    _check_top_level(config, config_path)
    _check_arguments(config["model"], ("model",), config_path)
    if config.get("f0") is not None:
        _check_arguments(config["f0"], ("f0",), config_path)
    return config


def _check_plain(node: Any, keys: tuple[str | int, ...], where: Path) -> None:
    """Refuse anything but plain data: interpolations, special keys, misplaced targets, tags."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str):
                _check_key(key, value, keys, where)
            elif isinstance(key, bool) or not isinstance(key, int):
                raise ExportError(f"{where}: key {key!r} under {_key_path(keys)} is not a string or integer")
            _check_plain(value, (*keys, key), where)
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check_plain(value, (*keys, i), where)
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
        allowed = TARGET_PLACES.get(keys)
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
    if isinstance(rate, bool) or not isinstance(rate, int) or rate <= 0:
        raise ExportError(f"{where}: sample_rate must be a positive integer, got {rate!r}")
    domains = config.get("domains", [])
    if not isinstance(domains, list) or not all(isinstance(d, str) for d in domains):
        raise ExportError(f"{where}: domains must be a list of names, got {domains!r}")
    for key in ("model", "f0"):
        node = config.get(key)
        if (key == "model" or node is not None) and not (isinstance(node, dict) and "_target_" in node):
            raise ExportError(f"{where}: {key} must be a mapping with a _target_, got {node!r}")
    if not isinstance(config["model"].get("backbone"), dict) or "_target_" not in config["model"]["backbone"]:
        raise ExportError(f"{where}: model.backbone must be a mapping with a _target_")


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


def _check_arguments(node: dict[str, Any], keys: tuple[str, ...], where: Path) -> None:
    """Check each argument of `node` against its class's constructor; recurse into the backbone."""
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
        if key == "backbone":
            _check_arguments(value, (*keys, key), where)
            continue
        annotation = parameters[key].annotation
        accepted = _accepted_types(annotation) if isinstance(annotation, str) else None
        if accepted is not None and (
            not isinstance(value, accepted) or (isinstance(value, bool) and bool not in accepted)
        ):
            raise ExportError(f"{where}: {here} must be {annotation}, got {value!r}")
    if _constructor(target) is TransformersWav2Vec2:
        refused = TransformersWav2Vec2.refused_config_keys & set(node.get("config") or {})
        if refused:
            raise ExportError(f"{where}: {_key_path((*keys, 'config'))}: refusing {sorted(refused)}")


def _build(node: dict[str, Any], keys: tuple[str, ...], where: Path) -> Any:
    """Construct a checked config node with sqa's own class for its `_target_`."""
    kwargs = {k: v for k, v in node.items() if k != "_target_"}
    if "backbone" in kwargs:
        kwargs["backbone"] = _build(kwargs["backbone"], (*keys, "backbone"), where)
    try:
        return _constructor(node["_target_"])(**kwargs)
    except Exception as err:  # a constructor rejecting the export's arguments, of any type
        raise ExportError(f"{where}: cannot build {_key_path(keys)} ({node['_target_']}): {err}") from err


def _check_data_files(directory: Path) -> None:
    """Every link in the folder is refused; JSON files must parse, Markdown must be UTF-8 text."""
    for path in sorted(directory.iterdir()):
        if path.is_symlink():
            raise ExportError(f"{path}: is a symbolic link; an export holds regular files only")
        if path.suffix == ".json":
            try:
                json.loads(path.read_bytes().decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as err:
                raise ExportError(f"{path}: not a JSON file ({err})") from err
        elif path.suffix == ".md":
            try:
                path.read_bytes().decode("utf-8")
            except UnicodeDecodeError as err:
                raise ExportError(f"{path}: not UTF-8 text ({err})") from err


def read_weights(weights_path: Path) -> dict[str, torch.Tensor]:
    """A plain {name: tensor} state_dict, read with `torch.load(weights_only=True)`."""
    try:
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError, ... variants
        raise ExportError(f"{weights_path}: not a plain tensor state_dict ({err})") from err
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ExportError(f"{weights_path}: expected a mapping of parameter names to tensors")
    return dict(state)


def _load_weights(predictor: MOSPredictor, state: dict[str, torch.Tensor], weights_path: Path) -> None:
    expected = predictor.state_dict()
    missing = sorted(expected.keys() - state.keys())
    unexpected = sorted(state.keys() - expected.keys())
    if missing or unexpected:
        raise ExportError(
            f"{weights_path}: does not match the architecture in config.yaml: "
            f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}"
        )
    for name, tensor in state.items():
        if tensor.shape != expected[name].shape:
            raise ExportError(
                f"{weights_path}: {name!r} has shape {tuple(tensor.shape)}, but config.yaml's "
                f"architecture needs {tuple(expected[name].shape)}"
            )
    predictor.load_state_dict(state)


def load_export(
    path: str | Path,
) -> tuple[MOSPredictor, dict[str, Any], F0Extractor | None]:
    """Rebuild an export's predictor (eval mode); returns (predictor, config, f0 extractor).

    `path` is an export directory, a run directory holding export/, or a model.pt beside its
    config.yaml. Everything is checked before anything is built (see the module docstring).
    """
    config_path, weights_path = resolve_export(path)
    config = read_export_config(config_path)
    _check_data_files(config_path.parent)
    state = read_weights(weights_path)
    predictor = _build(config["model"], ("model",), config_path)
    f0_extractor = _build(config["f0"], ("f0",), config_path) if config.get("f0") else None
    _load_weights(predictor, state, weights_path)
    return predictor.eval(), config, f0_extractor
