"""What each argument of `MOSDataModule` must be, checked before any clip is read."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqa.data.corpus import Corpus
from sqa.data.valid_split import SPLIT_BY


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _names(value: Any) -> bool:
    return (
        isinstance(value, Sequence) and not isinstance(value, str) and all(isinstance(v, str) for v in value)
    )


# What each argument of MOSDataModule must be (the words of the error), and the test for it.
_KINDS: dict[str, Callable[[Any], bool]] = {
    "a positive integer": lambda v: _integer(v) and v > 0,
    "an integer >= 0": lambda v: _integer(v) and v >= 0,
    "an integer": _integer,
    "a positive number of seconds or null": lambda v: (
        v is None or (isinstance(v, int | float) and not isinstance(v, bool) and v > 0)
    ),
    "true or false": lambda v: isinstance(v, bool),
    "true, false or 'auto'": lambda v: isinstance(v, bool) or v == "auto",
    "an integer or null": lambda v: v is None or _integer(v),
    "a list of names or null": lambda v: v is None or _names(v),
    "a non-empty list of names": lambda v: _names(v) and len(v) > 0,
    "'raise' or 'skip'": lambda v: v in ("raise", "skip"),
    "a share in [0, 1)": lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1,
    "'auto', 'clip', 'system' or 'song'": lambda v: v in SPLIT_BY,
}
_ARGUMENTS = {
    "sample_rate": "a positive integer",
    "batch_size": "a positive integer",
    "eval_batch_size": "a positive integer",
    "num_workers": "an integer >= 0",
    "max_train_seconds": "a positive number of seconds or null",
    "preload": "true, false or 'auto'",
    "vocal_only": "true or false",
    "seed": "an integer",
    "split_seed": "an integer or null",
    "train_domains": "a list of names or null",
    "on_error": "'raise' or 'skip'",
    "bucketing": "true or false",
    "max_batch_seconds": "a positive number of seconds or null",
    "dimensions": "a non-empty list of names",
    "judges": "true or false",
    "valid_share": "a share in [0, 1)",
    "test_share": "a share in [0, 1)",
    "split_by": "'auto', 'clip', 'system' or 'song'",
}


def check_arguments(corpus: Corpus, args: Mapping[str, Any]) -> None:
    """ValueError naming the first of the data module's `args` of a wrong type or value."""
    for name, kind in _ARGUMENTS.items():
        if not _KINDS[kind](args[name]):
            raise ValueError(f"{name} must be {kind}, got {args[name]!r}")
    unknown = sorted(set(args["train_domains"] or ()) - set(corpus.domains))
    if unknown:
        raise ValueError(f"train_domains {unknown} not in the corpus {corpus.domains}")
