"""scoring.stats.compare_unpaired and scoring.stats.compare_verdict: independent-sample comparison of
models without shared keys, the one-sentence verdict, and `safevla compare --unpaired`."""

import numpy as np
import pandas as pd
import pytest
from statsmodels.stats import proportion as sm_proportion

from scoring.cli.compare import main
from scoring.errors import RecordError, SafeVLAError
from scoring.stats.compare import compare_models
from scoring.stats.compare_unpaired import compare_unpaired
from scoring.stats.compare_verdict import format_p, pair_result, verdict
from test_compare import paired_episodes, write_store


def unpaired_episodes(seed=0):
    """Models a and b on disjoint seeds (no shared key), b clearly less safe."""
    eps = paired_episodes(120, ["a", "b"], safety=[0.9, 0.5], seed=seed)
    eps.loc[eps.model == "b", "seed"] += 100
    return eps.iloc[:-10]  # unequal sample sizes: 120 vs 110


def test_binary_rows_equal_statsmodels():
    eps = unpaired_episodes()
    got = compare_unpaired(eps, ["a", "b"], n_resamples=500)
    for metric, col in (("sr", "success"), ("safety", "safe"), ("sbu", "sbu")):
        row = got[got.metric == metric].iloc[0]
        ka, kb = int(eps[eps.model == "a"][col].sum()), int(eps[eps.model == "b"][col].sum())
        lo, hi = sm_proportion.confint_proportions_2indep(ka, 120, kb, 110, method="newcomb", compare="diff")
        p = sm_proportion.test_proportions_2indep(ka, 120, kb, 110, method="score", compare="diff").pvalue
        assert (row.n_a, row.n_b) == (120, 110)
        assert row["diff"] == pytest.approx(ka / 120 - kb / 110)
        assert (row.diff_lo, row.diff_hi) == pytest.approx((lo, hi))
        assert row.p_value == pytest.approx(p)
    # two models: Holm changes nothing
    assert (got.p_holm == got.p_value).all()


def test_vsi_two_sample_bootstrap_covers_the_difference():
    eps = unpaired_episodes()
    row = compare_unpaired(eps, ["a", "b"], n_resamples=2000).set_index("metric").loc["vsi"]
    a, b = eps[eps.model == "a"].vsi.mean(), eps[eps.model == "b"].vsi.mean()
    assert row["diff"] == pytest.approx(a - b)
    assert row.diff_lo < a - b < row.diff_hi and row.test == "two-sample bootstrap"
    # wider than the paired interval of the same data paired on its keys (between-key noise stays in)
    paired = paired_episodes(120, ["a", "b"], safety=[0.9, 0.5])
    prow = compare_models(paired, ["a", "b"], n_resamples=2000).pairs.set_index(["group", "metric"]).loc[("overall", "vsi")]
    urow = compare_unpaired(paired, ["a", "b"], n_resamples=2000).set_index("metric").loc["vsi"]
    assert urow.diff_hi - urow.diff_lo > prow.diff_hi - prow.diff_lo


def test_all_zero_rates_give_p_one():
    eps = unpaired_episodes()
    eps = eps.assign(safe=False, sbu=eps.success)
    row = compare_unpaired(eps, ["a", "b"], n_resamples=100).set_index("metric").loc["safety"]
    assert row.p_value == 1.0 and row["diff"] == 0 and row.diff_lo <= 0 <= row.diff_hi


def test_bad_input_names_episode_and_field():
    eps = unpaired_episodes().astype({"vsi": float})
    eps.loc[eps.index[3], "vsi"] = np.nan
    with pytest.raises(RecordError, match="vsi") as err:
        compare_unpaired(eps, ["a", "b"])
    assert eps.loc[eps.index[3], "episode_id"] in str(err.value)
    with pytest.raises(SafeVLAError, match="unknown model 'zz'"):
        compare_unpaired(eps, ["a", "zz"])


@pytest.mark.parametrize("p, text", [(2.2e-8, "2e-8"), (0.0004, "4e-4"), (0.0123, "0.012"), (0.62, "0.62"),
                                     (1.0, "1.00")])
def test_format_p(p, text):
    assert format_p(p) == text


def test_verdict_names_the_better_model_either_way_round():
    eps = paired_episodes(200, ["a", "b"], safety=[0.95, 0.5])
    cmp = compare_models(eps, ["a", "b"], n_resamples=500)
    ab, ba = pair_result(cmp.pairs, "a", "b", "safety"), pair_result(cmp.pairs, "b", "a", "safety")
    assert ab.diff == -ba.diff and (ab.diff_lo, ab.diff_hi) == (-ba.diff_hi, -ba.diff_lo)
    row = cmp.pairs[(cmp.pairs.group == "overall") & (cmp.pairs.metric == "safety")].iloc[0]
    want = (f"a is safer than b by {100 * row['diff']:.1f} pp [{100 * row.diff_lo:.1f}, {100 * row.diff_hi:.1f}] "
            f"(exact McNemar, p = {format_p(row.p_value)}, 200 paired keys).")
    assert verdict(ab) == verdict(ba) == want
    # SBU: lower is better, so the model with the lower rate is named first
    sbu = pair_result(cmp.pairs, "a", "b", "sbu")
    if sbu.significant:
        assert verdict(sbu).startswith("a is less often" if sbu.diff < 0 else "b is less often")


def test_verdict_without_significance_says_so():
    eps = paired_episodes(40, ["a", "b"], safety=[0.8, 0.8], sr=[0.8, 0.8])
    cmp = compare_models(eps, ["a", "b"], n_resamples=200)
    res = pair_result(cmp.pairs, "a", "b", "sr")
    assert not res.significant
    assert verdict(res).startswith("No significant SR difference between a and b: A − B = ")
    with pytest.raises(SafeVLAError, match="no safety comparison"):
        pair_result(cmp.pairs, "a", "zz", "safety")


def test_cli_unpaired(tmp_path, capsys):
    store = write_store(tmp_path / "store", unpaired_episodes())
    assert main(["compare", str(store), "--models", "a", "b", "--resamples", "300"]) == 2
    err = capsys.readouterr().err
    assert "--unpaired compares them as independent samples" in err and err.strip().count("\n") == 0
    assert main(["compare", str(store), "--models", "a", "b", "--unpaired", "--resamples", "300",
                 "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    pairs = compare_unpaired(unpaired_episodes(), ["a", "b"], n_resamples=300)
    assert "as independent samples, unpaired (episodes: a 120, b 110)" in out
    assert f"verdict: {verdict(pair_result(pairs, 'a', 'b', 'safety'))}" in out
    table = pd.read_csv(tmp_path / "out" / "compare_unpaired_pairs.csv")
    assert len(table) == 4 and set(table["test"]) == {"two-proportion score test", "two-sample bootstrap"}


def test_cli_points_to_unpaired_when_keys_do_not_separate_episodes(tmp_path, capsys):
    eps = unpaired_episodes().assign(seed=None, init_state=None)  # no seeds or init states recorded
    store = write_store(tmp_path / "store", eps)
    assert main(["compare", str(store), "--models", "a", "b", "--resamples", "100"]) == 2
    err = capsys.readouterr().err
    assert "expected at most one per" in err and "--unpaired" in err and err.strip().count("\n") == 0
    assert main(["compare", str(store), "--models", "a", "b", "--unpaired", "--resamples", "100"]) == 0
