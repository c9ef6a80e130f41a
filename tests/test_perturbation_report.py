"""scoring.report.perturbation: a base suite against its perturbed variants, paired or unpaired,
the families the change comes from, and the tables and metrics.json entries of `safevla report`."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from scoring.errors import RecordError
from scoring.registry.perturbations import SuitePerturbation
from scoring.report.perturbation import (PAIRED, UNPAIRED, base_vs_variant, perturbation_shifts, perturbation_tables,
                                         shifts_json, suite_of, variants_in)
from scoring.stats.compare_unpaired import compare_unpaired
from test_compare import paired_episodes

BASE, MUG, SWAP = "libero_spatial", "libero_spatial_with_mug", "libero_spatial_swap"
MAP = (3, 0, 1, 2, 4, 5, 6, 7, 9, 8)  # variant task i -> base task MAP[i]


def Variant(suite: str, base_suite: str, family: str, init_states_match: bool,  # noqa: N802 (reads as the type)
            task_map: tuple[int, ...] | None = tuple(range(10))) -> SuitePerturbation:
    """The suite registry's description of a variant, as the report reads it."""
    return SuitePerturbation(suite, base_suite, family, init_states_match, task_map, runnable=True)


def two_suites(n_keys=200, models=("a", "b"), seed=0, **kw):
    """Episodes of `models` on BASE and on one variant, on the same (task, init state, seed) keys."""
    return paired_episodes(2 * n_keys, list(models), suites=(BASE, "variant"), seed=seed, **kw)


def renamed(eps, suite, task_map=None):
    """The "variant" episodes as `suite`, with task ids written as the variant numbers them
    (base task MAP[i] appears as variant task i)."""
    out = eps.copy()
    rows = out["suite"] == "variant"
    out.loc[rows, "suite"] = suite
    out.loc[rows, "benchmark"] = suite
    if task_map is not None:
        inverse = {b: i for i, b in enumerate(task_map)}
        out.loc[rows, "task_id"] = [f"task_{inverse[int(t.split('_')[1])]}" for t in out.loc[rows, "task_id"]]
    out["episode_id"] = out["suite"] + "/" + out["episode_id"]
    return out


def test_a_copy_of_the_base_under_a_task_map_pairs_on_the_mapped_tasks():
    eps = two_suites()
    base = eps[eps.suite == BASE]
    # the variant is the base run again, its tasks numbered by MAP: every paired outcome agrees
    copy = base.assign(suite="variant")
    eps = renamed(pd.concat([base, copy], ignore_index=True), MUG, task_map=MAP)
    s = base_vs_variant(eps, None, "a", Variant(MUG, BASE, "distractor", True, MAP), n_resamples=300)
    assert s.pairing == PAIRED and s.n_pairs == len(base[base.model == "a"])
    assert "task" in s.how and "init state" in s.how
    pairs = s.comparison.pairs
    assert (pairs.dropna(subset=["only_a"])[["only_a", "only_b"]] == 0).all().all()
    assert np.allclose(s.changes["change"], 0)
    # without the map the same episodes pair task i with base task i: discordant pairs appear
    wrong = base_vs_variant(eps, None, "a", Variant(MUG, BASE, "distractor", True), n_resamples=300)
    assert (wrong.comparison.pairs.dropna(subset=["only_a"])["only_a"] > 0).any()


def test_paired_change_is_the_variant_minus_the_base():
    eps = renamed(two_suites(sr=[0.9, 0.6], safety=[0.8, 0.5]), MUG)
    s = base_vs_variant(eps, None, "a", Variant(MUG, BASE, "distractor", True), n_resamples=500)
    mine = eps[eps.model == "a"]
    for metric, col in (("sr", "success"), ("safety", "safe"), ("sbu", "sbu"), ("vsi", "vsi")):
        row = s.changes.set_index("metric").loc[metric]
        base, var = mine[mine.suite == BASE][col].mean(), mine[mine.suite == MUG][col].mean()
        assert (row.base, row.variant) == pytest.approx((base, var))
        assert row.change == pytest.approx(var - base)
        assert row.change_lo <= row.change <= row.change_hi
    assert s.changes.set_index("metric").loc["safety", "test"] == "exact McNemar"


@pytest.mark.parametrize("variant, why", [
    (Variant(SWAP, BASE, "swap", False), "init states differ"),
    (Variant(SWAP, BASE, "swap", True, task_map=None), "tasks do not correspond"),
])
def test_variants_that_do_not_correspond_are_compared_unpaired(variant, why):
    eps = renamed(two_suites(), SWAP)
    s = base_vs_variant(eps, None, "b", variant, n_resamples=400)
    assert s.pairing == UNPAIRED and s.n_pairs is None and s.comparison is None
    assert s.how.startswith("unpaired") and why in s.how
    frame = eps[eps.model == "b"].assign(model=lambda d: d["suite"])
    expected = compare_unpaired(frame, [SWAP, BASE], n_resamples=400).set_index("metric")
    got = s.changes.set_index("metric")
    for metric in ("sr", "safety", "sbu", "vsi"):
        assert got.loc[metric, "change"] == pytest.approx(expected.loc[metric, "diff"])
        assert (got.loc[metric, "change_lo"], got.loc[metric, "change_hi"]) == pytest.approx(
            (expected.loc[metric, "diff_lo"], expected.loc[metric, "diff_hi"]))


def test_a_variant_meant_to_pair_falls_back_and_says_why():
    eps = renamed(two_suites(), MUG)
    eps.loc[eps.suite == MUG, "seed"] += 100  # no key shared
    s = base_vs_variant(eps, None, "a", Variant(MUG, BASE, "distractor", True), n_resamples=200)
    assert s.pairing == UNPAIRED and "not pairable" in s.how


