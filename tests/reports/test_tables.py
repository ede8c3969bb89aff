"""The footnote of a results table: what its intervals are and when a value has none."""

from __future__ import annotations

import numpy as np

from sqa import metrics
from sqa.reports import tables


def results(bootstrap: int) -> dict:
    rng = np.random.default_rng(0)
    true = rng.uniform(1, 5, 60)
    systems = [f"s{i % 12}" for i in range(60)]
    return metrics.evaluate_sets(true + rng.normal(0, 0.5, 60), true, systems, ["test1"] * 60, bootstrap)


def test_the_interval_note_says_what_is_resampled_and_how_many_points_each_metric_needs(monkeypatch):
    note = tables.interval_note()
    assert note.startswith("[lo, hi]: bootstrap 95 % intervals, resampling clips (utterance level) or")
    assert "from this many clips or systems: RMSE and MSE 2; LCC, SRCC, KTAU and PAIR_ACC 8 (" in note
    # The counts are the ones the intervals are computed with.
    monkeypatch.setattr(tables, "MIN_INTERVAL_POINTS", {"lcc": 8, "srcc": 5, "ktau": 8, "pair_acc": 8})
    assert "RMSE and MSE 2; SRCC 5; LCC, KTAU and PAIR_ACC 8 (" in tables.interval_note()


def test_a_table_ends_with_the_note_only_where_it_has_intervals():
    assert tables.format_table(results(50)).splitlines()[-1] == tables.interval_note()
    assert "[lo, hi]" not in tables.format_table(results(0))
