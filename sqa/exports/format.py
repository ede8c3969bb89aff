"""Exported predictors: one directory with model.pt (state_dict), config.yaml and metrics.json.

An export is data, never code: a user may load one downloaded from a stranger. config.yaml is
parsed and checked whole by `sqa.exports.config` before anything is built, weights are read only
with `torch.load(weights_only=True)` and checked against the architecture (`sqa.exports.weights`),
and every file read must be a regular file inside the folder, no link (`sqa.exports.location`), of
bounded size (`sqa.exports.bounds`). The model is first built on the meta device (no memory) to
learn its parameters' names, shapes and count; the weights archive's declared sizes and then its
tensors' names, shapes, types and values are checked against them before the real model is built.
An ensemble (`sqa.models.ensemble`) is one such export: its members' configs in config.yaml's
`model.members`, their weights in its one model.pt.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from sqa.core import ownership
from sqa.core.atomic import atomic_dir, json_text
from sqa.data.pitch import F0Extractor
from sqa.exports.bounds import (
    ARCHIVE_OVERHEAD,
    MAX_DATA_FILE_BYTES,
    MAX_PARAMETERS,
    RECORD_OVERHEAD,
    read_bounded,
)
from sqa.exports.config import FORMAT_VERSION, build_node, read_export_config
from sqa.exports.errors import ExportError
from sqa.exports.location import regular_file, resolve_export
from sqa.exports.targets import ENSEMBLE_TARGET
from sqa.exports.weights import read_weights
from sqa.models.interface import Predictor
from sqa.models.retrieval import Datastore
from sqa.reports import learning

# This module's names, and those that moved out of it (bounds, location, weights) or came from
# sqa.exports.config, all importable here as before.
__all__ = [
    "ARCHIVE_OVERHEAD",
    "DATASTORE_FILE",
    "ENSEMBLE_TARGET",
    "EXPORT_FILES",
    "FORMAT_VERSION",
    "MAX_DATA_FILE_BYTES",
    "MAX_PARAMETERS",
    "RECORD_OVERHEAD",
    "Architecture",
    "ExportError",
    "build_node",
    "check_replaceable",
    "export_json",
    "export_predictor",
    "learning_warning",
    "load_export",
    "read_architecture",
    "read_bounded",
    "read_export_config",
    "read_export_weights",
    "read_weights",
    "regular_file",
    "resolve_export",
    "run_record",
]


def export_predictor(
    predictor: Predictor,
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
    files: Sequence[Path] = (),
    inputs: Sequence[str | Path] = (),
    vocal_only: bool = False,
    datastore: Datastore | None = None,
    overwrite_setting: str = "overwrite=True",
) -> Path:
    """Write `predictor` to `directory` atomically; replace an existing one only if `overwrite`.

    An existing export is replaced only if sqa wrote all of it (`sqa.core.ownership`; its
    `.sqa-owned.json` lists its files) and it is none of the command's `inputs`, nor holds one.
    `overwrite_setting` is how the refusal names `overwrite`: as the calling command spells it.

    `metrics` (of the overall MOS) go to metrics.json, each of `dimension_metrics` (other score
    dimensions) to metrics_<dim>.json. config.yaml's `model` records the predictor's score
    dimensions and judge count; `data` (plain values: the corpus reader and its arguments) and
    `test` (seed and bootstrap of the test metrics) let `eval.py` recompute those metrics.
    README.md is the model card (`sqa.exports.model_card`), drawn also from the run's `run_info` (copied
    to run_info.json) and resolved `training` configuration. `files` (a run's split CSVs) are
    copied in by name. `vocal_only` (the run trained on clips cut to their vocal span) is recorded
    so that scoring trims clips alike unless told otherwise. A `datastore` (the training clips'
    embeddings and labels, `sqa.models.retrieval`) goes to datastore.pt for kNN and fusion scoring.
    """
    directory = Path(directory)
    if directory.exists() and not overwrite:
        raise ExportError(f"{directory}: already exists; pass {overwrite_setting} to replace it")
    check_replaceable(directory, inputs)
    config = {
        "format": FORMAT_VERSION,
        "sample_rate": sample_rate,
        "domains": list(domains),
        "vocal_only": bool(vocal_only),
        "model": predictor.export_config(),
        "f0": f0_extractor.export_config() if f0_extractor is not None else None,
        "data": dict(data) if data is not None else None,
        "test": dict(test) if test is not None else None,
    }
    try:
        _write_export(
            directory,
            overwrite,
            predictor,
            config,
            metrics,
            dimension_metrics,
            run_info,
            training,
            files,
            datastore,
        )
    except OSError as err:
        # A bind mount is no mount point to os.path.ismount: its rename fails with EBUSY.
        if err.errno == errno.EBUSY:
            raise ExportError(_mount_point(directory)) from None
        raise
    return directory


def _write_export(
    directory: Path,
    overwrite: bool,
    predictor: Predictor,
    config: dict[str, Any],
    metrics: Mapping[str, Any] | None,
    dimension_metrics: Mapping[str, Mapping[str, Any]] | None,
    run_info: Mapping[str, Any] | None,
    training: Mapping[str, Any] | None,
    files: Sequence[Path],
    datastore: Datastore | None,
) -> None:
    """The export's files written to a new folder, then put in place at `directory` (`atomic_dir`)."""
    # Here, not at the top: loading an export needs only the core install (no omegaconf).
    from omegaconf import OmegaConf

    from sqa.core import artefacts
    from sqa.exports import model_card

    with atomic_dir(directory, replace=overwrite, made=_record_beside) as tmp:
        state = {k: v.detach().cpu().contiguous() for k, v in predictor.state_dict().items()}
        torch.save(state, tmp / "model.pt")
        (tmp / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.create(config)), encoding="utf-8")
        artefacts.write_metrics(tmp, metrics or {}, dimension_metrics)
        if run_info is not None:
            (tmp / "run_info.json").write_text(json_text(run_info), encoding="utf-8")
        card = model_card.render(config, metrics or {}, dimension_metrics, run_info, training)
        (tmp / "README.md").write_text(card, encoding="utf-8")
        for path in files:
            shutil.copyfile(path, tmp / path.name)
        if datastore is not None:
            tensors = {name: t.detach().cpu().contiguous() for name, t in datastore.as_state().items()}
            torch.save(tensors, tmp / DATASTORE_FILE)
        ownership.record_all(tmp)