def test_a_task_outside_the_map_names_the_episode_and_field():
    eps = renamed(two_suites(), MUG)
    eps.loc[eps.index[-1], "task_id"] = "task_12"
    with pytest.raises(RecordError, match="task_id") as err:
        base_vs_variant(eps, None, eps.model.iloc[-1], Variant(MUG, BASE, "distractor", True, MAP))
    assert eps.episode_id.iloc[-1] in str(err.value)


def spec_rows(eps, violated):
    """spec_results for two families: force active everywhere, bystander where `violated` says."""
    n = len(eps)
    rows = []
    for fam, rho in (("max_contact_force", np.where(violated["force"], -5.0, 40.0)),
                     ("non_target_max_disp", np.where(violated["disp"], -0.01, 0.002))):
        rows.append(pd.DataFrame({"episode_id": eps["episode_id"].to_numpy(), "family": fam, "spec_id": fam,
                                  "report_only": False, "active": True, "rho": rho, "depth": np.zeros(n)}))
    return pd.concat(rows, ignore_index=True)


def test_the_change_is_traced_to_the_family_whose_rate_moved():
    eps = renamed(two_suites(n_keys=100), MUG)
    var = (eps.suite == MUG).to_numpy()
    rng = np.random.default_rng(1)
    disp = var & (rng.random(len(eps)) < 0.4)  # the mug: bystander pushes only on the variant
    force = rng.random(len(eps)) < 0.1
    spec = spec_rows(eps, {"force": force, "disp": disp})
    s = base_vs_variant(eps, spec, "a", Variant(MUG, BASE, "distractor", True),
                        families=("max_contact_force", "non_target_max_disp"), n_resamples=200)
    fam = s.families.set_index("family")
    mine = (eps.model == "a").to_numpy()
    for name, v in (("max_contact_force", force), ("non_target_max_disp", disp)):
        expected = v[mine & var].mean() - v[mine & ~var].mean()
        assert fam.loc[name, "change"] == pytest.approx(expected)
    assert s.sources().startswith("bystander +")
    table = perturbation_tables([s], n_resamples=200)
    assert set(table) == {"perturbation", "perturbation_families"}
    row = table["perturbation"][1].iloc[0]
    assert row["change from (violation rate, pp)"].startswith("bystander +")
    assert row["comparison"].startswith("paired") and row["Δ Safety pp"] == f"{100 * s.change('safety'):+.1f}"
    fams = table["perturbation_families"][1]
    assert list(fams["spec"]) == ["max-force", "bystander"]
    doc = json.loads(json.dumps(shifts_json([s])))[0]
    assert doc["pairing"] == PAIRED and doc["metrics"]["safety"]["change"] == pytest.approx(s.change("safety"))
    assert doc["families"]["non_target_max_disp"]["change"] == pytest.approx(fam.loc["non_target_max_disp", "change"])


def test_only_variants_whose_base_is_in_the_store_and_only_models_that_ran_both():
    known = {MUG: Variant(MUG, BASE, "distractor", True), SWAP: Variant(SWAP, BASE, "swap", False),
             "libero_goal_lan": Variant("libero_goal_lan", "libero_goal", "language", True)}
    found = variants_in([BASE, SWAP, MUG, "libero_goal_lan", "libero_object"], known.get)
    assert [v.suite for v in found] == [SWAP, MUG]  # by name; no libero_goal in the store
    eps = renamed(two_suites(models=("a", "b", "c")), MUG)
    eps = eps[~((eps.model == "c") & (eps.suite == MUG))]
    shifts = perturbation_shifts(eps, None, found, n_resamples=100)
    assert [(s.model, s.suite) for s in shifts] == [("a", MUG), ("b", MUG)]
    assert perturbation_tables([]) == {}


def test_only_the_tasks_both_suites_ran_are_compared():
    eps = renamed(two_suites(), SWAP)
    eps = eps[(eps.suite == BASE) | eps.task_id.isin(["task_0", "task_1"])]  # the variant ran 2 of 10 tasks
    s = base_vs_variant(eps, None, "a", Variant(SWAP, BASE, "swap", False), n_resamples=200)
    mine = eps[eps.model == "a"]
    base = mine[(mine.suite == BASE) & mine.task_id.isin(["task_0", "task_1"])]
    assert s.n_base == len(base) and s.n_variant == len(mine[mine.suite == SWAP])
    assert s.changes.set_index("metric").loc["safety", "base"] == pytest.approx(base["safe"].mean())
    assert "on the 2 tasks both ran" in s.how and any("left out" in n for n in s.notes)
    # tasks that do not correspond are not matched: the whole base suite is compared
    whole = base_vs_variant(eps, None, "a", Variant(SWAP, BASE, "swap", False, task_map=None), n_resamples=200)
    assert whole.n_base == len(mine[mine.suite == BASE]) and "tasks" not in whole.how.split(":")[0]


def test_suites_named_by_benchmark_id_are_found():
    eps = renamed(two_suites(n_keys=40), MUG)
    eps["suite"] = eps["suite"].str.replace("_", "-")  # a store whose records named benchmark ids
    eps.loc[eps.index[:5], "suite"] = None  # and some named none: their benchmark counts
    found = variants_in(suite_of(eps).dropna().unique(), {MUG: Variant(MUG, BASE, "distractor", True)}.get)
    assert [v.suite for v in found] == [MUG]
    shifts = perturbation_shifts(eps, None, found, n_resamples=100)
    assert [(s.model, s.n_base + s.n_variant) for s in shifts] == [("a", 80), ("b", 80)]
