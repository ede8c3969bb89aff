"""Fixtures of the report tests."""

from __future__ import annotations

import pytest

from sqa import metrics


@pytest.fixture
def drawn(monkeypatch):
    """The index arrays (R, n) that compare draws, in the order it draws them."""
    record = []
    real = metrics.bootstrap_indices

    def recording(rng, n, resamples):
        record.append(real(rng, n, resamples))
        return record[-1]

    monkeypatch.setattr(metrics, "bootstrap_indices", recording)
    return record