def _record_beside(folder: Path) -> None:
    """Record the temporary `folder` made beside an export as sqa's, where its parent keeps a record.

    A kill while the export is written leaves it behind; recorded, it never blocks the run's
    `overwrite=true`.
    """
    ownership.record_where_recorded(folder.parent, [folder.name])


# The training clips' embeddings and labels of an export that has them (read by `sqa.exports.datastore`).
DATASTORE_FILE = "datastore.pt"
# The files an export holds (`export_predictor`): what a folder written before sqa kept records may hold.
EXPORT_FILES = (
    "config.yaml",
    "model.pt",
    DATASTORE_FILE,
    "README.md",
    "run_info.json",
    "metrics*.json",
    "valid_split.csv",
    "test_split.csv",
)


def check_replaceable(directory: str | Path, inputs: Sequence[str | Path] = ()) -> None:
    """ExportError unless an export may be written to `directory`: new, or wholly sqa's and no input.

    An export written before sqa kept records (no `.sqa-owned.json`) counts as sqa's where its
    config.yaml passes the export checks, and then only its export files do.
    """
    directory = Path(directory)
    if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
        raise ExportError(f"{directory}: is not an export folder (a link or a file); nothing was replaced")
    if os.path.ismount(directory):
        raise ExportError(_mount_point(directory))
    legacy = ownership.unrecorded_names(directory, EXPORT_FILES)
    if legacy and not _reads_as_export(directory):
        legacy = []
    try:
        ownership.check_replaceable(directory, "overwrite", inputs, also_mine=legacy)
    except ownership.OwnershipError as err:
        raise ExportError(str(err)) from None


def _mount_point(directory: Path) -> str:
    """The one line refusing to write an export over the mount point `directory`."""
    return (
        f"{directory}: is a mount point (or in use), which cannot be replaced: an export is written "
        f"beside it and renamed into place; name a folder inside it, e.g. {directory / 'export'}; "
        "nothing was replaced"
    )


def _reads_as_export(directory: Path) -> bool:
    """Whether `directory` holds an export's config.yaml (passing its checks) and a model.pt file."""
    try:
        read_export_config(regular_file(directory, "config.yaml"))
        regular_file(directory, "model.pt")
    except ExportError:
        return False
    return True


def _check_data_files(directory: Path) -> None:
    """Every link in the folder is refused; JSON files must parse, Markdown must be UTF-8 text.

    Each is read only if it is a regular file (a FIFO would block) of at most MAX_DATA_FILE_BYTES.
    """
    for path in sorted(directory.iterdir()):
        if path.is_symlink():
            raise ExportError(f"{path}: is a symbolic link; an export holds regular files only")
        if path.suffix == ".json":
            _read_json(path)
        elif path.suffix == ".md":
            try:
                read_bounded(path, MAX_DATA_FILE_BYTES).decode("utf-8")
            except UnicodeDecodeError as err:
                raise ExportError(f"{path}: not UTF-8 text ({err})") from err


