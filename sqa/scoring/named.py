"""Predictors ready by name, with no training and no download: `sqa.load("distillmos")`.

A name stands for an export built from weights an installed package ships (Distill-MOS v7 from
the `distillmos` wheel, `sqa.models.distillmos.zero_shot_predictor`), written to a temporary
folder while it is loaded and removed after. A file or folder of that name in the working
directory is the user's own export and wins: a name is read as one only where no path is.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqa.exports.format import export_predictor
from sqa.models.distillmos import SAMPLE_RATE, zero_shot_predictor

# Each name and what it scores.
NAMED_PREDICTORS = {
    "distillmos": "Distill-MOS v7 zero-shot: speech quality on 1-5, weights from the installed "
    "distillmos package (MIT); trained on speech, not singing",
}


def is_named(export: str | Path) -> bool:
    """Whether `export` is the name of a ready predictor rather than a path (no such path exists)."""
    return isinstance(export, str) and export in NAMED_PREDICTORS and not Path(export).exists()


@contextmanager
def export_folder(export: str | Path) -> Iterator[str | Path]:
    """`export` itself, or for a predictor's name, its export built in a temporary folder (removed after)."""
    if not is_named(export):
        yield export
        return
    with tempfile.TemporaryDirectory(prefix=f"sqa-{export}-") as folder:
        yield export_predictor(zero_shot_predictor(), Path(folder) / "export", SAMPLE_RATE, [])
