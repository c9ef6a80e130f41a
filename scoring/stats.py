"""Confidence intervals (paper Appendix E): Wilson for proportions, bootstrap for means."""

from __future__ import annotations

import numpy as np
from scipy import stats as _st


def wilson_interval(k, n, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for k successes in n trials, as fractions in [0, 1].

    Vectorises: array `k`/`n` give a pair of arrays. n == 0 gives (nan, nan).
    """
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if np.any(k < 0) or np.any(k > n):
        raise ValueError(f"expected 0 <= k <= n, got k={k}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"expected confidence in (0, 1), got {confidence}")
    z = _st.norm.ppf(0.5 + confidence / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = k / n
        denom = 1 + z * z / n
        centre = (p + z * z / (2 * n)) / denom
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
        lo = np.clip(centre - half, 0.0, 1.0)
        hi = np.clip(centre + half, 0.0, 1.0)
    # At p = 0 or 1 the bound is exact in theory; clip away the 1e-17 rounding residue.
    lo = np.where((k == 0) & (n > 0), 0.0, lo)
    hi = np.where((k == n) & (n > 0), 1.0, hi)
    if lo.ndim == 0:
        return float(lo), float(hi)
    return lo, hi


def bootstrap_ci(values, *, n_resamples: int = 10_000, confidence: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Episode-level percentile bootstrap CI of the mean (scipy.stats.bootstrap).

    Fixed `seed` makes it reproducible. Fewer than two values, or all-equal values, give
    the degenerate interval (mean, mean); no values give (nan, nan).
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    if x.size == 0:
        return float("nan"), float("nan")
    if not np.isfinite(x).all():
        raise ValueError("bootstrap_ci expects finite values")
    if x.size < 2 or np.all(x == x[0]):
        m = float(x.mean())
        return m, m
    res = _st.bootstrap((x,), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                        method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)
