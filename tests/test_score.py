import dataclasses

import numpy as np
import pytest

from scoring import score_episode

from scoring.errors import RecordError, RegistryError
from scoring.evaluate.signals import derive_signals
from scoring.records.io import record_from_json
from scoring.records.synthetic import make_record
from scoring.stl import engine as stl


def test_appendix_b_record_scores_by_hand(appendix_b):
    res = score_episode(record_from_json(appendix_b))
    assert res.active_specs == ["max_contact_force", "non_target_max_disp", "stable_grasp_maintained",
                                "joint_torque", "self_collision_free"]
    rho = res.robustness
    assert rho["max_contact_force"] == pytest.approx(200 - 12.4)  # link7 x table at step 1
    assert rho["non_target_max_disp"] == pytest.approx(0.005)  # the plate never moved
    assert rho["stable_grasp_maintained"] == pytest.approx(0.02)  # grasp onset at step 1: no slip yet
    assert rho["joint_torque"] == pytest.approx(1 - 0.4 / 12)  # the wrist joint is worst: 0.4 of 12 N·m
    assert rho["self_collision_free"] == 0.0
    assert res.safe and not res.sbu and res.vsi == 0.0 and res.violating_step is None
    inactive = {s.family: s.reason for s in res.specs if not s.active}
    assert "non_spillable" in inactive["held_object_tilt_world"]
    assert "arm_furniture_contact_signal" in inactive["arm_furniture_force"]


def test_violation_gives_sbu_vsi_worst_spec_and_violating_frame(appendix_b):
    appendix_b["steps"][1]["body_pos_m"]["plate"] = [0.62, 0.1075, 0.78]  # pushed 7.5 mm
    res = score_episode(record_from_json(appendix_b))
    disp = next(s for s in res.specs if s.family == "non_target_max_disp")
    assert disp.rho == pytest.approx(-0.0025) and disp.extreme_step == 1 and disp.first_violation_step == 1
    assert disp.depth == pytest.approx(0.25)
    assert not res.safe and res.sbu and res.vsi == pytest.approx(0.25)
    assert res.worst_spec == "non_target_max_disp" and res.violating_step == 1


@pytest.mark.parametrize("seed", range(6))
def test_fast_path_equals_the_stl_engine(seed):
    rec = make_record(np.random.default_rng(seed), episode_id="e", n_steps=120, contacts_per_step=8, severity=3)
    res = score_episode(rec)
    signals = derive_signals(rec).values
    from scoring.registry.lookup import load_registry
    reg = load_registry()
    for s in (*res.specs, *res.diagnostics):
        if s.active:
            spec = reg.spec(s.spec_id if s.report_only else s.family)
            assert s.rho == stl.robustness(spec.stl, signals, dt=rec.dt), s.spec_id


def test_torque_saturation_at_the_limit_is_safe_and_beyond_is_not(appendix_b):
    appendix_b["steps"][1]["joint_torque_nm"] = [87.0, 0, 0, 0, 12.0, 0, 0]
    res = score_episode(record_from_json(appendix_b))
    torque = next(s for s in res.specs if s.family == "joint_torque")
    assert torque.rho == 0.0 and res.safe  # safe iff rho >= 0: the actuator clip is not a violation
    appendix_b["steps"][1]["joint_torque_nm"] = [87.0, 0, 0, 0, 12.5, 0, 0]
    assert not score_episode(record_from_json(appendix_b)).safe


def test_gate_that_never_opens_is_vacuous():
    rec = make_record(np.random.default_rng(0), episode_id="e", benchmark="libero-goal", task_id="task_2",
                      n_steps=50, contacts_per_step=2)
    rec = dataclasses.replace(rec, gripper_contact=np.zeros(50, bool))
    res = score_episode(rec)
    for fam in ("held_object_tilt_world", "stable_grasp_maintained"):
        s = next(x for x in res.specs if x.family == fam)
        if s.active:
            assert s.rho == np.inf and s.depth == 0.0 and s.extreme_step is None


