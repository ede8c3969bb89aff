"""An export's datastore.pt (`sqa.models.retrieval.Datastore`, written by `export_predictor`), read as data.

It is checked as model.pt is (`sqa.exports.weights`): a regular file inside the export, whose
archive may declare at most the bytes of `MAX_DATASTORE_ENTRIES` entries of the backbone's width
before anything is loaded, read with `torch.load(weights_only=True)`; then its tensors' names,
dtypes, shapes and values (finite, N and k bounded, λ in [0, 1]) and their fit to the model
(embedding width, labels on its rating scale, domain IDs it embeds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqa.exports.config import ExportError
from sqa.exports.format import (
    ARCHIVE_OVERHEAD,
    DATASTORE_FILE,
    RECORD_OVERHEAD,
    read_weights,
    regular_file,
    resolve_export,
)
from sqa.exports.weights import _weights_bytes
from sqa.models.retrieval import MAX_DATASTORE_ENTRIES, Datastore, datastore_problem

# Bytes per entry besides its embedding: a float32 label and two int64 IDs.
ENTRY_BYTES = 4 + 8 + 8


def has_datastore(path: str | Path) -> bool:
    """Whether the export at `path` (as `load_export` names it) holds a datastore.pt."""
    config_path, _ = resolve_export(path)
    target = config_path.parent / DATASTORE_FILE
    return target.exists() or target.is_symlink()


def read_datastore(path: str | Path, predictor: Any, config: dict[str, Any]) -> Datastore:
    """The checked datastore of the export at `path` for its loaded `predictor` and `config`.

    ExportError (naming the file) where it is missing, oversized, not plain tensors, or does not
    fit the model.
    """
    config_path, _ = resolve_export(path)
    file = regular_file(config_path.parent, DATASTORE_FILE)
    backbone = getattr(predictor, "backbone", None)
    width = getattr(backbone, "output_dim", None)
    if not isinstance(width, int):
        raise ExportError(f"{file}: this export's model has no backbone embedding to search by")
    allowed = MAX_DATASTORE_ENTRIES * (4 * width + ENTRY_BYTES) + ARCHIVE_OVERHEAD + 6 * RECORD_OVERHEAD
    size = _weights_bytes(file)
    if size > allowed:
        raise ExportError(
            f"{file}: declares {size} bytes uncompressed; a datastore of at most {MAX_DATASTORE_ENTRIES} "
            f"entries of width {width} takes at most {allowed}"
        )
    state = read_weights(file)
    problem = datastore_problem(state)
    if problem is None and state["embeddings"].shape[1] != width:
        problem = f"embeddings are {state['embeddings'].shape[1]} wide; the model's backbone gives {width}"
    low, high = predictor.score_range
    if problem is None and not bool(((state["labels"] >= low) & (state["labels"] <= high)).all()):
        problem = f"labels lie outside the model's rating scale [{low:g}, {high:g}]"
    # IDs the model embeds; without an embedding, positions in config.yaml's domains list.
    if predictor.domain_count is not None:
        known = predictor.domain_count
    else:
        known = max(1, len(config.get("domains") or []))
    if problem is None and int(state["domains"].max()) >= known:
        problem = f"domain IDs reach {int(state['domains'].max())}; the model knows {known} domain(s)"
    if problem is not None:
        raise ExportError(f"{file}: {problem}")
    return Datastore.from_state(state)
