"""sqa.core.spread against scipy.stats's own distributions on the same inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sqa.core import spread

SCIPY = {"gaussian": stats.norm, "laplace": stats.laplace}


@pytest.mark.parametrize("distribution", spread.DISTRIBUTIONS)
@pytest.mark.parametrize("level", [0.05, 0.5, 0.9, 0.999])
def test_intervals_are_scipys_central_intervals(distribution, level):
    mean = np.array([1.5, 3.0, 4.2])
    scale = np.array([0.3, 1.0, 2.5])  # a spread under, at and over 1, so a division shows
    low, high = spread.interval(mean, scale, level, distribution)
    ref_low, ref_high = SCIPY[distribution].interval(level, loc=mean, scale=scale)
    np.testing.assert_allclose(low, ref_low, rtol=1e-12)
    np.testing.assert_allclose(high, ref_high, rtol=1e-12)


@pytest.mark.parametrize("level", [0.0, 1.0, -0.1, 1.5])
def test_a_level_outside_the_open_unit_interval_is_refused_on_both_sides(level):
    with pytest.raises(ValueError, match=rf"an interval level must be in \(0, 1\), got {level}"):
        spread.quantile_factor(level, "gaussian")


def test_a_level_just_inside_the_bounds_is_accepted():
    assert spread.quantile_factor(1e-9, "laplace") == pytest.approx(1e-9)
    # Bisection on math.erf, whose tail loses relative precision: 1e-7 of scipy's quantile.
    assert spread.quantile_factor(1 - 1e-6, "gaussian") == pytest.approx(stats.norm.ppf(1 - 0.5e-6), rel=1e-7)


def test_an_unknown_distribution_is_named_in_its_error():
    with pytest.raises(
        ValueError, match=r"distribution must be one of \('gaussian', 'laplace'\), got 'cauchy'"
    ):
        spread.check_distribution("cauchy")


@pytest.mark.parametrize("distribution", spread.DISTRIBUTIONS)
def test_nll_is_minus_scipys_log_density(distribution):
    value = np.array([1.0, 2.0, 5.0, 3.3])
    mean = np.array([2.5, 2.0, 1.5, 4.0])  # above, at and below the value
    scale = np.array([0.4, 1.0, 2.0, 0.7])
    got = spread.nll(value, mean, scale, distribution)
    np.testing.assert_allclose(got, -SCIPY[distribution].logpdf(value, loc=mean, scale=scale), rtol=1e-12)


def test_pooled_is_the_weighted_rms_of_the_spreads():
    # Unequal weights and spreads: √((1·0.5² + 3·2²) / 4) = √(12.25 / 4).
    assert spread.pooled(np.array([0.5, 2.0]), np.array([1.0, 3.0])) == pytest.approx(math.sqrt(12.25 / 4))
    assert spread.pooled(np.array([0.5, 2.0]), np.array([3.0, 1.0])) == pytest.approx(math.sqrt(4.75 / 4))


def test_probabilities_are_scipys_normal_cdf_and_a_scalar_gives_a_float():
    diff = np.array([-1.2, 0.0, 0.3, 2.0])
    np.testing.assert_allclose(
        spread.probability(diff, 0.7), stats.norm.cdf(diff / (math.sqrt(2) * 0.7)), rtol=1e-12
    )
    one = spread.probability(0.3, 0.7)
    assert type(one) is float and one == pytest.approx(stats.norm.cdf(0.3 / (math.sqrt(2) * 0.7)))
    # A listener's preference: the two clips' rating SDs add in quadrature (a Laplace SD is √2·b).
    for distribution, sd in (
        ("gaussian", math.hypot(0.4, 0.9)),
        ("laplace", math.sqrt(2) * math.hypot(0.4, 0.9)),
    ):
        got = spread.listener_probability(diff, 0.4, 0.9, distribution)
        np.testing.assert_allclose(got, stats.norm.cdf(diff / sd), rtol=1e-12)
