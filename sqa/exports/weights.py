"""An export's weights archive (model.pt): its declared size, then its tensors, checked as plain data.

Read only with `torch.load(weights_only=True)`, after the archive's declared sizes are bounded by
the architecture's; its tensors' names, shapes and types are checked against the architecture
(a model's state_dict on the meta device) before any tensor's data is read, then their values.
"""

from __future__ import annotations

import zipfile
from collections.abc import Mapping
from pathlib import Path

import torch

from sqa.exports.bounds import ARCHIVE_OVERHEAD, RECORD_OVERHEAD
from sqa.exports.errors import ExportError


def _weights_bytes(weights_path: Path) -> int:
    """Bytes torch.load would hold: a zip archive's declared (uncompressed) sizes, else the file's."""
    if not zipfile.is_zipfile(weights_path):
        return weights_path.stat().st_size  # the legacy format is an uncompressed pickle stream
    try:
        with zipfile.ZipFile(weights_path) as archive:
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError) as err:
        raise ExportError(f"{weights_path}: not a plain tensor state_dict ({err})") from err
    compressed = [r.filename for r in records if r.compress_type != zipfile.ZIP_STORED]
    if compressed:
        # torch.save stores records uncompressed; a compressed one can inflate without bound.
        raise ExportError(f"{weights_path}: compressed records ({compressed[0]}); torch.save writes none")
    return sum(r.file_size for r in records)


def read_weights(
    weights_path: Path, expected: Mapping[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """A plain {name: tensor} state_dict, read with `torch.load(weights_only=True)`.

    With `expected` (a model's state_dict, e.g. on the meta device) the archive may declare at
    most its tensors' bytes, checked before loading, and names, shapes and types are checked
    before any tensor's data is read (the archive is memory-mapped). Tensors must be dense, and
    floating point ones finite in the dtype the architecture holds them in.
    """
    if expected is not None:
        size = _weights_bytes(weights_path)
        allowed = sum(t.numel() * t.element_size() for t in expected.values())
        allowed += ARCHIVE_OVERHEAD + RECORD_OVERHEAD * len(expected)
        if size > allowed:
            raise ExportError(
                f"{weights_path}: declares {size} bytes uncompressed; the architecture in config.yaml "
                f"allows at most {allowed}"
            )
    try:
        state = torch.load(
            weights_path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(weights_path)
        )
    except Exception as err:  # torch raises UnpicklingError, RuntimeError, EOFError, ... variants
        raise ExportError(f"{weights_path}: not a plain tensor state_dict ({err})") from err
    if not isinstance(state, Mapping) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ExportError(f"{weights_path}: expected a mapping of parameter names to tensors")
    state = dict(state)
    for name, tensor in state.items():
        if tensor.layout != torch.strided:
            # Refused before any use: torch's operations on sparse weights fail in their own ways.
            kind = "sparse" if "sparse" in str(tensor.layout) else "non-dense"
            raise ExportError(
                f"{weights_path}: {name!r} is a {kind} tensor ({tensor.layout}); "
                "an export holds dense tensors"
            )
    if expected is not None:
        _check_against(state, expected, weights_path)
    for name, tensor in state.items():
        if not tensor.is_floating_point():
            continue
        # Checked in the dtype the model runs in: 1e300 in float64 is finite, and inf in float32.
        cast = tensor.to(expected[name].dtype) if expected is not None else tensor
        if not bool(torch.isfinite(cast).all()):
            where = f" once cast to {cast.dtype}" if cast.dtype != tensor.dtype else ""
            raise ExportError(f"{weights_path}: {name!r} holds NaN or infinite values{where}")
    return state


def _check_against(
    state: dict[str, torch.Tensor], expected: Mapping[str, torch.Tensor], weights_path: Path
) -> None:
    """Names, shapes and types of `state` against the architecture's (`expected`); ExportError names one."""
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
        want = expected[name].dtype
        # A float weight of another precision is cast as load_state_dict does; bool, integer or
        # complex values in a float weight would be cast silently into nonsense.
        if tensor.dtype != want and not (want.is_floating_point and tensor.is_floating_point()):
            raise ExportError(
                f"{weights_path}: {name!r} holds {tensor.dtype} values; the architecture needs {want}"
            )
