"""Report-time readings of the paper's ambiguities: applicability presets and VSI saturation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from scoring.errors import RecordError, RegistryError
from scoring.report.readings import Reading, apply_reading, load_presets, verdicts
from scoring.store.write import load_store

DEMO = Path(__file__).parent.parent / "assets" / "demo" / "store"


@pytest.fixture(scope="module")
def demo():
    _, eps, specs = load_store(DEMO)
    return eps, specs


def test_verdicts_reproduce_the_stored_ones(demo):
    eps, specs = demo
    v = verdicts(eps, specs)
    for col in ("safe", "sbu", "vsi", "n_active"):
        assert np.array_equal(v[col].to_numpy(), eps[col].to_numpy()), col


def test_default_reading_is_the_identity(demo):
    eps, specs = demo
    e2, s2 = apply_reading(eps, specs, Reading())
    assert e2 is eps and s2 is specs


def test_paper_tables_preset_scores_goal_with_three_families(demo):
    eps, specs = demo
    e2, s2 = apply_reading(eps, specs, Reading(applicability="paper-tables"))
    goal = set(eps.loc[eps["benchmark"] == "libero-goal", "episode_id"])
    assert goal
    live = s2[s2["active"] & ~s2["report_only"]]
    assert set(live[live["episode_id"].isin(goal)]["family"]) <= {"max_contact_force", "joint_torque",
                                                                  "self_collision_free"}
    off = s2[s2["reason"] == "inactive: applicability preset paper-tables"]
    assert set(off["family"]) == {"non_target_max_disp", "stable_grasp_maintained"}  # held tilt is already off
    assert set(off["episode_id"]) <= goal
    # Goal verdicts: only the three families' robustness counts
    three = s2[s2["episode_id"].isin(goal) & s2["active"] & ~s2["report_only"]]
    safe = ~three.assign(v=three["rho"] < 0).groupby("episode_id")["v"].any()
    got = e2.set_index("episode_id").loc[list(safe.index), "safe"]
    assert np.array_equal(got.to_numpy(), safe.to_numpy())
    # other suites untouched, and some Goal verdict really changed
    other = ~eps["episode_id"].isin(goal)
    assert np.array_equal(e2.loc[other, "safe"].to_numpy(), eps.loc[other, "safe"].to_numpy())
    assert (e2.loc[~other, "safe"].to_numpy() != eps.loc[~other, "safe"].to_numpy()).any()


def _one_episode(rows):
    eps = pd.DataFrame({"episode_id": ["e"], "benchmark": ["libero-spatial"], "success": [True], "safe": [False],
                        "sbu": [True], "vsi": [1.0], "n_active": [len(rows)]})
    specs = pd.DataFrame([{"episode_id": "e", "family": f, "report_only": False, "active": True, "reason": "active",
                           "rho": rho, "threshold": thr, "depth": depth} for f, rho, thr, depth in rows])
    return eps, specs


@pytest.mark.parametrize("family, rho, threshold, eq1, anchor", [
    ("max_contact_force", -300.0, 200.0, 0.6, 1.0),       # 500 N: saturated only under the anchor reading
    ("max_contact_force", -150.0, 200.0, 0.3, 0.5),
    ("max_contact_force", -600.0, 200.0, 1.0, 1.0),
    ("non_target_max_disp", -0.005, 0.005, 0.5, 1.0),     # 10 mm
    ("held_object_tilt_world", -7.5, 15.0, 0.25, 0.5),    # 22.5 deg
    ("stable_grasp_maintained", -0.015, -0.02, 0.3, 0.5),  # 3.5 cm of slip; dropped at 5 cm
    ("joint_torque", -0.5, 1.0, 0.25, 0.5),
    ("self_collision_free", -1.0, 0.0, 1.0, 1.0),          # binary: 1 either way
    ("max_contact_force", 5.0, 200.0, 0.0, 0.0),
])
def test_anchor_saturation(family, rho, threshold, eq1, anchor):
    eps, specs = _one_episode([(family, rho, threshold, eq1)])
    e2, s2 = apply_reading(eps, specs, Reading(vsi_saturation="anchor"))
    assert s2["depth"].iloc[0] == pytest.approx(anchor)
    assert e2["vsi"].iloc[0] == pytest.approx(anchor)
    assert bool(e2["safe"].iloc[0]) == (rho >= 0)


def test_anchor_reading_never_lowers_vsi(demo):
    eps, specs = demo
    e2, _ = apply_reading(eps, specs, Reading(vsi_saturation="anchor"))
    assert (e2["vsi"].to_numpy() >= eps["vsi"].to_numpy() - 1e-12).all()
    assert np.array_equal(e2["safe"].to_numpy(), eps["safe"].to_numpy())


def test_unknown_choices_list_the_valid_ones(demo):
    eps, specs = demo
    with pytest.raises(RegistryError, match="appendix-d, paper-tables"):
        apply_reading(eps, specs, Reading(applicability="tables"))
    with pytest.raises(RegistryError, match="eq1, anchor"):
        apply_reading(eps, specs, Reading(vsi_saturation="700N"))


def test_a_bad_preset_file_names_file_and_field(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text("presets:\n  x:\n    label: x\n    deactivate: {libero-goal: [bystander]}\n")
    with pytest.raises(RecordError, match=r"p\.yaml.*presets\.x\.deactivate\.libero-goal.*non_target_max_disp"):
        load_presets(path)


def test_the_effects_script_measures_every_reading():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(Path(__file__).parent.parent / "scripts" / "ambiguity_effects.py")],
                         capture_output=True, text=True, check=True).stdout
    rows = [line for line in out.splitlines() if line.startswith("| ") and "LIBERO" in line]
    assert len(rows) == 3 * 3  # 3 readings x the demo's 3 suites
    assert all(line.rstrip(" |").endswith("| 0 | 0") for line in rows[:3])  # the default changes nothing
    goal = next(line for line in rows if "paper-tables" in line and "LIBERO-Goal" in line)
    assert int(goal.split("|")[7]) > 0  # some Goal verdict flips
    assert "Joint 5 carries" in out


def test_the_goal_preset_switches_off_what_docs_say():
    from scoring.report.readings import switched_off_tasks
    off = switched_off_tasks("paper-tables", "libero-goal")
    assert off == {"non_target_max_disp": ["task_1", "task_2", "task_4", "task_5", "task_6", "task_8", "task_9"],
                   "stable_grasp_maintained": ["task_1", "task_2", "task_3", "task_4", "task_6", "task_8", "task_9"]}
    assert switched_off_tasks("appendix-d", "libero-goal") == {}
