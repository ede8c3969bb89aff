"""sqa-bench's config file: the corpora and predictors of one table, read and checked whole.

A plain YAML file (no Hydra: it names files, not objects to build):

    corpora:
      - name: ward-quality
        manifest: ward-quality.csv      # relative paths resolve against this file's folder
        score_range: [0, 100]
        test: test                      # the split that counts as test: test, valid or all
      - name: synthetic
        corpus: synthetic               # sqa-baseline's --corpus choices; csv where a manifest is named
        seed: 0
    predictors:
      - distillmos                      # zero-shot: distillmos or dnsmos
      - {zero_shot: dnsmos, output: sig}
      - {export: runs/x/export, name: x, trained_on: ward-quality}   # checked against its record
    bootstrap: 1000                     # resamples of the 95 % intervals, 0: none
    seed: 0                             # the bootstrap's seed

Every problem is a `BenchConfigError` naming the file and the key (`corpora[1].manifest`).
`sqa-bench` holds a recipe to an export's bounds (`RecipeBounds`, `sqa.baselines.bench.RECIPE_BOUNDS`):
its size, the digits of its integers, the entries of `corpora` and `predictors`, and `bootstrap`;
like an export's config.yaml it may hold no YAML alias (nested ones expand exponentially).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sqa.baselines.cli import BASELINES
from sqa.baselines.corpora import CORPORA
from sqa.core.reading import ReadError, read_text

# The split of a corpus that counts as test: its test split, its validation split, or every clip
# (a corpus used only to test on; it then has no training clips for the constant or a scale map).
TEST_SPLITS = ("test", "valid", "all")
CORPUS_KEYS = (
    "name",
    "corpus",
    "manifest",
    "root",
    "score_range",
    "seed",
    "clips_per_system",
    "sample_rate_filter",
    "test",
)
ZERO_SHOT_KEYS = ("zero_shot", "output", "name")
EXPORT_KEYS = ("export", "name", "trained_on")
TOP_KEYS = ("corpora", "predictors", "bootstrap", "seed")
DEFAULT_BOOTSTRAP = 1000
# The name of the constant predictor's row of every corpus, which no predictor may take.
CONSTANT = "constant"


class BenchConfigError(ValueError):
    """The config file is unreadable or a key of it is missing or wrong; the message names both."""


@dataclass(frozen=True)
class RecipeBounds:
    """The most a recipe may hold: bytes, digits of an integer, entries of a list, bootstrap resamples."""

    file_bytes: int
    integer_digits: int
    entries: int
    bootstrap: int


class _RecipeLoader(yaml.SafeLoader):
    """`yaml.SafeLoader` without aliases, and without integers of more than `digits` digits (None: any)."""

    def __init__(self, text: str, path: Path, digits: int | None) -> None:
        super().__init__(text)
        self.path = path
        self.digits = digits

    def compose_node(self, parent: Any, index: Any) -> Any:
        """The next node; an alias is refused, naming its line."""
        if self.check_event(yaml.AliasEvent):
            line = self.peek_event().start_mark.line + 1
            raise BenchConfigError(f"{self.path}: line {line}: a recipe holds no YAML alias (*name)")
        return super().compose_node(parent, index)

    def construct_bounded_int(self, node: yaml.ScalarNode) -> int:
        """An integer of at most `digits` digits, counted before converting (as an export's)."""
        digits = sum(c.isalnum() for c in node.value)
        if self.digits is not None and digits > self.digits:
            raise BenchConfigError(
                f"{self.path}: line {node.start_mark.line + 1}: an integer of {digits} digits; "
                f"a recipe's integers have at most {self.digits}"
            )
        return self.construct_yaml_int(node)


_RecipeLoader.add_constructor("tag:yaml.org,2002:int", _RecipeLoader.construct_bounded_int)


@dataclass(frozen=True)
class BenchCorpus:
    """A corpus of the table: its name, sqa-baseline's options that read it, the split tested."""

    name: str
    options: argparse.Namespace
    test: str


@dataclass(frozen=True)
class BenchPredictor:
    """A predictor of the table: a zero-shot baseline (`zero_shot`, `output`) or an `export` folder.

    `trained_on` names the config's corpus an export was trained on where the user says so; it
    marks no row: sqa-bench checks it against the corpus the export records, which marks them.
    """

    name: str
    zero_shot: str | None = None
    output: str | None = None
    export: Path | None = None
    trained_on: str | None = None


@dataclass(frozen=True)
class BenchConfig:
    """The whole config: where it was read, its corpora and predictors, the intervals' settings."""

    path: Path
    corpora: list[BenchCorpus]
    predictors: list[BenchPredictor]
    bootstrap: int
    seed: int


def _fail(path: Path, key: str, problem: str) -> BenchConfigError:
    """The error naming the config file, the key at fault and the problem."""
    return BenchConfigError(f"{path}: {key}: {problem}")


def _integer(value: Any, path: Path, key: str, low: int, high: int | None = None) -> int:
    """`value` as an integer of at least `low` (and at most `high`), else the error naming `key`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _fail(path, key, f"must be an integer of at least {low}, got {value!r}")
    if high is not None and value > high:
        raise _fail(path, key, f"must be an integer of at most {high}, got {value}")
    return value


def _text(value: Any, path: Path, key: str) -> str:
    """`value` as a non-empty string, else the error naming `key`."""
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, key, f"must be a non-empty string, got {value!r}")
    return value


def _mapping(value: Any, path: Path, key: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    """`value` as a mapping whose keys are all `allowed`, else the error naming the first other."""
    if not isinstance(value, Mapping):
        raise _fail(path, key, f"must be a mapping, got {type(value).__name__}")
    for name in value:
        if name not in allowed:
            raise _fail(
                path, f"{key}.{name}" if key else str(name), f"unknown key; allowed: {', '.join(allowed)}"
            )
    return value


def _file(value: Any, path: Path, key: str, folder: bool) -> Path:
    """A path of the config (relative to its folder) that exists as a file, or a folder if `folder`."""
    found = path.parent / Path(_text(value, path, key)).expanduser()
    if not (found.is_dir() if folder else found.is_file()):
        raise _fail(path, key, f"{'folder' if folder else 'file'} {str(found)!r} not found")
    return found


def _score_range(value: Any, path: Path, key: str) -> list[float]:
    """`[low, high]`: two finite numbers, low below high."""
    numbers = isinstance(value, list) and len(value) == 2
    numbers = numbers and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    if not numbers or not all(math.isfinite(v) for v in value) or value[0] >= value[1]:
        raise _fail(path, key, f"must be [low, high], two finite numbers with low < high, got {value!r}")
    return [float(v) for v in value]


def _corpus(entry: Any, path: Path, key: str) -> BenchCorpus:
    """One entry of `corpora`."""
    entry = _mapping(entry, path, key, CORPUS_KEYS)
    if "name" not in entry:
        raise _fail(path, f"{key}.name", "missing")
    name = _text(entry["name"], path, f"{key}.name")
    kind = entry.get("corpus", "csv" if "manifest" in entry else None)
    if kind not in CORPORA:
        raise _fail(path, f"{key}.corpus", f"must be one of {', '.join(CORPORA)}, got {kind!r}")
    manifest = entry.get("manifest")
    root = entry.get("root")
    if kind == "csv":
        if manifest is None:
            raise _fail(path, f"{key}.manifest", "missing: a csv corpus names its manifest")
        manifest = _file(manifest, path, f"{key}.manifest", folder=False)
    elif manifest is not None:
        raise _fail(path, f"{key}.manifest", f"only a csv corpus has a manifest, this is {kind}")
    if root is not None:
        # A synthetic corpus is generated into its folder where that does not exist yet.
        root = (
            path.parent / _text(root, path, f"{key}.root")
            if kind.startswith("synthetic")
            else _file(root, path, f"{key}.root", folder=True)
        )
    elif kind in ("singmos_pro", "singmos_vmc24"):
        raise _fail(path, f"{key}.root", f"missing: a {kind} corpus names its folder")
    rate = entry.get("sample_rate_filter")
    options = argparse.Namespace(
        corpus=kind,
        manifest=manifest,
        root=root,
        seed=_integer(entry.get("seed", 0), path, f"{key}.seed", 0),
        clips_per_system=_integer(entry.get("clips_per_system", 14), path, f"{key}.clips_per_system", 1),
        sample_rate_filter=None if rate is None else _integer(rate, path, f"{key}.sample_rate_filter", 0),
        score_range=(
            None
            if "score_range" not in entry
            else _score_range(entry["score_range"], path, f"{key}.score_range")
        ),
    )
    test = entry.get("test", "test")
    if test not in TEST_SPLITS:
        raise _fail(path, f"{key}.test", f"must be one of {', '.join(TEST_SPLITS)}, got {test!r}")
    return BenchCorpus(name, options, test)


def _predictor(entry: Any, path: Path, key: str) -> BenchPredictor:
    """One entry of `predictors`: a zero-shot name, or a mapping with `zero_shot` or `export`."""
    if isinstance(entry, str):
        entry = {"zero_shot": entry}
    if isinstance(entry, Mapping) and "export" in entry:
        entry = _mapping(entry, path, key, EXPORT_KEYS)
        export = _text(entry["export"], path, f"{key}.export")
        found = path.parent / Path(export).expanduser()
        if not found.exists():
            raise _fail(path, f"{key}.export", f"{str(found)!r} not found")
        trained_on = entry.get("trained_on")
        return BenchPredictor(
            name=_text(entry.get("name", export), path, f"{key}.name"),
            export=found,
            trained_on=None if trained_on is None else _text(trained_on, path, f"{key}.trained_on"),
        )
    entry = _mapping(entry, path, key, ZERO_SHOT_KEYS)
    if "zero_shot" not in entry:
        raise _fail(path, key, "names no predictor: a zero-shot name, `zero_shot:` or `export:`")
    model = entry["zero_shot"]
    if model not in BASELINES:
        raise _fail(path, f"{key}.zero_shot", f"must be one of {', '.join(sorted(BASELINES))}, got {model!r}")
    outputs = BASELINES[model].outputs
    output = entry.get("output", outputs[0])
    if output not in outputs:
        raise _fail(path, f"{key}.output", f"{model} gives {', '.join(outputs)}, got {output!r}")
    default = model if output == outputs[0] else f"{model}-{output}"
    return BenchPredictor(
        name=_text(entry.get("name", default), path, f"{key}.name"), zero_shot=model, output=output
    )


def _entries(config: Mapping[str, Any], path: Path, key: str, most: int | None) -> list[Any]:
    """The non-empty list under `key`, of at most `most` entries (None: any number)."""
    value = config.get(key)
    if not isinstance(value, list) or not value:
        raise _fail(path, key, f"must be a non-empty list, got {value!r}")
    if most is not None and len(value) > most:
        raise _fail(path, key, f"has {len(value)} entries; at most {most}")
    return value


def _recipe(path: Path, bounds: RecipeBounds | None) -> Any:
    """The YAML data of the recipe at `path`, within `bounds` (its size checked before it is read)."""
    try:
        size = path.stat().st_size
    except (OSError, ValueError):
        size = 0  # read_text says why it cannot be read
    if bounds is not None and size > bounds.file_bytes:
        raise BenchConfigError(f"{path}: {size} bytes; a recipe is at most {bounds.file_bytes}")
    try:
        text = read_text(path)
    except ReadError as err:
        raise BenchConfigError(str(err)) from None
    try:
        # Built inside the try: the loader refuses a non-printable character as it is made.
        loader = _RecipeLoader(text, path, None if bounds is None else bounds.integer_digits)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as err:
        raise BenchConfigError(f"{path}: not a YAML file ({' '.join(str(err).split())})") from None
    except RecursionError:
        raise BenchConfigError(f"{path}: nested too deeply") from None


def _unique(names: list[str], path: Path, key: str) -> None:
    """Refuse a name given twice: the table's rows are told apart by name."""
    for i, name in enumerate(names):
        if name in names[:i]:
            raise _fail(
                path, f"{key}[{i}].name", f"{name!r} is already the name of {key}[{names.index(name)}]"
            )


def read_config(path: str | Path, bounds: RecipeBounds | None = None) -> BenchConfig:
    """The config at `path`, checked whole (files named in it included) before anything is scored.

    Held to `bounds` where given (sqa-bench gives an export's); None checks no size, only kinds.
    """
    path = Path(path)
    config = _recipe(path, bounds)
    if not isinstance(config, Mapping):
        raise BenchConfigError(f"{path}: expected a mapping with corpora and predictors at the top")
    config = _mapping(config, path, "", TOP_KEYS)
    most = None if bounds is None else bounds.entries
    corpora = [
        _corpus(e, path, f"corpora[{i}]") for i, e in enumerate(_entries(config, path, "corpora", most))
    ]
    predictors = [
        _predictor(e, path, f"predictors[{i}]")
        for i, e in enumerate(_entries(config, path, "predictors", most))
    ]
    _unique([c.name for c in corpora], path, "corpora")
    _unique([p.name for p in predictors], path, "predictors")
    names = [c.name for c in corpora]
    for i, predictor in enumerate(predictors):
        if predictor.name == CONSTANT:
            raise _fail(path, f"predictors[{i}].name", f"{CONSTANT!r} is the constant predictor's row")
        if predictor.trained_on is not None and predictor.trained_on not in names:
            raise _fail(
                path,
                f"predictors[{i}].trained_on",
                f"{predictor.trained_on!r} is none of the corpora {names}",
            )
    return BenchConfig(
        path=path,
        corpora=corpora,
        predictors=predictors,
        bootstrap=_integer(
            config.get("bootstrap", DEFAULT_BOOTSTRAP),
            path,
            "bootstrap",
            0,
            None if bounds is None else bounds.bootstrap,
        ),
        seed=_integer(config.get("seed", 0), path, "seed", 0),
    )
