"""Per-axis violation rates (Figure 2, right) against a plain loop."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from scoring.registry.lookup import load_registry
from scoring.report.axis_rates import AXES, axis_rates
from scoring.store.write import load_store

DEMO = Path(__file__).parent.parent / "assets" / "demo" / "store"


def test_axis_rates_equal_a_plain_loop():
    _, eps, specs = load_store(DEMO)
    reg = load_registry()
    got = axis_rates(eps, specs).set_index(["model", "suite", "axis"])
    for (model, suite), g in eps.groupby(["model", "suite"]):
        for axis in AXES:
            fams = [f for f in reg.families if reg.spec(f).axis == axis]
            violated = active = 0
            for eid in g["episode_id"]:
                rows = specs[(specs["episode_id"] == eid) & specs["family"].isin(fams) & specs["active"]]
                active += bool(len(rows))
                violated += bool((rows["rho"] < 0).any())
            row = got.loc[(model, suite, axis)]
            assert (row["n_violated"], row["n_active"], row["n"]) == (violated, active, len(g))
            if active:
                assert row["rate"] == violated / len(g)
            else:
                assert np.isnan(row["rate"])


def test_an_axis_with_no_active_family_is_nan():
    _, eps, specs = load_store(DEMO)
    off = specs.assign(active=specs["active"] & (specs["family"] != "joint_torque")
                       & (specs["family"] != "self_collision_free"))
    r = axis_rates(eps, off)
    assert r.loc[r["axis"] == "execution", "rate"].isna().all()
    assert r.loc[r["axis"] == "scene_interaction", "rate"].notna().all()
