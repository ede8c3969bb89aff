"""Calibration of the statistics by simulation: interval coverage and the false-positive rate.

Each simulated data set is a test set of its own, so one `evaluate_sets` (or `compare`) call
scores them all. The population values are known in closed form: predictions are the true MOS
plus independent Gaussian errors, so the population RMSE is the error's standard deviation and
the population Pearson correlation is sd(true) / sqrt(sd(true)² + sd(error)²).
"""

from __future__ import annotations

import numpy as np
import pytest

from sqa import metrics
from sqa.reports import compare

SIMULATIONS = 400
CLIPS = 80
SYSTEMS = 16
SD_TRUE, SD_ERROR = 0.8, 0.5
# Binomial standard error of a 95 % rate over 400 simulations: 1.1 points; the tolerance is
# about three of them. A 90 % interval covers about 89 % and falls outside.
COVERAGE_TOLERANCE = 0.035
# Two equally good runs: the share called significant should be the nominal 5 % (measured: 5.5 %
# of clip-level comparisons; 1 % if the runs were resampled independently instead of paired).
# The system level, 16 systems a set, is conservative (measured 1.75 %).
FALSE_POSITIVE_RANGE = {"utt": (0.02, 0.08), "sys": (0.01, 0.08)}


def simulated(rng: np.random.Generator, runs: int) -> tuple[list[np.ndarray], np.ndarray, list, list]:
    """`runs` prediction sets and the true MOS (SIMULATIONS · CLIPS,), systems and set names."""
    true = 3.0 + SD_TRUE * rng.standard_normal((SIMULATIONS, CLIPS))
    preds = [(true + SD_ERROR * rng.standard_normal(true.shape)).ravel() for _ in range(runs)]
    names = [f"sim{s:03d}" for s in range(SIMULATIONS)]
    sets = np.repeat(names, CLIPS).tolist()
    systems = [f"{name}-{i % SYSTEMS}" for name in names for i in range(CLIPS)]
    return preds, true.ravel(), systems, sets


# Thousands of bootstrap intervals each: with the slow tests, as the default run is at its budget.
@pytest.mark.slow
def test_95_percent_intervals_cover_the_population_value_95_percent_of_the_time():
    (pred,), true, systems, sets = simulated(np.random.default_rng(0), 1)
    results = metrics.evaluate_sets(list(pred), list(true), systems, sets, bootstrap=500, seed=1)
    population = {"rmse": SD_ERROR, "lcc": SD_TRUE / np.hypot(SD_TRUE, SD_ERROR)}
    for key, value in population.items():
        covered = [
            results[s]["ci"]["utt"][key][0] <= value <= results[s]["ci"]["utt"][key][1]
            for s in sorted(set(sets))
        ]
        assert abs(np.mean(covered) - 0.95) <= COVERAGE_TOLERANCE, (key, np.mean(covered))


@pytest.mark.slow
def test_two_equally_good_runs_differ_significantly_at_about_the_nominal_rate():
    (pred_a, pred_b), true, systems, sets = simulated(np.random.default_rng(1), 2)
    result = compare.compare(list(pred_a), list(pred_b), list(true), systems, sets, resamples=500, seed=2)
    names = sorted(set(sets))
    for level in ("utt", "sys"):
        significant = np.mean([result[s][level]["significant"] for s in names])
        small_p = np.mean([result[s][level]["p"] < 0.05 for s in names])
        low, high = FALSE_POSITIVE_RANGE[level]
        assert low <= significant <= high, (level, significant)
        assert low <= small_p <= high, (level, small_p)