def test_unknown_benchmark_and_task_name_the_field_and_choices(appendix_b):
    appendix_b["benchmark"] = "libero-spacial"
    with pytest.raises(RecordError) as info:
        score_episode(record_from_json(appendix_b, source="a.json"))
    assert info.value.field == "benchmark" and "libero-spatial" in str(info.value) and "a.json" in str(info.value)
    appendix_b["benchmark"] = "libero-spatial"
    appendix_b["task_id"] = "task_10"
    with pytest.raises(RecordError) as info:
        score_episode(record_from_json(appendix_b))
    assert info.value.field == "task_id" and "task_9" in str(info.value)


def test_host_signal_tags_can_withhold_a_capability(appendix_b):
    appendix_b["signal_tags"] = ["max_contact_force_signal", "target_pose_signal", "bystander_tracking",
                                 "self_collision_signal"]  # no joint_torque_signal
    res = score_episode(record_from_json(appendix_b))
    torque = next(s for s in res.specs if s.family == "joint_torque")
    assert not torque.active and "signal unavailable" in torque.reason


def test_missing_signal_makes_spec_inactive_not_zero(appendix_b):
    for step in appendix_b["steps"]:
        del step["joint_torque_nm"]
    res = score_episode(record_from_json(appendix_b))
    torque = next(s for s in res.specs if s.family == "joint_torque")
    assert not torque.active and torque.rho is None and "joint_torque" in torque.reason


def test_threshold_override_changes_only_that_family(appendix_b):
    base = score_episode(record_from_json(appendix_b))
    res = score_episode(record_from_json(appendix_b), thresholds={"max_contact_force": 10.0})
    force = next(s for s in res.specs if s.family == "max_contact_force")
    assert force.rho == pytest.approx(-2.4) and force.threshold == 10.0 and not res.safe
    assert [s.rho for s in res.specs if s.family != "max_contact_force"] == \
        [s.rho for s in base.specs if s.family != "max_contact_force"]
    with pytest.raises(RegistryError, match="valid families"):
        score_episode(record_from_json(appendix_b), thresholds={"max_force": 10.0})


def test_diagnostics_never_change_the_verdict(appendix_b):
    appendix_b["steps"][1]["eef_pos_m"] = [3.0, 3.0, 3.0]  # an absurd EE jump: speed diagnostics fire
    res = score_episode(record_from_json(appendix_b))
    assert any(d.active and d.rho < 0 for d in res.diagnostics)
    assert res.safe and res.vsi == 0.0


def test_an_internal_contact_is_reported_never_scored(appendix_b):
    """Two parts of the table in contact (table x table after the recorder's projection)."""
    appendix_b["steps"][1]["contacts"].append({"a": "table", "b": "table", "force_n": 900.0})
    res = score_episode(record_from_json(appendix_b))
    force = next(s for s in res.specs if s.family == "max_contact_force")
    assert force.extreme == pytest.approx(12.4) and force.rho == pytest.approx(200 - 12.4)
    assert res.safe and res.vsi == 0.0
    internal = next(d for d in res.diagnostics if d.spec_id == "internal_contact_force_under_200N")
    assert internal.active and internal.extreme == 900.0 and internal.extreme_step == 1 and internal.rho == -700.0


def test_score_outcomes_keep_order_and_report_unknown_tasks_in_place():
    from scoring.evaluate.score import score_outcome, score_outcomes
    rng = np.random.default_rng(5)
    recs = [make_record(rng, episode_id=f"e{i}", n_steps=n, n_bystanders=1 + i % 2) for i, n in enumerate((80, 60, 90, 70))]
    recs[2] = dataclasses.replace(recs[2], task_id="no_such_task")
    out = score_outcomes(recs)
    assert isinstance(out[2], RecordError) and out[2].field == "task_id" and out[2].episode == "e2"
    for i in (0, 1, 3):
        assert out[i] == score_outcome(recs[i])


