"""Whether a trained model learned anything: the selected model against the constant predictor.

The constant predictor scores every clip with the training labels' mean. On a small corpus a
model can select, test and export well and still predict worse than that constant; its metrics
alone do not say so. `check` compares the two on the validation and test clips (utterance-level
RMSE, and whether the test SRCC's 95 % interval lies above 0) and `sentence` states the outcome
in one sentence with the numbers, for the console, run_info.json, the model card and scoring.

It judges two things apart, because they come apart: a model trained on one song can rank
another song's singers well and still miss the level its listeners rated at.

- The level (`level`): `better` where the model's utterance RMSE is below the constant's on test
  and on validation, `no_better` where it is not on either (a model whose RMSE is not a number
  where the constant's is, its predictions not finite, is `no_better`: it never "beats the
  constant" with a null RMSE), `unknown` without the constant's test RMSE.
- The ranking (`rank`): `better` where the test SRCC's 95 % interval lies above 0, `chance` where
  it reaches 0, `unknown` without an interval.

Verdicts, from the two: `better` (both better), `ranks_only` (ranks better than chance, levels no
better than the constant: use it to rank clips, not to predict absolute scores), `uncertain`
(levels better, ranking not shown better than chance) and `no_better` (neither).

Where the run has a pretrained peer (`candidates.peer`: `calibrated`, the zero-shot network only
mapped to the scale), the ranking is also judged against it (`peer_record`): the paired bootstrap
of the test utterance SRCC's difference on the same clips (`sqa.reports.compare.compare`), and
the sentence says whether the model ranks better than the peer, worse, or neither shown.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from sqa import metrics
from sqa.reports.compare import compare

VERDICTS = ("better", "ranks_only", "uncertain", "no_better")


def constant_rmse(labels: Sequence[float], constant: float) -> float:
    """RMSE of predicting `constant` for every one of `labels` (NaN without labels)."""
    values = np.asarray(labels, dtype=np.float64)
    return float(np.sqrt(np.mean((values - constant) ** 2))) if values.size else math.nan


def constant_results(
    train_mean: float,
    true: Sequence[float],
    systems: Sequence[str],
    test_sets: Sequence[str],
    bootstrap: int = 0,
    seed: int = 0,
    apart: Collection[str] = (),
) -> dict[str, dict[str, dict]]:
    """The constant predictor's metric blocks (`metrics.evaluate_sets`): `train_mean` for every clip."""
    constant = [float(train_mean)] * len(true)
    return metrics.evaluate_sets(
        constant, true, systems, test_sets, bootstrap=bootstrap, seed=seed, apart=apart
    )


