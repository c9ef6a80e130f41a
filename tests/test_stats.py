import numpy as np
import pytest

from scoring.stats.intervals import bootstrap_ci, wilson_interval

# Table 12 of the paper: (successes, n) -> Wilson 95% CI in percent, one decimal.
TABLE_12 = [
    (15, 20, (53.1, 88.8)), (18, 20, (69.9, 97.2)), (17, 20, (64.0, 94.8)), (20, 20, (83.9, 100.0)),
    (13, 20, (43.3, 81.9)), (19, 20, (76.4, 99.1)), (16, 20, (58.4, 91.9)), (12, 20, (38.7, 78.1)),
    (7, 20, (18.1, 56.7)), (167, 200, (77.7, 88.0)), (156, 200, (71.8, 83.2)),
]


@pytest.mark.parametrize("k,n,expected", TABLE_12)
def test_wilson_matches_table_12(k, n, expected):
    lo, hi = wilson_interval(k, n)
    assert (round(100 * lo, 1), round(100 * hi, 1)) == expected


@pytest.mark.parametrize("k,n,lo,hi", [(0, 20, 0.0, 0.16113), (20, 20, 0.83887, 1.0), (0, 1, 0.0, 0.79346),
                                      (1, 1, 0.20654, 1.0)])
def test_wilson_edge_rows(k, n, lo, hi):
    got = wilson_interval(k, n)
    assert got[0] == pytest.approx(lo, abs=1e-5) and got[1] == pytest.approx(hi, abs=1e-5)


def test_wilson_vectorises_like_scalars():
    k = np.array([0, 3, 15, 20])
    n = np.array([20, 20, 20, 20])
    lo, hi = wilson_interval(k, n)
    for i in range(4):
        assert (lo[i], hi[i]) == wilson_interval(int(k[i]), int(n[i]))


def test_wilson_rejects_impossible_counts():
    with pytest.raises(ValueError, match="0 <= k <= n"):
        wilson_interval(21, 20)
    assert all(np.isnan(wilson_interval(0, 0)))


def _slow_percentile_bootstrap(x, n_resamples, confidence, rng):
    means = np.array([rng.choice(x, size=x.size, replace=True).mean() for _ in range(n_resamples)])
    alpha = (1 - confidence) / 2
    return np.percentile(means, [100 * alpha, 100 * (1 - alpha)])


def test_bootstrap_is_seeded_and_agrees_with_a_slow_reference():
    x = np.random.default_rng(7).exponential(0.1, 200)
    a = bootstrap_ci(x, seed=3)
    assert a == bootstrap_ci(x, seed=3)
    assert a != bootstrap_ci(x, seed=4)
    ref = _slow_percentile_bootstrap(x, 10_000, 0.95, np.random.default_rng(0))
    assert a[0] == pytest.approx(ref[0], rel=0.03) and a[1] == pytest.approx(ref[1], rel=0.03)
    assert a[0] < x.mean() < a[1]


def test_bootstrap_degenerate_inputs():
    assert np.isnan(bootstrap_ci([])).all()
    assert bootstrap_ci([0.3]) == (0.3, 0.3)
    assert bootstrap_ci([0.0] * 50) == (0.0, 0.0)
    with pytest.raises(ValueError, match="finite"):
        bootstrap_ci([0.1, np.inf])


def _scipy_percentile_bootstrap(x, *, n_resamples, confidence, seed):
    """The straightforward computation `bootstrap_ci` replaced (scipy.stats.bootstrap)."""
    from scipy import stats

    res = stats.bootstrap((np.asarray(x, float),), np.mean, n_resamples=n_resamples, confidence_level=confidence,
                          method="percentile", vectorized=True, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


@pytest.mark.parametrize("n,n_resamples,confidence,seed", [
    (2, 500, 0.95, 0), (37, 2_000, 0.9, 5), (1_250, 10_000, 0.95, 0), (3_001, 1_000, 0.99, 11)])
def test_bootstrap_equals_scipy_bit_for_bit(n, n_resamples, confidence, seed):
    rng = np.random.default_rng(n)
    x = np.where(rng.random(n) < 0.6, 0.0, rng.random(n))  # VSI-like: mostly zeros, some depth
    assert bootstrap_ci(x, n_resamples=n_resamples, confidence=confidence, seed=seed) == \
        _scipy_percentile_bootstrap(x, n_resamples=n_resamples, confidence=confidence, seed=seed)


def test_bootstrap_means_do_not_depend_on_the_chunk_size(monkeypatch):
    import scoring.stats.intervals as S

    x = np.random.default_rng(3).random(999)
    whole = S.bootstrap_means(x, n_resamples=700, rng=np.random.default_rng(1))
    monkeypatch.setattr(S, "_CHUNK_ELEMENTS", 3 * 999 + 5)  # 3 rows per chunk, a ragged last chunk
    chunked = S.bootstrap_means(x, n_resamples=700, rng=np.random.default_rng(1))
    assert np.array_equal(whole, chunked)
    assert chunked.std() > 0


@pytest.mark.parametrize("confidence", [0.5, 0.8, 0.9, 0.95, 0.99, 0.999])
def test_wilson_z_is_scipys_normal_quantile(confidence):
    from scipy import stats

    import scoring.stats.intervals as S

    assert S._z(confidence) == float(stats.norm.ppf(0.5 + confidence / 2))
