"""The split reader and synthetic-corpus modules keep every public path they had as single modules.

Configs (`conf/data/*.yaml`), exports and run directories name these paths as `_target_`s, and
users' code imports them; a name missing from a package's re-exports would break them silently.
"""

from __future__ import annotations

import importlib

import pytest
from hydra.utils import get_object

from sqa.core.renames import current

# Every public name of sqa/data/readers.py and sqa/data/synthetic.py before the split.
READERS = (
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
    "recorded_corpus",
)
# Names added to sqa.data.readers since the split.
ADDED_READERS = ("read_webmushra",)
SYNTHETIC = (
    "BATCHES",
    "CLIP_COUNT_SPREAD",
    "DIMENSION_BATCHES",
    "FORMAT_VERSION",
    "JUDGES_PER_BATCH",
    "JUDGE_LENIENCY_STD",
    "JUDGE_ORDER_NOISE",
    "JUDGE_STREAM",
    "LABEL_STREAM",
    "LAYOUT_STREAM",
    "LONG_SECONDS",
    "MUSHRA_BIAS_STD",
    "MUSHRA_COLUMNS",
    "MUSHRA_FORMAT_VERSION",
    "MUSHRA_LISTENERS",
    "MUSHRA_LISTENERS_PER_CLIP",
    "MUSHRA_MANIFEST",
    "MUSHRA_NOISE_STD",
    "MUSHRA_RANGE",
    "MUSHRA_REPLICATE_SHARE",
    "MUSHRA_STREAM",
    "PITCH_KINDS",
    "SPECTRAL_KINDS",
    "TEST_BATCHES",
    "generate",
    "load_synthetic",
    "load_synthetic_mushra",
)
OLD_PATHS = [f"sqa.data.readers.{n}" for n in READERS] + [f"sqa.data.synthetic.{n}" for n in SYNTHETIC]


@pytest.mark.parametrize("path", OLD_PATHS)
def test_every_public_path_of_the_old_modules_is_current_and_resolves(path: str) -> None:
    assert current(path) == path  # not an old path: nothing rewrites it
    assert get_object(path) is not None


@pytest.mark.parametrize("package", ["sqa.data.readers", "sqa.data.synthetic"])
def test_each_package_exports_exactly_the_old_modules_names(package: str) -> None:
    names = READERS + ADDED_READERS if package.endswith("readers") else SYNTHETIC
    assert sorted(importlib.import_module(package).__all__) == sorted(names)


def test_the_recorded_readers_are_the_objects_the_configs_build() -> None:
    from sqa.data.readers import CORPUS_READERS, GENERATING_READERS
    from sqa.data.readers.manifest import read_csv_manifest
    from sqa.data.synthetic.mushra import load_synthetic_mushra

    assert GENERATING_READERS <= CORPUS_READERS
    assert all(get_object(path) is not None for path in CORPUS_READERS)
    assert get_object("sqa.data.readers.read_csv_manifest") is read_csv_manifest
    assert get_object("sqa.data.synthetic.load_synthetic_mushra") is load_synthetic_mushra