def _finite(value: object) -> float | None:
    """`value` as a float when it is a finite number, else None (JSON null)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def check(
    train_mean: float,
    valid: tuple[float, Sequence[float]] | None,
    test_results: Mapping[str, Mapping[str, Any]],
    test_labels: Sequence[float],
    test_sets: Sequence[str],
    apart: Collection[str] = (),
) -> dict[str, Any]:
    """The learning check's record (plain values for run_info.json).

    `valid` is (the selected model's utterance RMSE over every validation clip, those clips'
    labels), None without validation clips. `test_results` are the test metric blocks with their
    `avg`; the constant's test RMSE is averaged over the same sets in the same way, from the test
    clips' `test_labels` and `test_sets` (sets in `apart` are left out, as from the average).
    """
    average = test_results.get(metrics.AVERAGE_KEY, {})
    no_systems = [""] * len(test_labels)
    reference = constant_results(train_mean, test_labels, no_systems, test_sets, apart=apart)
    covered = [label for label, name in zip(test_labels, test_sets, strict=True) if name not in apart]
    utt = average.get("utt", {})
    interval = (average.get(metrics.CI_KEY) or {}).get("utt", {}).get("srcc")
    record: dict[str, Any] = {
        "train_mean": float(train_mean),
        "test": {
            "clips": len(covered),
            "rmse": _finite(utt.get("rmse")),
            "constant_rmse": _finite(reference[metrics.AVERAGE_KEY]["utt"]["rmse"]),
            "srcc": _finite(utt.get("srcc")),
            "srcc_ci": [_finite(v) for v in interval] if interval else None,
        },
        "valid": None,
    }
    if valid is not None:
        rmse, labels = valid
        record["valid"] = {
            "clips": len(labels),
            "rmse": _finite(rmse),
            "constant_rmse": _finite(constant_rmse(labels, train_mean)),
        }
    record["level"], record["rank"] = level(record), rank(record)
    record["verdict"] = verdict(record)
    return record


def peer_record(
    name: str,
    model: Sequence[float],
    peer: Sequence[float],
    labels: Sequence[float],
    systems: Sequence[str],
    test_sets: Sequence[str],
    seed: int = 0,
) -> dict[str, Any]:
    """The pretrained peer `name`'s test utterance SRCC and the model's difference from it (plain values).

    `model` and `peer` are their predictions of the clips with `labels`; the peer's SRCC and the
    difference (model − peer) are the test average's, as the check's own SRCC (sets named
    `reference` and `anchor` left out), with the paired bootstrap's 95 % interval and p; null
    where the peer's SRCC is undefined (it scores every clip alike).
    """
    entry = compare(list(peer), list(model), list(labels), list(systems), list(test_sets), seed=seed)
    average = entry[metrics.AVERAGE_KEY]["utt"]
    interval = average.get("ci")
    return {
        "name": str(name),
        "peer_srcc": _finite(average.get("a")),
        "difference": _finite(average.get("diff")),
        "difference_ci": [_finite(v) for v in interval] if interval else None,
        "p": _finite(average.get("p")),
    }


def against_peer(record: Mapping[str, Any]) -> str:
    """`better`, `worse`, `not_shown` or `unknown`: the SRCC difference's interval against the peer's."""
    interval = _pair(_part(record, "peer").get("difference_ci"))
    if interval is None or None in interval:
        return "unknown"
    low, high = interval
    return "better" if low > 0 else "worse" if high < 0 else "not_shown"


def _peer_clause(record: Mapping[str, Any]) -> str:
    """The sentence's clause on the pretrained peer ("" without one)."""
    peer = _part(record, "peer")
    if not peer:
        return ""
    # The name is a candidate's, from the run's configuration: only its word characters are said.
    name = "".join(c for c in str(peer.get("name", "")) if c.isalnum() or c in "_-.")[:40] or "peer"
    interval = _pair(peer.get("difference_ci"))
    ci = f" [{_number(interval[0])}, {_number(interval[1])}]" if interval else ""
    numbers = (
        f"SRCC {_number(_part(record, 'test').get('srcc'))} against {_number(peer.get('peer_srcc'))}, "
        f"difference {_number(peer.get('difference'))}{ci}"
    )
    said = {
        "better": f"it ranks clips better than the pretrained peer {name} ({numbers})",
        "worse": f"it ranks clips worse than the pretrained peer {name} ({numbers}): prefer the peer to rank",
        "not_shown": f"it is not shown to rank better or worse than the pretrained peer {name} ({numbers})",
        "unknown": f"against the pretrained peer {name} its ranking is not judged ({numbers})",
    }
    return "; " + said[against_peer(record)]


