"""sqa-bench's four files read back: every column and key of each row, as `write_outputs` writes them."""

from __future__ import annotations

import csv
import json
import math
from types import SimpleNamespace

import pytest

from sqa import metrics
from sqa.baselines.bench_outputs import PREDICTION_COLUMNS, write_outputs
from sqa.reports import tables


def scored_row(predictor: str, kind: str, pred: list[float], notes: list[str], bootstrap: int) -> dict:
    """One table row over 8 clips of 4 systems in one test set, its results from `metrics.evaluate_sets`."""
    true = [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5]
    systems = ["a", "a", "b", "b", "c", "c", "d", "d"]
    results = metrics.evaluate_sets(pred, true, systems, ["test"] * 8, bootstrap=bootstrap, seed=3)
    rows = [
        {"sample_id": f"c{i}", "system_id": s, "test_set": "test", "mos": t, "raw": p - 0.5, "pred": p}
        for i, (p, t, s) in enumerate(zip(pred, true, systems, strict=True))
    ]
    return {
        "corpus": "songs",
        "predictor": predictor,
        "kind": kind,
        "results": results,
        "rows": rows,
        "scale_map": {"a": 1.0, "b": 0.0} if kind == "in-corpus" else None,
        "train_mean": 2.75 if kind == "constant" else None,
        "notes": notes,
    }


def read_csv(path) -> list[dict[str, str]]:
    """The rows of a CSV file as dicts of text."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_every_file_holds_every_rows_values(tmp_path):
    out = tmp_path / "bench"
    out.mkdir()
    config = SimpleNamespace(
        path=tmp_path / "bench.yaml",
        bootstrap=50,
        seed=3,
        corpora=[
            SimpleNamespace(
                name="songs",
                options=SimpleNamespace(corpus="csv", manifest=tmp_path / "songs.csv"),
                test="valid",
            )
        ],
    )
    learner = scored_row(
        "mine", "in-corpus", [1.2, 1.4, 2.2, 2.4, 2.9, 3.6, 4.1, 4.4], ["two notes", "here"], 50
    )
    # The constant: no interval, every correlation undefined, no notes.
    constant = scored_row("constant", "constant", [2.75] * 8, [], 0)
    write_outputs(out, config, [learner, constant], 12.5)

    record = json.loads((out / "bench.json").read_text(encoding="utf-8"))
    assert (record["config"], record["bootstrap"], record["seed"]) == (str(config.path.resolve()), 50, 3)
    assert [set(r) for r in record["rows"]] == [
        {"corpus", "predictor", "kind", "train_mean", "scale_map", "notes", "results"}
    ] * 2
    assert record["rows"][1]["train_mean"] == 2.75 and record["rows"][0]["scale_map"] == {"a": 1.0, "b": 0.0}

    lines = read_csv(out / "bench.csv")
    assert [(r["corpus"], r["predictor"], r["kind"], r["clips"], r["systems"]) for r in lines] == [
        ("songs", "mine", "in-corpus", "8", "4"),
        ("songs", "constant", "constant", "8", "4"),
    ]
    average = learner["results"]["avg"]
    for level in metrics.LEVELS:
        for name in metrics.METRIC_NAMES:
            lo, hi = average["ci"][level][name] or (math.nan, math.nan)
            got = [float(lines[0][f"{level}_{name}{end}"] or "nan") for end in ("", "_lo", "_hi")]
            assert got == pytest.approx([average[level][name], lo, hi], nan_ok=True), (level, name)
    assert float(lines[0]["utt_rmse_lo"]) < float(lines[0]["utt_rmse_hi"])
    # Without an interval both ends are empty (NaN).
    assert (lines[1]["utt_rmse_lo"], lines[1]["utt_rmse_hi"]) == ("", "")
    reasons = tables.bench_reasons(constant["results"], metrics.METRIC_NAMES)
    expected = "; ".join(
        f"{level} {', '.join(names)}: {reason}"
        for level, by in reasons.items()
        for reason, names in by.items()
    )
    assert "utt lcc, srcc" in expected and lines[1]["undefined"] == expected
    assert lines[0]["undefined"] == "" and (lines[0]["notes"], lines[1]["notes"]) == ("two notes; here", "")

    predictions = read_csv(out / "bench_predictions.csv")
    assert list(predictions[0]) == list(PREDICTION_COLUMNS)
    assert len(predictions) == 16
    assert predictions[9] == {
        "predictor": "constant",
        "corpus": "songs",
        "sample_id": "c1",
        "system_id": "a",
        "test_set": "test",
        "mos": "1.5",
        "raw": "2.25",
        "pred": "2.75",
    }

    info = json.loads((out / "run_info.json").read_text(encoding="utf-8"))
    assert info["command"] == "sqa-bench" and info["config"] == str(config.path.resolve())
    assert info["corpora"] == {
        "songs": {"corpus": "csv", "source": str(tmp_path / "songs.csv"), "test": "valid"}
    }
    assert info["seconds"] == 12.5 and "torch" in info["packages"]
