"""scoring.stats.ranking: the paired tests, intervals, Holm, tiers and rank agreement, checked
against statsmodels / scipy and against slow plain-loop references."""

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from scoring.errors import SafeVLAError
from scoring.stats.ranking import (holm, mcnemar_exact, newcombe_paired_ci, paired_binary, paired_bootstrap,
                                   rank_agreement, resampled_sums, tier_table)

# (both, only A = b, only B = c, neither)
TABLES = [
    (5, 0, 0, 7),      # b = c = 0: no evidence at all, p = 1
    (0, 0, 0, 1),      # a single concordant pair
    (0, 10, 0, 0),     # all discordant one way
    (3, 0, 12, 1),     # all discordant the other way
    (59, 6, 16, 80),   # Fagerland et al. (2017) ch. 8, Cavo et al. (2012)
    (40, 25, 24, 11),  # balanced discordance
    (0, 1, 0, 0),      # one discordant pair
    (120, 200, 170, 10),
]


def outcomes(both, only_a, only_b, neither, *, seed=0):
    a = np.array([1] * both + [1] * only_a + [0] * only_b + [0] * neither, dtype=bool)
    b = np.array([1] * both + [0] * only_a + [1] * only_b + [0] * neither, dtype=bool)
    order = np.random.default_rng(seed).permutation(a.size)  # order of keys must not matter
    return a[order], b[order]


@pytest.mark.parametrize("table", TABLES)
def test_exact_mcnemar_equals_statsmodels(table):
    expected = mcnemar(np.array([[table[0], table[1]], [table[2], table[3]]]), exact=True).pvalue
    res = paired_binary(*outcomes(*table))
    assert (res.both, res.only_a, res.only_b, res.neither) == table
    assert res.p_value == pytest.approx(expected, rel=1e-12, abs=0)
    assert mcnemar_exact(table[1], table[2]) == pytest.approx(expected, rel=1e-12, abs=0)
    # the exact McNemar test is the two-sided binomial test on the discordant pairs
    if table[1] + table[2]:
        assert res.p_value == pytest.approx(stats.binomtest(table[1], table[1] + table[2]).pvalue, rel=1e-12)


def test_mcnemar_edge_values():
    assert paired_binary(*outcomes(5, 0, 0, 7)).p_value == 1.0
    assert paired_binary(*outcomes(0, 10, 0, 0)).p_value == pytest.approx(2 * 0.5 ** 10)


def test_newcombe_matches_published_example():
    # Fagerland, Lydersen & Laake (2017), chapter 8 (Cavo et al. 2012): -0.0621 (-0.1186 to -0.0046)
    res = paired_binary(*outcomes(59, 6, 16, 80))
    assert res.diff == pytest.approx(-10 / 161)
    assert (round(res.diff_lo, 4), round(res.diff_hi, 4)) == (-0.1186, -0.0046)


@pytest.mark.parametrize("table", TABLES)
def test_newcombe_interval_is_sane(table):
    res = paired_binary(*outcomes(*table))
    assert -1 <= res.diff_lo <= res.diff <= res.diff_hi <= 1
    lo, hi = newcombe_paired_ci(*table, confidence=0.99)
    assert lo <= res.diff_lo and hi >= res.diff_hi  # a higher level widens the interval
    if table[1] == table[2]:
        assert res.diff_lo < 0 < res.diff_hi


def test_newcombe_vectorises():
    t = np.array(TABLES).T
    lo, hi = newcombe_paired_ci(*t)
    for j, table in enumerate(TABLES):
        assert (lo[j], hi[j]) == pytest.approx(newcombe_paired_ci(*table))


