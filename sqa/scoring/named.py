"""Predictors ready by name, with no training and no download: `sqa.load("distillmos")`.

A name stands for an export built from weights an installed package ships (Distill-MOS v7 from
the `distillmos` wheel, `sqa.models.distillmos.zero_shot_predictor`), written to a temporary
folder while it is loaded and removed after. A name cannot be shadowed: the str "distillmos" is
the built-in predictor whatever the working directory holds. A user's file or folder of that name
is reached as a path, "./distillmos", any str with a path separator, or a `pathlib.Path`; names
have neither a separator nor a leading dot, so a path is never read as a name.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqa.exports.errors import ExportError
from sqa.exports.format import export_predictor
from sqa.models.distillmos import SAMPLE_RATE, zero_shot_predictor

# Each name and what it scores.
NAMED_PREDICTORS = {
    "distillmos": "Distill-MOS v7 zero-shot: speech quality on 1-5, weights from the installed "
    "distillmos package (MIT); trained on speech, not singing",
}
# How close a bare name must be to a built-in one to be suggested (difflib's ratio): a dropped or
# doubled letter ("distilmos", 0.95) is, another model's name ("dnsmos", 0.62) is not.
SUGGESTION_CUTOFF = 0.8


def is_named(export: str | Path) -> bool:
    """Whether `export` is the name of a ready predictor: a str spelled as one, whatever paths exist."""
    return isinstance(export, str) and export in NAMED_PREDICTORS


def _bare(word: str) -> bool:
    """Whether `word` has no path separator and no leading dot: it is spelled as a name would be."""
    return not word.startswith(".") and not any(sep and sep in word for sep in (os.sep, os.altsep))


def source_of(export: str | Path) -> str:
    """What `export` loads, in a few words: "built-in 'distillmos'", or the absolute path of the export."""
    if is_named(export):
        return f"built-in {export!r}"
    return str(Path(export).expanduser().absolute())


def loaded_line(export: str | Path) -> str:
    """The one line saying what loading `export` loaded, and how to reach a same-named path it did not."""
    if not is_named(export):
        return f"loaded the export at {source_of(export)}"
    line = f"loaded the built-in predictor {export!r} ({NAMED_PREDICTORS[export]})"
    if Path(export).exists():
        # The one place a user may have meant their own: say how to reach it.
        line += f"; the {export!r} in the working directory is not it: load it as './{export}'"
    return line


def unknown_name_problem(export: str | Path) -> str | None:
    """Why a bare `export` that is neither a path nor a name was refused, with the name it is close to."""
    if not isinstance(export, str) or not _bare(export) or is_named(export) or Path(export).exists():
        return None
    close = difflib.get_close_matches(export.lower(), NAMED_PREDICTORS, n=1, cutoff=SUGGESTION_CUTOFF)
    if not close:
        return None
    return (
        f"{export}: no such export, and no built-in predictor of that name: did you mean {close[0]!r}? "
        f"(built-in: {', '.join(map(repr, NAMED_PREDICTORS))})"
    )


@contextmanager
def export_folder(export: str | Path) -> Iterator[str | Path]:
    """`export` itself, or for a predictor's name, its export built in a temporary folder (removed after).

    A bare word close to a name that is no path (`distilmos`) is an ExportError suggesting the name.
    """
    if (problem := unknown_name_problem(export)) is not None:
        raise ExportError(problem)
    if not is_named(export):
        yield export
        return
    with tempfile.TemporaryDirectory(prefix=f"sqa-{export}-") as folder:
        yield export_predictor(zero_shot_predictor(), Path(folder) / "export", SAMPLE_RATE, [])
