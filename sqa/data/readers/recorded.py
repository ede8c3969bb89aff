"""The corpus an export records: which readers it may name, checked before any is called."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqa.core.renames import current
from sqa.data.corpus import Corpus, CorpusError

# The readers that generate their corpus where it is missing (told not to, for a recorded corpus).
GENERATING_READERS = frozenset(
    {
        "sqa.data.synthetic.load_synthetic",
        "sqa.data.synthetic.load_synthetic_mushra",
        "sqa.data.small_table.load_small_table",
    }
)
WEBMUSHRA_READER = "sqa.data.readers.read_webmushra"
# The readers a recorded corpus (an export's `data.corpus`) may name: nothing else is built. They
# are named by the packages that re-export them, as conf/data/*.yaml names them.
CORPUS_READERS = frozenset(
    {
        "sqa.data.readers.read_singmos_pro",
        "sqa.data.readers.read_vmc24",
        "sqa.data.readers.read_csv_manifest",
        "sqa.data.readers.read_webmushra",
        "sqa.data.synthetic.load_synthetic",
        "sqa.data.synthetic.load_synthetic_mushra",
        "sqa.data.small_table.load_small_table",
    }
)


def recorded_corpus(spec: Mapping[str, Any], where: str | Path, root: str | Path | None = None) -> Corpus:
    """Read the corpus an export records: `{_target_: <one of CORPUS_READERS>, <plain arguments>}`.

    The corpus folder is `root` where the user gives one (it has moved), else the recorded
    `root`, which is relative to the folder of `where` (the export's config.yaml; exports of
    older versions recorded an absolute one); a CSV manifest's `path` is relative to that folder.
    The reader and its arguments are checked before anything is called: the target must be one
    of sqa's readers, every argument a plain value (no nested targets, no interpolations), a
    `path` an existing .csv file and a `root` an existing folder; a recorded synthetic corpus is
    read where it exists, never generated.
    """
    if not isinstance(spec, Mapping) or "_target_" not in spec:
        raise CorpusError(f"{where}: the recorded corpus has no reader (`_target_`)")
    target = spec["_target_"]
    if isinstance(target, str):
        target = current(target)
    if target not in CORPUS_READERS:
        raise CorpusError(f"{where}: refusing corpus reader {target!r}; allowed: {sorted(CORPUS_READERS)}")
    for key, value in spec.items():
        if not _plain(value):
            raise CorpusError(f"{where}: corpus argument {key!r} is not a plain value ({value!r})")
    kwargs = {k: v for k, v in spec.items() if k != "_target_"}
    move = "; if the corpus has moved, name its folder: eval.py export=... data.corpus.root=DIR"
    if root is not None:
        kwargs["root"] = str(root)
    elif kwargs.get("root") is not None:
        kwargs["root"] = str(Path(where).parent / str(kwargs["root"]))
    # What the readers read: a CSV manifest (`path`), webMUSHRA's results CSV and config YAML in
    # its folder, or a corpus folder (`root`), nothing else.
    if target == WEBMUSHRA_READER:
        folder = kwargs.get("root")
        if folder is None:
            raise CorpusError(
                f"{where}: the recorded webMUSHRA study names no folder it ran from (root){move}"
            )
        for key, suffixes in (("results", (".csv",)), ("config", (".yaml", ".yml"))):
            full = Path(str(folder)) / str(kwargs.get(key))
            if full.suffix not in suffixes or not full.is_file():
                kind = "/".join(suffixes)
                raise CorpusError(
                    f"{where}: the recorded webMUSHRA {key} {str(full)!r} is not a {kind} file{move}"
                )
    elif "path" in kwargs:
        path = Path(str(kwargs["path"]))
        full = Path(kwargs["root"]) / path if kwargs.get("root") is not None else path
        if not (path.suffix == ".csv" and full.is_file()):
            raise CorpusError(f"{where}: the recorded corpus path {str(full)!r} is not a .csv file{move}")
    elif kwargs.get("root") is not None and not Path(kwargs["root"]).is_dir():
        raise CorpusError(f"{where}: the recorded corpus folder {kwargs['root']!r} does not exist{move}")
    if target in GENERATING_READERS:
        # An export's record is read, never acted on: a synthetic corpus is not generated.
        kwargs["allow_generate"] = False
    module, _, name = str(target).rpartition(".")
    reader = getattr(importlib.import_module(module), name)
    return reader(**kwargs)


def _plain(value: object) -> bool:
    """A string without interpolation, a number, a bool, None, or a list or mapping of those.

    A mapping (`columns`) has string keys and none of Hydra's special ones (`_target_`, ...).
    """
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return all(
            isinstance(k, str) and _plain(k) and not (k.startswith("_") and k.endswith("_")) and _plain(v)
            for k, v in value.items()
        )
    if isinstance(value, str):
        return "${" not in value
    return value is None or isinstance(value, bool | int | float)
