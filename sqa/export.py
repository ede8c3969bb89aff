"""Exported predictors: one directory with model.pt (state_dict), config.yaml and metrics.json.

Loading never unpickles objects (`torch.load(weights_only=True)`) and builds only sqa's own
classes: every `_target_` in config.yaml must be in `ALLOWED_TARGETS`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

from sqa import model_card
from sqa.atomic import default_mode
from sqa.data.pitch import F0Extractor
from sqa.models.predictor import MOSPredictor

FORMAT_VERSION = 1
ALLOWED_TARGETS = frozenset(
    {
        "sqa.models.predictor.MOSPredictor",
        "sqa.models.backbone.LogMelBackbone",
        "sqa.models.ssl.TorchaudioWav2Vec2",
        "sqa.models.ssl.S3prlWav2Vec2",
        "sqa.models.ssl.Fairseq2Wav2Vec2",
        "sqa.models.ssl.TransformersWav2Vec2",
        "sqa.data.pitch.F0Extractor",
    }
)


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
    run_info: Mapping[str, Any] | None = None,
    training: Mapping[str, Any] | None = None,
) -> Path:
    """Write `predictor` to `directory` atomically; replace an existing one only if `overwrite`.

    `metrics` (of the overall MOS) go to metrics.json, each of `dimension_metrics` (other score
    dimensions) to metrics_<dim>.json. config.yaml's `model` records the predictor's score
    dimensions and judge count. README.md is the model card (`sqa.model_card`), drawn also from
    the run's `run_info` (copied to run_info.json) and resolved `training` configuration.
    """
    directory = Path(directory)
    if directory.exists() and not overwrite:
        raise ExportError(f"{directory}: already exists; pass overwrite=True to replace it")
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    # mkdtemp makes a private (0700) folder; an export is meant to be read by others.
    tmp.chmod(default_mode(directory=True))
    config = {
        "format": FORMAT_VERSION,
        "sample_rate": sample_rate,
        "domains": list(domains),
        "model": predictor.export_config(),
        "f0": f0_extractor.export_config() if f0_extractor is not None else None,
    }
    try:
        state = {k: v.detach().cpu().contiguous() for k, v in predictor.state_dict().items()}
        torch.save(state, tmp / "model.pt")
        (tmp / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)))
        (tmp / "metrics.json").write_text(json.dumps(metrics or {}, indent=2))
        for dim, dim_metrics in (dimension_metrics or {}).items():
            (tmp / f"metrics_{dim}.json").write_text(json.dumps(dim_metrics, indent=2))
        if run_info is not None:
            (tmp / "run_info.json").write_text(json.dumps(run_info, indent=2))
        card = model_card.render(config, metrics or {}, dimension_metrics, run_info, training)
        (tmp / "README.md").write_text(card)
        _replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def _replace_dir(new: Path, target: Path) -> None:
    """Move `new` to `target`; an old `target` is moved aside first and removed only after."""
    old = None
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old.", dir=target.parent))
        os.replace(target, old / target.name)
    os.replace(new, target)
    if old is not None:
        shutil.rmtree(old)


def _check_targets(node: Any, where: Path) -> None:
    if isinstance(node, Mapping):
        target = node.get("_target_")
        if target is not None and target not in ALLOWED_TARGETS:
            raise ExportError(f"{where}: refusing to build {target!r}; only sqa's own classes are allowed")
        for value in node.values():
            _check_targets(value, where)
    elif isinstance(node, list):
        for value in node:
            _check_targets(value, where)


def load_export(
    directory: str | Path,
) -> tuple[MOSPredictor, dict[str, Any], F0Extractor | None]:
    """Rebuild an export's predictor (eval mode); returns (predictor, config, f0 extractor)."""
    directory = Path(directory)
    config_path, weights_path = directory / "config.yaml", directory / "model.pt"
    for path in (config_path, weights_path):
        if not path.is_file():
            raise ExportError(f"{path}: not found; is {directory} an sqa export directory?")
    config = OmegaConf.to_container(OmegaConf.load(config_path), resolve=False)
    if not isinstance(config, dict) or "model" not in config or "sample_rate" not in config:
        raise ExportError(f"{config_path}: missing 'model' or 'sample_rate'")
    _check_targets(config["model"], config_path)
    _check_targets(config.get("f0"), config_path)
    predictor = instantiate(config["model"], _convert_="all")
    f0_extractor = instantiate(config["f0"]) if config.get("f0") else None
    try:
        state = torch.load(weights_path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises UnpicklingError or RuntimeError variants
        raise ExportError(f"{weights_path}: not a plain tensor state_dict ({err})") from err
    if not isinstance(state, Mapping) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ExportError(f"{weights_path}: expected a mapping of parameter names to tensors")
    predictor.load_state_dict(state)
    return predictor.eval(), config, f0_extractor
