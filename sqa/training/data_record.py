"""The export's record of a run's corpus (config.yaml's `data`): plain values and relative paths."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from sqa.data.readers import CORPUS_READERS
from sqa.data.readers.recorded import WEBMUSHRA_READER
from sqa.data.readers.webmushra import webmushra_root


def corpus_name(cfg: DictConfig) -> str:
    """The corpus's name: the data config chosen (`data=synthetic`), else its reader's name."""
    try:
        choice = HydraConfig.get().runtime.choices.get("data")
    except ValueError:
        # Composed outside a Hydra application (tests, the API): no choices are recorded.
        choice = None
    return str(choice or str(cfg.data.corpus.get("_target_", "")).rpartition(".")[2])


def recorded_data(
    cfg: DictConfig, export_dir: str | Path, test_split: str | None = None
) -> dict[str, Any] | None:
    """The corpus of this run as plain values for an export (None for a reader outside sqa's).

    Interpolations are resolved. No absolute path is recorded: the corpus folder (`root`; a CSV
    manifest's folder unless a root is set; the folder webMUSHRA ran from) relative to
    `export_dir`, and a manifest's `path` (webMUSHRA's `results` and `config`) relative to that
    folder, so that the export and the corpus can move together, and a user whose corpus lies
    elsewhere names its folder (`eval.py export=E data.corpus.root=DIR`).
    `test_split` names the export's copy of a carved test split (`test_split.csv`).
    """
    corpus = OmegaConf.to_container(cfg.data.corpus, resolve=True)
    if corpus.get("_target_") not in CORPUS_READERS:
        return None
    root = corpus.get("root")
    if corpus["_target_"] == WEBMUSHRA_READER:
        # The results CSV and the config YAML relative to the folder webMUSHRA ran from, recorded.
        files = {
            key: Path(root) / corpus[key] if root is not None else Path(corpus[key])
            for key in ("results", "config")
        }
        root = Path(root) if root is not None else webmushra_root(files["config"])
        for key, full in files.items():
            corpus[key] = os.path.relpath(full.resolve(), root.resolve())
    elif isinstance(corpus.get("path"), str):
        path = (Path(root) / corpus["path"] if root is not None else Path(corpus["path"])).resolve()
        root = path.parent if root is None else root
        corpus["path"] = os.path.relpath(path, Path(root).resolve())
    if root is not None:
        corpus["root"] = os.path.relpath(Path(root).resolve(), Path(export_dir).resolve())
    data = {"name": corpus_name(cfg), "corpus": corpus, "eval_batch_size": int(cfg.data.eval_batch_size)}
    if test_split is not None:
        data["test_split_csv"] = test_split
    return data
