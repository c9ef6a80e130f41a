import numpy as np
import pandas as pd
import pytest

from scoring.metrics import aggregate, outcome_class, sbu_composition, spec_rates

# Table 5 (RoboCasa-365, n = 900): SR and SBU counts, and the P[U|S] the paper reports.
TABLE_5 = [("pi0", 292, 110, 37.7), ("pi0.5", 381, 139, 36.5), ("GR00T-N1.5", 425, 237, 55.8),
           ("RLDX-1-FT-RC365", 526, 208, 39.5)]


def _episodes(model, n, successes, sbu, unsafe_failures=0, vsi=0.3):
    success = np.zeros(n, bool)
    success[:successes] = True
    safe = np.ones(n, bool)
    safe[:sbu] = False
    safe[successes:successes + unsafe_failures] = False
    return pd.DataFrame({"episode_id": [f"{model}/{i}" for i in range(n)], "model": model, "suite": "rc365",
                         "success": success, "safe": safe, "sbu": success & ~safe,
                         "vsi": np.where(safe, 0.0, vsi)})


@pytest.mark.parametrize("model,k_s,k_sbu,p_us", TABLE_5)
def test_p_unsafe_given_success_is_sbu_over_sr(model, k_s, k_sbu, p_us):
    agg = aggregate(_episodes(model, 900, k_s, k_sbu), ci=False).iloc[0]
    assert round(100 * agg["sr"], 1) == round(100 * k_s / 900, 1)
    assert agg["p_unsafe_given_success"] == pytest.approx(agg["sbu"] / agg["sr"])
    assert round(100 * agg["p_unsafe_given_success"], 1) == p_us


def test_two_by_two_safety_and_vsi():
    eps = _episodes("m", 20, 15, 3, unsafe_failures=2, vsi=0.5)
    agg = aggregate(eps, by=("model",), n_resamples=2000).iloc[0]
    assert (agg["n_safe_success"], agg["n_unsafe_success"], agg["n_safe_failure"], agg["n_unsafe_failure"]) == \
        (12, 3, 3, 2)
    assert agg["safety"] == 15 / 20 and agg["sbu"] == 3 / 20
    assert (round(100 * agg["sr_lo"], 1), round(100 * agg["sr_hi"], 1)) == (53.1, 88.8)
    assert agg["vsi"] == pytest.approx(5 * 0.5 / 20) and agg["vsi_u"] == 0.5
    assert agg["vsi_lo"] <= agg["vsi"] <= agg["vsi_hi"]
    assert outcome_class(eps).value_counts().to_dict() == {"safe success": 12, "SBU": 3, "safe failure": 3,
                                                           "unsafe failure": 2}


def test_no_success_gives_nan_p_unsafe_given_success():
    agg = aggregate(_episodes("m", 10, 0, 0, unsafe_failures=4), ci=False).iloc[0]
    assert np.isnan(agg["p_unsafe_given_success"]) and agg["safety"] == 0.6


def _spec_rows(eps, family, active, rho, depth):
    return pd.DataFrame({"episode_id": eps["episode_id"], "family": family, "spec_id": family, "report_only": False,
                         "active": active, "rho": rho, "depth": depth})


def test_spec_rates_and_composition():
    eps = _episodes("m", 10, 8, 4)
    viol = np.array([True] * 4 + [False] * 6)
    disp = _spec_rows(eps, "non_target_max_disp", True, np.where(viol, -0.001, 0.001), np.where(viol, 0.1, 0.0))
    force = _spec_rows(eps, "max_contact_force", True, np.where(np.arange(10) < 2, -50.0, 10.0),
                       np.where(np.arange(10) < 2, 0.1, 0.0))
    tilt = _spec_rows(eps, "held_object_tilt_world", False, np.nan, np.nan)
    specs = pd.concat([disp, force, tilt])
    rates = spec_rates(eps, specs, ci=False).set_index("family")
    assert rates.loc["non_target_max_disp", "rate"] == 0.4 and rates.loc["max_contact_force", "rate"] == 0.2
    assert np.isnan(rates.loc["held_object_tilt_world", "rate"])  # inactive everywhere: "—"
    assert rates.loc["non_target_max_disp", "nsv"] == pytest.approx(0.04)
    comp = sbu_composition(eps, specs).set_index("family")
    assert comp["share"].sum() == pytest.approx(1.0)
    assert comp.loc["non_target_max_disp", "share"] == pytest.approx(4 / 6)
    assert comp.loc["max_contact_force", "violations"] == 2


def test_grouping_by_any_column_and_bad_column():
    eps = pd.concat([_episodes("a", 10, 5, 1), _episodes("b", 10, 9, 2)])
    agg = aggregate(eps, by=("model",), ci=False)
    assert agg["model"].tolist() == ["a", "b"] and agg["n"].tolist() == [10, 10]
    assert aggregate(eps, by=(), ci=False)["n"].tolist() == [20]
    with pytest.raises(KeyError, match="valid columns"):
        aggregate(eps, by=("policy",))
