"""Rating distributions about a predicted score: central intervals and log-likelihoods.

A predicted spread (`Prediction.spread`) is the standard deviation of a Gaussian or the scale b
of a Laplace distribution of one listener's rating about the predicted mean. Shared by the
uncertainty family (`sqa.models.uncertainty`), its calibration report and the scorer.
"""

from __future__ import annotations

import math

import numpy as np

DISTRIBUTIONS = ("gaussian", "laplace")
# The intervals that predictions.csv, calibration.json and sqa-score report, by column suffix.
INTERVAL_LEVELS = {"50": 0.5, "90": 0.9}


def check_distribution(distribution: str) -> str:
    """`distribution` itself if it is one of `DISTRIBUTIONS`; ValueError otherwise."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution must be one of {DISTRIBUTIONS}, got {distribution!r}")
    return distribution


def quantile_factor(level: float, distribution: str) -> float:
    """Half-width of the central `level` interval (0 < level < 1) of a unit-spread distribution."""
    if not 0.0 < level < 1.0:
        raise ValueError(f"an interval level must be in (0, 1), got {level}")
    if check_distribution(distribution) == "gaussian":
        # Φ⁻¹((1 + level) / 2) = √2 · erf⁻¹(level), by bisection on math.erf (no scipy needed).
        low, high = 0.0, 10.0
        for _ in range(200):
            mid = (low + high) / 2
            low, high = (mid, high) if math.erf(mid / math.sqrt(2.0)) < level else (low, mid)
        return (low + high) / 2
    # Laplace: P(|x - μ| ≤ w) = 1 - exp(-w / b).
    return -math.log1p(-level)


def interval(
    mean: np.ndarray, spread: np.ndarray, level: float, distribution: str
) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the central `level` interval of a rating about `mean` with `spread` (any shape)."""
    half = quantile_factor(level, distribution) * np.asarray(spread, dtype=np.float64)
    mean = np.asarray(mean, dtype=np.float64)
    return mean - half, mean + half


def pooled(spreads: np.ndarray, weights: np.ndarray) -> float:
    """The spread of pieces' spreads (n,) pooled by `weights` (n,): √(Σ w·s² / Σ w), their weighted RMS.

    Scored pieces of one clip (chunked windows weighted by their kept frames, or the domains of
    `domain="mean"` weighted alike) each predict the spread of a listener's rating of their own
    part; the clip's is the root of the weighted mean of their variances, the variance of a
    rating about each part's own mean. The spread of the parts' means about the clip's is left
    out: a listener rates the whole clip once, so its mean is the pooled one, not a random part's.
    A Laplace variance is 2b², whose factor 2 cancels, so the same rule pools Laplace scales.
    """
    spreads, weights = np.asarray(spreads, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    return float(np.sqrt(np.sum(weights * spreads**2) / np.sum(weights)))


def nll(value: np.ndarray, mean: np.ndarray, spread: np.ndarray, distribution: str) -> np.ndarray:
    """Negative log-likelihood (nats, constants included) of `value` under the distribution (any shape)."""
    value, mean, spread = (np.asarray(a, dtype=np.float64) for a in (value, mean, spread))
    if check_distribution(distribution) == "gaussian":
        return 0.5 * np.log(2 * math.pi * spread**2) + 0.5 * ((value - mean) / spread) ** 2
    return np.log(2 * spread) + np.abs(value - mean) / spread


def _normal_cdf(z: float | np.ndarray) -> float | np.ndarray:
    """Φ(z) of standard normal quantiles z (any shape): a float for a scalar, else an array."""
    # Φ(z) = ½·(1 + erf(z/√2)); math.erf per element keeps numpy-only code without scipy.
    p = 0.5 * (1.0 + np.vectorize(math.erf, otypes=[np.float64])(np.asarray(z, np.float64) / math.sqrt(2.0)))
    return float(p) if p.ndim == 0 else p


def probability(difference: float | np.ndarray, sigma: float) -> float | np.ndarray:
    """P(A better) = Φ(difference / (√2·σ)) of score differences A - B (any shape) at residual spread σ."""
    return _normal_cdf(np.asarray(difference, dtype=np.float64) / (math.sqrt(2.0) * sigma))


def listener_probability(
    difference: float | np.ndarray,
    spread_a: float | np.ndarray,
    spread_b: float | np.ndarray,
    distribution: str,
) -> float | np.ndarray:
    """P(a listener rates A above B) = Φ(difference / √(sd_A² + sd_B²)) of clips' rating spreads (any shape).

    A spread is a standard deviation ("gaussian") or a Laplace scale b ("laplace", SD √2·b).
    """
    factor = math.sqrt(2.0) if check_distribution(distribution) == "laplace" else 1.0
    sd = factor * np.hypot(spread_a, spread_b)
    return _normal_cdf(np.asarray(difference, dtype=np.float64) / sd)
