"""Exported predictors: one directory with model.pt (state_dict), config.yaml and metrics.json.

An export is data, never code: a user may load one downloaded from a stranger. config.yaml is
parsed and checked whole by `sqa.export_config` before anything is built, weights are read only
with `torch.load(weights_only=True)` and checked against the architecture, and every file read
must be a regular file inside the folder (no links).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from sqa import export_config
from sqa.atomic import atomic_dir, json_text
from sqa.data.pitch import F0Extractor
from sqa.export_config import FORMAT_VERSION, ExportError, read_export_config
from sqa.models.predictor import MOSPredictor


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

    from sqa import artefacts, model_card

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
        artefacts.write_metrics(tmp, metrics or {}, dimension_metrics)
        if run_info is not None:
            (tmp / "run_info.json").write_text(json_text(run_info))
        card = model_card.render(config, metrics or {}, dimension_metrics, run_info, training)
        (tmp / "README.md").write_text(card, encoding="utf-8")
    return directory


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
    predictor = export_config.build_node(config["model"], ("model",), config_path)
    f0_extractor = export_config.build_node(config["f0"], ("f0",), config_path) if config.get("f0") else None
    _load_weights(predictor, state, weights_path)
    return predictor.eval(), config, f0_extractor
