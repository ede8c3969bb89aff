"""An export's size limits: what each file, number and model may weigh, and the bounded reads and checks.

Every limit is checked before anything is allocated or built (docs/failures.md lists them all):
`read_bounded` reads a file within its limit, `_check_bounds` bounds a model or f0 node.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from sqa.core import reading
from sqa.exports.errors import ExportError, _key_path

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
# The largest model an export may hold (4 GB of float32 weights; wav2vec2 large has 317M).
MAX_PARAMETERS = 1_000_000_000
# What an export's README.md or *.json may weigh.
MAX_DATA_FILE_BYTES = 16 << 20
# A weights archive holds, besides the tensors' bytes, its pickle and a few records per tensor.
ARCHIVE_OVERHEAD = 1 << 20
RECORD_OVERHEAD = 1024


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of `path` if it is a regular file (no link, FIFO or device) of at most `limit` bytes.

    `sqa.core.reading.read_bounded`, its ReadError an ExportError.
    """
    try:
        return reading.read_bounded(path, limit)
    except reading.ReadError as err:
        raise ExportError(str(err)) from None


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