def slow_bootstrap(a, b, *, n_resamples, seed, strata=None):
    """Reference: a plain loop over resamples (within strata), percentile interval."""
    rng = np.random.default_rng(seed)
    d = np.asarray(a, float) - np.asarray(b, float)
    strata = np.zeros(d.size, int) if strata is None else np.asarray(strata)
    groups = [np.flatnonzero(strata == s) for s in np.unique(strata)]
    means = np.empty(n_resamples)
    for r in range(n_resamples):
        total = 0.0
        for rows in groups:
            total += d[rows[rng.integers(0, rows.size, rows.size)]].sum()
        means[r] = total / d.size
    return np.percentile(means, [2.5, 97.5])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_paired_bootstrap_agrees_with_slow_reference(seed):
    rng = np.random.default_rng(seed)
    n = 80
    a = np.where(rng.random(n) < 0.6, 0.0, rng.beta(2, 5, n))  # VSI-like: many exact zeros
    b = np.where(rng.random(n) < 0.5, 0.0, rng.beta(2, 4, n))
    res = paired_bootstrap(a, b, n_resamples=10_000, seed=seed)
    lo, hi = slow_bootstrap(a, b, n_resamples=10_000, seed=100 + seed)
    width = hi - lo
    assert res.diff == pytest.approx((a - b).mean())
    # independent Monte-Carlo runs: the 2.5/97.5 % quantiles agree to ~1% of the width (SE);
    # 5% is about five standard errors
    assert abs(res.diff_lo - lo) < 0.05 * width and abs(res.diff_hi - hi) < 0.05 * width
    ref = stats.bootstrap((a, b), lambda x, y, axis=-1: (x - y).mean(axis=axis), paired=True, vectorized=True,
                          n_resamples=10_000, method="percentile", rng=np.random.default_rng(seed))
    assert abs(res.diff_lo - ref.confidence_interval.low) < 0.05 * width
    assert abs(res.diff_hi - ref.confidence_interval.high) < 0.05 * width


def test_stratified_bootstrap_agrees_with_slow_reference():
    rng = np.random.default_rng(7)
    strata = np.repeat(["libero-10", "libero-goal", "libero-object"], [30, 50, 20])
    shift = pd.Series(strata).map({"libero-10": 0.3, "libero-goal": 0.0, "libero-object": 0.1}).to_numpy()
    a = rng.random(100) * 0.2 + shift
    b = rng.random(100) * 0.2
    res = paired_bootstrap(a, b, strata=strata, n_resamples=10_000, seed=3)
    lo, hi = slow_bootstrap(a, b, n_resamples=10_000, seed=4, strata=strata)
    width = hi - lo
    assert abs(res.diff_lo - lo) < 0.05 * width and abs(res.diff_hi - hi) < 0.05 * width
    # stratifying removes the between-suite variance: narrower than the pooled bootstrap
    pooled = paired_bootstrap(a, b, n_resamples=10_000, seed=3)
    assert res.diff_hi - res.diff_lo < pooled.diff_hi - pooled.diff_lo


def test_bootstrap_covers_true_difference():
    rng = np.random.default_rng(11)
    a = rng.normal(0.30, 0.10, 400)
    b = a - 0.10 + rng.normal(0.0, 0.05, 400)  # true mean difference 0.10
    res = paired_bootstrap(a, b, n_resamples=10_000, seed=0)
    assert res.diff_lo < 0.10 < res.diff_hi and res.p_value < 1e-3
    same = paired_bootstrap(a, a, n_resamples=1000, seed=0)
    assert (same.diff, same.diff_lo, same.diff_hi, same.p_value) == (0.0, 0.0, 0.0, 1.0)


def test_resampled_sums_has_the_plain_bootstrap_distribution():
    """The mode shortcut must leave the distribution of resampled sums unchanged."""
    rng = np.random.default_rng(5)
    n, B = 50, 20_000
    values = np.zeros((n, 2))
    hot = rng.random(n) < 0.3
    values[hot] = rng.random((hot.sum(), 2))
    fast = resampled_sums(values, n_resamples=B, seed=1)
    slow = np.array([values[rng.integers(0, n, n)].sum(axis=0) for _ in range(B)])
    assert fast.mean(axis=0) == pytest.approx(n * values.mean(axis=0), rel=0.02)
    assert fast.std(axis=0) == pytest.approx(slow.std(axis=0), rel=0.05)
    for q in (2.5, 50, 97.5):
        assert np.percentile(fast, q, axis=0) == pytest.approx(np.percentile(slow, q, axis=0), rel=0.05)
    # reproducible, and the stream name changes the draws
    assert np.array_equal(fast, resampled_sums(values, n_resamples=B, seed=1))
    assert not np.array_equal(fast, resampled_sums(values, n_resamples=B, seed=1, stream="libero-10"))
    const = resampled_sums(np.full((10, 3), 0.25), n_resamples=5)
    assert np.allclose(const, 2.5)
    dense = resampled_sums(np.arange(7.0), n_resamples=3000, seed=0)[:, 0]  # every row distinct
    assert dense.mean() == pytest.approx(21.0, rel=0.02) and dense.min() >= 0 and dense.max() <= 42


