"""A long episode's robustness chart is bounded: at most `CHART_POINTS` steps per spec, chosen
by min/max per bucket so the worst margin (a one-step violation's extreme) survives."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dashboard import timeline_spec as TS
from dashboard.data.detail import CHART_POINTS, minmax_steps, robustness_traces
from scoring.records.synthetic import make_record
from scoring.registry.lookup import load_registry

N_STEPS = 30_000  # 15 x CHART_POINTS
SPIKE = 21_113  # one step of joint torque far over its limit, inside a bucket


@pytest.fixture(scope="module")
def long_traces():
    rec = make_record(np.random.default_rng(7), episode_id="libero-spatial/task_0/policy-a/ep_long",
                      n_steps=N_STEPS, contacts_per_step=1, n_bystanders=1, severity=0.0)
    torque = np.array(rec.joint_torque, copy=True)
    torque[SPIKE, 1] = 500.0
    rec = dataclasses.replace(rec, joint_torque=torque)
    reg = load_registry()
    fams = ["joint_torque", "max_contact_force", "held_object_tilt_world"]
    full = robustness_traces(rec, reg, {}, fams)
    short = robustness_traces(rec, reg, {}, fams, max_points=CHART_POINTS)
    return full, short


def test_minmax_steps_keeps_each_buckets_extremes_and_gaps():
    y = np.sin(np.linspace(0, 40, 10_001))
    y[7_777] = -5.0
    y[100:400] = np.nan
    keep = minmax_steps(y, 200)
    assert len(keep) <= 200 and keep[0] == 0 and keep[-1] == len(y) - 1
    assert 7_777 in keep and np.nanmax(y) == np.nanmax(y[keep])
    assert np.isnan(y[keep]).any()  # the gated-off stretch still breaks the line
    assert list(minmax_steps(y[:150], 200)) == list(range(150))  # short enough: every step


def test_long_episode_chart_holds_at_most_n_points_per_spec(long_traces):
    full, short = long_traces
    assert full.groupby("spec").size().min() == N_STEPS
    per_spec = short.groupby("spec").size()
    assert (per_spec <= CHART_POINTS).all() and len(per_spec) == 3
    spec = TS.robustness_spec(short, violating_step=SPIKE, dt=0.05)
    for panel in spec["vconcat"]:
        for layer in panel["layer"]:
            assert len(spec["datasets"][layer["data"]["name"]]) <= CHART_POINTS


def test_long_episode_chart_keeps_the_violations_extreme(long_traces):
    full, short = long_traces
    for name, f in full.groupby("spec"):
        s = short[short["spec"] == name]
        assert np.nanmin(s["margin"]) == np.nanmin(f["margin"])  # the worst margin survives, exactly
        assert np.nanmax(s["margin"]) == np.nanmax(f["margin"])
    torque = short[short["family"] == "joint_torque"].set_index("step")
    assert torque.loc[SPIKE, "violated"] and torque["margin"].idxmin() == SPIKE
    spec = TS.robustness_spec(short, violating_step=SPIKE, dt=0.05)
    (panel,) = [p for p in spec["vconcat"] if p["title"]["text"] == torque["spec"].iat[0]]
    bands = [spec["datasets"][lay["data"]["name"]] for lay in panel["layer"]
             if isinstance(lay["mark"], dict) and lay["mark"]["type"] == "rect"]
    assert any(r["step"] <= SPIKE < r["step_end"] for rows in bands for r in rows)  # its red band is drawn