def _read_json(path: Path) -> Any:
    """A JSON data file of the export, read up to MAX_DATA_FILE_BYTES; ExportError if it is none."""
    try:
        return json.loads(read_bounded(path, MAX_DATA_FILE_BYTES).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        if isinstance(err, ExportError):
            raise
        raise ExportError(f"{path}: not a JSON file ({err})") from err


def _sized_model(config: dict[str, Any], config_path: Path) -> Predictor:
    """The export's model built on the meta device (no memory), refused above MAX_PARAMETERS."""
    with torch.device("meta"):
        model = build_node(config["model"], ("model",), config_path)
    count = sum(t.numel() for t in (*model.parameters(), *model.buffers()))
    if count > MAX_PARAMETERS:
        raise ExportError(
            f"{config_path}: the model declares {count} parameters; an export holds at most {MAX_PARAMETERS}"
        )
    return model


def load_export(
    path: str | Path,
) -> tuple[Predictor, dict[str, Any], F0Extractor | None]:
    """Rebuild an export's predictor (eval mode); returns (predictor, config, f0 extractor).

    `path` is an export directory, a run directory holding export/, or a model.pt beside its
    config.yaml. Everything is checked before anything is built (see the module docstring).
    """
    config_path, weights_path = resolve_export(path)
    config = read_export_config(config_path)
    _check_data_files(config_path.parent)
    state = read_weights(weights_path, _sized_model(config, config_path).state_dict())
    predictor = build_node(config["model"], ("model",), config_path)
    f0_extractor = build_node(config["f0"], ("f0",), config_path) if config.get("f0") else None
    predictor.load_state_dict(state)
    return predictor.eval(), config, f0_extractor


class Architecture(NamedTuple):
    """What an export records of its predictor: the checked `model` node, its f0 extractor, where."""

    model: dict[str, Any]
    f0_extractor: F0Extractor | None
    config_path: Path

    def build(self, num_domains: int, num_judges: int, score_range: Sequence[float]) -> Predictor:
        """The architecture random-initialised for a new corpus: its domain and judge counts and scale.

        The head still predicts on its internal 1-5 scale, so a predictor trained on 1-5 maps onto
        any scale; `sqa.training.builder.init_from` then copies the export's weights.
        """
        node = {**self.model, "num_domains": num_domains, "num_judges": num_judges}
        node["score_range"] = [float(v) for v in score_range]
        return build_node(node, ("model",), self.config_path)


def read_architecture(path: str | Path) -> Architecture:
    """The architecture of the export at `path`, checked as for scoring (see `load_export`)."""
    config_path, _ = resolve_export(path)
    config = read_export_config(config_path)
    if config["model"]["_target_"] == ENSEMBLE_TARGET:
        # Its members may differ in architecture: there is no one architecture to start from.
        raise ExportError(
            f"{config_path}: is an ensemble (model.members); a run starts from one predictor: name the "
            "export of one of its members"
        )
    f0_extractor = build_node(config["f0"], ("f0",), config_path) if config.get("f0") else None
    return Architecture(dict(config["model"]), f0_extractor, config_path)


def read_export_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The model.pt of the export at `path`, checked against its config.yaml's architecture.

    The checks of `load_export` (declared sizes before loading, then names, shapes, types and
    finite values in the architecture's dtypes), without building the model: what a run that
    starts from an export (`init_from`) copies its weights from.
    """
    config_path, weights_path = resolve_export(path)
    config = read_export_config(config_path)
    return read_weights(weights_path, _sized_model(config, config_path).state_dict())


def export_json(path: str | Path, name: str) -> Any:
    """The JSON data file `name` (run_info.json, metrics.json) of the export at `path`; None if absent."""
    config_path, _ = resolve_export(path)
    json_path = config_path.parent / name
    if not json_path.is_file() or json_path.is_symlink():
        return None
    return _read_json(json_path)


def run_record(path: str | Path, key: str) -> dict[str, Any] | None:
    """The `key` record of the run_info.json of the export at `path` (None where there is none)."""
    info = export_json(path, "run_info.json")
    record = info.get(key) if isinstance(info, dict) else None
    return record if isinstance(record, dict) else None


def learning_warning(path: str | Path) -> str | None:
    """The learning check's sentence of the export at `path` when its model does not beat the constant.

    Read from the export's run_info.json (None where it has none, or no learning check); the
    sentence is rebuilt from the recorded numbers, never taken as stored text.
    """
    check = run_record(path, "learning_check")
    if check is None or learning.verdict(check) == "better":
        return None
    return learning.sentence(check)