def test_bootstrap_rejects_bad_input():
    with pytest.raises(SafeVLAError, match="one length"):
        paired_bootstrap([0.1, 0.2], [0.1])
    with pytest.raises(SafeVLAError, match="finite"):
        paired_bootstrap([0.1, np.nan], [0.1, 0.2])
    with pytest.raises(SafeVLAError, match="n_resamples"):
        paired_bootstrap([0.1, 0.2], [0.1, 0.3], n_resamples=0)
    with pytest.raises(SafeVLAError, match="one length"):
        paired_binary([True], [True, False])


def test_holm_equals_statsmodels():
    p = np.array([0.01, 0.04, 0.03, 0.2, 0.001, 0.049])
    assert np.array_equal(holm(p), multipletests(p, method="holm")[1])
    assert holm([]).size == 0


def _pairs(values, p_holm, metric="sr", group="overall"):
    rates = pd.DataFrame([{"group": group, "metric": metric, "model": m, "position": j, "value": v}
                          for j, (m, v) in enumerate(values.items())])
    pairs = pd.DataFrame([{"group": group, "metric": metric, "model_a": a, "model_b": b, "p_holm": p}
                          for (a, b), p in p_holm.items()])
    return rates, pairs


def test_tiers_compare_with_the_tier_top():
    rates, pairs = _pairs({"a": 0.90, "b": 0.85, "c": 0.80}, {("a", "b"): 0.2, ("a", "c"): 0.01, ("b", "c"): 0.3})
    t = tier_table(rates, pairs).set_index("model")
    assert t.loc[["a", "b", "c"], "tier"].tolist() == [1, 1, 2]  # c differs from the top (a), not from b
    rates, pairs = _pairs({"a": 0.90, "b": 0.85, "c": 0.80}, {("a", "b"): 0.01, ("a", "c"): 0.01, ("b", "c"): 0.3})
    t = tier_table(rates, pairs).set_index("model")
    assert t.loc[["a", "b", "c"], "tier"].tolist() == [1, 2, 2]  # b opens tier 2 and c stays with it
    assert t.loc[["a", "b", "c"], "rank"].tolist() == [1, 2, 3]


def test_tiers_respect_direction_and_ties():
    # lower is better for VSI; equal values keep the caller's model order
    rates, pairs = _pairs({"a": 0.2, "b": 0.1, "c": 0.1}, {("a", "b"): 0.001, ("a", "c"): 0.001, ("b", "c"): 1.0},
                          metric="vsi")
    t = tier_table(rates, pairs)
    assert t["model"].tolist() == ["b", "c", "a"] and t["tier"].tolist() == [1, 1, 2]


def test_kendall_tau_and_rank_flips():
    sr = {"a": 0.95, "b": 0.90, "c": 0.80, "d": 0.70}
    safety = {"a": 0.70, "b": 0.90, "c": 0.85, "d": 0.60}  # SR order a>b>c>d, Safety order b>c>a>d
    rates = pd.concat([_pairs(sr, {}, "sr")[0], _pairs(safety, {}, "safety")[0]], ignore_index=True)
    p = {(x, y): (0.01 if (x, y) == ("a", "b") else 0.5) for i, x in enumerate(sr) for y in list(sr)[i + 1:]}
    pairs = pd.concat([_pairs(sr, p, "sr")[1], _pairs(safety, p, "safety")[1]], ignore_index=True)
    agreement, flips = rank_agreement(rates, pairs)
    expected = stats.kendalltau(list(sr.values()), list(safety.values()))
    assert agreement.loc[0, "tau"] == pytest.approx(expected.statistic)
    assert agreement.loc[0, "p_value"] == pytest.approx(expected.pvalue)
    assert sorted(zip(flips["model_1"], flips["model_2"])) == [("a", "b"), ("a", "c")]
    assert agreement.loc[0, "n_flips"] == 2 and agreement.loc[0, "n_significant_flips"] == 1
    assert flips.set_index("model_2").loc["b", "significant"]
    assert "a > b by SR, reverse by Safety" in agreement.loc[0, "flips"]
    with pytest.raises(SafeVLAError, match="valid choices"):
        rank_agreement(rates, pairs, y="speed")