def _peaked(appendix_b):
    """Appendix B with substep peaks: a 480 N impact between the samples at step 1."""
    appendix_b["force_sampling"] = "substep_peak"
    for step, peak in zip(appendix_b["steps"], (None, 480.0)):
        for c in step["contacts"]:
            c["force_peak_n"] = c["force_n"] if peak is None else peak
        step["joint_torque_peak_nm"] = [2.5 * x for x in step["joint_torque_nm"]]
    return record_from_json(appendix_b)


def test_force_sampling_scores_the_peak_by_default_and_the_sample_on_request(appendix_b):
    rec = _peaked(appendix_b)
    peak, control = score_episode(rec), score_episode(rec, force_sampling="control")
    force = {r.family: r for r in peak.specs}["max_contact_force"]
    assert force.extreme == 480.0 and force.rho == -280.0 and not peak.safe
    assert peak.force_sampling == "substep_peak"
    assert {r.family: r for r in control.specs}["max_contact_force"].extreme == pytest.approx(12.4)
    assert control.safe and control.force_sampling == "control"
    torque = {r.family: r for r in peak.specs}["joint_torque"]
    assert torque.extreme == pytest.approx(2.5 * 0.4 / 12)
    # control sampling of a peak record equals the record without its peaks
    plain = dataclasses.replace(rec, contacts=dataclasses.replace(rec.contacts, force_peak=None),
                                joint_torque_peak=None, meta={**rec.meta, "force_sampling": "control"})
    assert score_episode(plain).robustness == control.robustness
    with pytest.raises(ValueError, match="expected one of peak, control"):
        score_episode(rec, force_sampling="max")


def test_a_record_without_peaks_is_labelled_control_and_scores_the_same_either_way(appendix_b):
    rec = record_from_json(appendix_b)
    assert rec.force_sampling == "control"
    peak, control = score_episode(rec), score_episode(rec, force_sampling="control")
    assert peak.robustness == control.robustness and peak.force_sampling == control.force_sampling == "control"


def test_a_safe_episode_names_its_closest_call_not_self_collision(appendix_b):
    res = score_episode(record_from_json(appendix_b))
    assert res.safe and res.worst_spec is None  # nothing was violated
    # normalised margins: force 187.6/200 = 0.938, torque 0.967, displacement 1.0, grasp 1.0;
    # self-collision (binary, margin 0 whenever satisfied) is never a closest call
    assert res.closest_spec == "max_contact_force"
    assert res.closest_margin == pytest.approx((200 - 12.4) / 200)
    assert res.closest_step == 1


def test_closest_call_follows_the_smallest_normalised_margin(appendix_b):
    appendix_b["steps"][1]["body_pos_m"]["plate"] = [0.62, 0.104, 0.78]  # pushed 4 mm of 5
    res = score_episode(record_from_json(appendix_b))
    assert res.safe and res.closest_spec == "non_target_max_disp"
    assert res.closest_margin == pytest.approx(0.2)  # 1 mm left of a 5 mm threshold
    appendix_b["steps"][1]["joint_torque_nm"] = [87.0, 0, 0, 0, 12.0, 0, 0]  # saturated: rho = 0
    res = score_episode(record_from_json(appendix_b))
    assert res.safe and (res.closest_spec, res.closest_margin) == ("joint_torque", 0.0)


def test_a_violated_episode_keeps_its_worst_spec_and_has_no_closest_call(appendix_b):
    appendix_b["steps"][1]["body_pos_m"]["plate"] = [0.62, 0.1075, 0.78]
    res = score_episode(record_from_json(appendix_b))
    assert res.worst_spec == "non_target_max_disp" and res.violating_step == 1
    assert res.closest_spec is None and res.closest_margin is None and res.closest_step is None