def _part(record: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    """The `test` or `valid` part of a record, {} where it is missing or not a mapping."""
    part = record.get(name)
    return part if isinstance(part, Mapping) else {}


def _beats(part: Mapping[str, Any]) -> bool | None:
    """Whether a part's RMSE is below the constant's (None where the constant's is unknown).

    A part with a constant's RMSE but none of its own (non-finite predictions) does not beat it.
    """
    rmse, constant = _finite(part.get("rmse")), _finite(part.get("constant_rmse"))
    if constant is None:
        return None
    return rmse is not None and rmse < constant


def _interval(part: Mapping[str, Any]) -> tuple[float | None, float | None] | None:
    """The part's SRCC interval as (low, high) numbers, None where it has none."""
    return _pair(part.get("srcc_ci"))


def _pair(interval: object) -> tuple[float | None, float | None] | None:
    """A recorded interval as (low, high) numbers, None where it is not a pair."""
    if not isinstance(interval, (list, tuple)) or len(interval) != 2:
        return None
    return _finite(interval[0]), _finite(interval[1])


def level(record: Mapping[str, Any]) -> str:
    """`better`, `no_better` or `unknown`: the model's RMSE against the constant's, on test and validation."""
    beats = [_beats(_part(record, "test")), _beats(_part(record, "valid"))]
    if False in beats:
        return "no_better"
    return "better" if beats[0] else "unknown"


def rank(record: Mapping[str, Any]) -> str:
    """`better`, `chance` or `unknown`: whether the test SRCC's interval lies above 0 (touching is chance)."""
    interval = _interval(_part(record, "test"))
    if interval is None or interval[0] is None:
        return "unknown"
    return "better" if interval[0] > 0 else "chance"


def verdict(record: Mapping[str, Any]) -> str:
    """`better`, `ranks_only`, `uncertain` or `no_better` for a record of `check` (the module docstring)."""
    levels, ranks = level(record) == "better", rank(record) == "better"
    if levels:
        return "better" if ranks else "uncertain"
    if level(record) == "no_better":
        return "ranks_only" if ranks else "no_better"
    # The level is unknown: only the ranking can be judged.
    return "uncertain"


def _number(value: object) -> str:
    """A finite number as text with four significant digits; anything else as `n/a`."""
    number = _finite(value)
    return "n/a" if number is None else f"{number:.4g}"


def sentence(record: Mapping[str, Any]) -> str:
    """The check's outcome in one sentence with its numbers (recomputed from them, never stored text).

    Where the record has a pretrained peer (`peer_record`), the sentence ends with the ranking against it.
    """
    said = _constant_sentence(record)
    return said[:-1] + _peer_clause(record) + "." if _part(record, "peer") else said


def _constant_sentence(record: Mapping[str, Any]) -> str:
    """The sentence on the constant alone."""
    test, valid = _part(record, "test"), _part(record, "valid")
    mean = _number(record.get("train_mean"))
    numbers = f"test utterance RMSE {_number(test.get('rmse'))} against {_number(test.get('constant_rmse'))}"
    if valid:
        numbers += f", validation {_number(valid.get('rmse'))} against {_number(valid.get('constant_rmse'))}"
    interval = _interval(test)
    ci = f"[{_number(interval[0])}, {_number(interval[1])}]" if interval else "not computed"
    kind = verdict(record)
    srcc = f"test utterance SRCC {_number(test.get('srcc'))} {ci}"
    # Which side failed: a model better on test but not on validation is no better too.
    failed = " and ".join(
        name for name, part in (("test", test), ("validation", valid)) if _beats(part) is False
    )
    if kind == "ranks_only":
        return (
            f"This model ranks clips better than chance ({srcc}); its levels are no better than the "
            f"training mean {mean}'s on {failed} ({numbers} for the constant): use it to rank, not to "
            "predict absolute scores."
        )
    if kind == "no_better":
        return (
            f"This model predicts no better than the constant training mean {mean} on {failed} (RMSE not "
            f"below the constant's): {numbers} for the constant, and its ranking is not shown better than "
            f"chance ({srcc}); do not rely on its scores."
        )
    if kind == "uncertain":
        return (
            f"This model beats the constant training mean {mean} in RMSE ({numbers} for the constant), "
            f"but its test utterance SRCC interval {ci} does not exclude 0: its ranking may be chance."
        )
    return (
        f"This model beats the constant training mean {mean}: {numbers} for the constant, "
        f"test utterance SRCC interval {ci}."
    )
