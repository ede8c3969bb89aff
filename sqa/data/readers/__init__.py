"""Corpus readers: SingMOS-Pro layout, SingMOS (VMC'24 track 2) layout, CSV manifests, webMUSHRA.

Every reader returns a `Corpus` of `Clip` rows. Problems in the metadata's structure raise
`CorpusError` naming the file and the key or row at fault, never a bare KeyError; a CSV cell that
is not a number is a problem of its clip instead (`Clip.problems`), reported with the others.
Configs and exports name the readers by this package, `sqa.data.readers.read_*`
(`CORPUS_READERS`); `recorded_corpus` reads the corpus an export records.

One concept per module:
    common.py     reading a metadata file, the rating scale, natural order of batch names
    singmos.py    the SingMOS-Pro and VMC'24 layouts
    columns.py    a CSV manifest's columns: sqa's names, recognised spellings, the rows as read
    manifest.py   the CSV manifest reader: scores from listeners' rows, roles, test sets
    recorded.py   the readers an export may record, and reading its recorded corpus
    webmushra.py  a webMUSHRA study: its results CSV with the config YAML it ran
"""

from __future__ import annotations

from sqa.data.readers.columns import (
    COLUMN_SPELLINGS,
    OPTIONAL_CSV_COLUMNS,
    REQUIRED_CSV_COLUMNS,
    columns_override,
    csv_columns,
    csv_rows,
)
from sqa.data.readers.common import read_text
from sqa.data.readers.manifest import REPLICATE_MODES, read_csv_manifest
from sqa.data.readers.recorded import CORPUS_READERS, GENERATING_READERS, recorded_corpus
from sqa.data.readers.singmos import read_singmos_pro, read_vmc24
from sqa.data.readers.webmushra import read_webmushra

# The paths that configs, exports and users' code name: each stays `sqa.data.readers.<name>`.
__all__ = [
    "COLUMN_SPELLINGS",
    "CORPUS_READERS",
    "GENERATING_READERS",
    "OPTIONAL_CSV_COLUMNS",
    "REPLICATE_MODES",
    "REQUIRED_CSV_COLUMNS",
    "columns_override",
    "csv_columns",
    "csv_rows",
    "read_csv_manifest",
    "read_singmos_pro",
    "read_text",
    "read_vmc24",
    "read_webmushra",
    "recorded_corpus",
]
