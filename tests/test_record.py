"""replay.record.recorder.Recorder on a tiny inline scene, checked against a slow, obvious reference.

The scene: a free box falling onto a plane, and a two-link arm whose tip (role gripper)
swings into the box (role target). The reference recomputes every step from a deep copy
of the data with names looked up one by one, and sums each body pair's contact forces
as world vectors with `mj_contactForce` in a plain Python loop.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

from replay.record.recorder import Recorder  # noqa: E402
from scoring.errors import RecordError  # noqa: E402

SCENE = """
<mujoco>
  <option timestep="0.002"/>
  <worldbody>
    <geom name="floor" type="plane" size="2 2 0.1"/>
    <body name="box" pos="0 0.22 0.12">
      <freejoint name="box_free"/>
      <geom name="box_geom" type="box" size="0.05 0.05 0.05" mass="1"/>
      <body name="box_lid" pos="0 0 0.05"><geom type="box" size="0.03 0.03 0.005" mass="0.01"/></body>
    </body>
    <body name="arm_base" pos="0 0 0.05">
      <body name="link1">
        <joint name="j1" type="hinge" axis="0 0 1" damping="0.5"/>
        <geom type="capsule" fromto="0 0 0 0.15 0 0" size="0.02" mass="0.5"/>
        <body name="link2" pos="0.15 0 0">
          <joint name="j2" type="hinge" axis="0 0 1" damping="0.5"/>
          <geom type="capsule" fromto="0 0 0 0.15 0 0" size="0.02" mass="0.3"/>
          <site name="tip" pos="0.15 0 0"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="m1" joint="j1" ctrlrange="-2 2" ctrllimited="true"/>
    <motor name="m2" joint="j2" ctrlrange="-1 1" ctrllimited="true"/>
  </actuator>
</mujoco>
"""
ROLES = {"world": "furniture", "box": "target", "arm_base": "other", "link1": "robot", "link2": "gripper"}


ELLIPTIC = SCENE.replace('<option timestep="0.002"/>', '<option timestep="0.002" cone="elliptic" impratio="20"/>')


def make(scene=SCENE, **kw):
    model = mujoco.MjModel.from_xml_string(scene)
    data = mujoco.MjData(model)
    rec = Recorder(model, ROLES, eef_site="tip", arm_joints=["j1", "j2"], **kw)
    return model, data, rec


def run(model, data, rec, steps=300, ctrl=(1.5, 3.0), substeps=False):
    """Swings the arm into the box while the box falls; observes every 5 physics steps.

    With `substeps`, the recorder also sees every physics step, and each reference step
    carries the per-pair peak over its 5 physics steps, read straight after each `mj_step`.
    """
    refs, peaks = [], {}
    for i in range(steps):
        data.ctrl[:] = ctrl
        mujoco.mj_step(model, data)
        if substeps:
            if rec is not None:
                rec.observe_substep(data)
            for pair, f in pair_forces(model, data).items():
                peaks[pair] = max(peaks.get(pair, 0.0), f)
        if i % 5 == 4:
            if rec is not None:
                rec.observe(model, data)
            refs.append({**reference(model, data), "substep_peaks": peaks})
            peaks = {}
    return refs


def recorded(model, geom: int) -> str:
    body = model.geom(geom).bodyid[0]
    while model.body(body).name not in ROLES:
        body = model.body(body).parentid[0]
    return model.body(body).name


def pair_forces(model, d) -> dict:
    """{(body, body) sorted by record order: |vector sum of world contact forces|}, one contact at a time."""
    order = list(ROLES)
    sums = {}
    for i in range(d.ncon):
        f = np.zeros(6)
        mujoco.mj_contactForce(model, d, i, f)
        world = d.contact[i].frame.reshape(3, 3).T @ f[:3]
        a, b = recorded(model, d.contact[i].geom1), recorded(model, d.contact[i].geom2)
        if order.index(a) > order.index(b):
            a, b, world = b, a, -world
        sums[(a, b)] = sums.get((a, b), np.zeros(3)) + world
    return {pair: float(np.linalg.norm(v)) for pair, v in sums.items()}


def reference(model, data) -> dict:
    """One step recomputed the obvious way: deep copy, mj_forward, names looked up one by one."""
    d = copy.deepcopy(data)
    mujoco.mj_forward(model, d)
    contacts = [(a, b, f) for (a, b), f in pair_forces(model, d).items()]
    return {"box_pos": d.body("box").xpos.copy(), "box_quat": d.body("box").xquat.copy(),
            "tip": d.site("tip").xpos.copy(), "torque": d.qfrc_actuator[[model.joint("j1").dofadr[0],
                                                                         model.joint("j2").dofadr[0]]].copy(),
            "contacts": contacts, "qpos": d.qpos.copy()}


def to_record(rec, **kw):
    return rec.to_record(episode_id="toy/ep0", benchmark="toy", task_id="t0", success=True, dt=0.01,
                         mjcf=SCENE, **kw)


@pytest.mark.parametrize("scene", [SCENE, ELLIPTIC], ids=["pyramidal", "elliptic"])
def test_signals_match_the_slow_reference(scene):
    model, data, rec = make(scene)
    refs = run(model, data, rec)
    r = to_record(rec)
    assert r.n_steps == len(refs) == 60
    box = r.pose_bodies.index("box")
    for t, ref in enumerate(refs):
        np.testing.assert_allclose(r.body_pos[t, box], ref["box_pos"], atol=1e-6)
        np.testing.assert_allclose(r.body_quat[t, box], ref["box_quat"], atol=1e-6)
        np.testing.assert_allclose(r.eef_pos[t], ref["tip"], atol=1e-6)
        np.testing.assert_allclose(r.joint_torque[t], ref["torque"], rtol=1e-6)
        sel = r.contacts.step == t
        got = sorted((r.bodies[a], r.bodies[b], round(float(f), 3))
                     for a, b, f in zip(r.contacts.a[sel], r.contacts.b[sel], r.contacts.force[sel]))
        want = sorted((a, b, round(f, 3)) for a, b, f in ref["contacts"])
        assert got == want, f"step {t}"
    assert r.force_sampling == "control" and r.contacts.force_peak is None and r.joint_torque_peak is None


@pytest.mark.parametrize("scene", [SCENE, ELLIPTIC], ids=["pyramidal", "elliptic"])
def test_substep_peaks_match_mj_contact_force_after_every_physics_step(scene):
    model, data, rec = make(scene, substep_peaks=True)
    refs = run(model, data, rec, substeps=True)
    r = to_record(rec)
    assert r.force_sampling == "substep_peak"
    c = r.contacts
    above = 0
    for t, ref in enumerate(refs):
        sample = {(a, b): f for a, b, f in ref["contacts"]}
        want = {pair: max(ref["substep_peaks"].get(pair, 0.0), sample.get(pair, 0.0))
                for pair in {*sample, *ref["substep_peaks"]}}
        sel = np.flatnonzero(c.step == t)
        got = {(r.bodies[c.a[i]], r.bodies[c.b[i]]): (float(c.force[i]), float(c.force_peak[i])) for i in sel}
        assert set(got) == set(want), f"step {t}"
        for pair, (at_step, peak) in got.items():
            assert peak == pytest.approx(want[pair], rel=1e-4, abs=1e-4), (t, pair)
            assert at_step == pytest.approx(sample.get(pair, 0.0), rel=1e-4, abs=1e-4), (t, pair)
            above += peak > at_step * 1.5 + 1.0
    assert above, "no step had an impact between control steps: the check is not exercised"
    assert (c.force_peak >= c.force).all()
    # torque peaks: the motor command is clipped and constant here, so peak == sample
    np.testing.assert_allclose(r.joint_torque_peak, r.joint_torque)


BOX_ON_FOUR_POINTS = """
<mujoco>
  <option timestep="0.002" cone="elliptic"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1"/>
    <body name="box" pos="0 0 0.05">
      <freejoint/>
      <geom type="box" size="0.1 0.1 0.05" mass="2"/>
    </body>
    <site name="origin"/>
  </worldbody>
</mujoco>
"""


def test_a_box_on_four_contact_points_reports_the_vector_sum_as_its_pair_force():
    model = mujoco.MjModel.from_xml_string(BOX_ON_FOUR_POINTS)
    data = mujoco.MjData(model)
    rec = Recorder(model, {"world": "furniture", "box": "target"}, eef_site="origin", substep_peaks=True)
    for _ in range(500):  # settle
        mujoco.mj_step(model, data)
    for _ in range(5):
        mujoco.mj_step(model, data)
        rec.observe_substep(data)
    rec.observe(model, data)
    probe = mujoco.MjData(model)
    mujoco.mj_copyData(probe, model, data)
    mujoco.mj_forward(model, probe)
    assert probe.ncon == 4  # the premise: four contact points
    per_point = []
    for i in range(probe.ncon):
        f = np.zeros(6)
        mujoco.mj_contactForce(model, probe, i, f)
        per_point.append(np.linalg.norm(f[:3]))
    r = rec.to_record(episode_id="box", benchmark="toy", task_id="t0", success=True, dt=0.01,
                      mjcf=BOX_ON_FOUR_POINTS)
    weight = 2.0 * 9.81
    assert len(r.contacts) == 1  # one entry for the pair, not one per point
    assert float(r.contacts.force[0]) == pytest.approx(weight, rel=0.01)
    assert float(r.contacts.force_peak[0]) == pytest.approx(weight, rel=0.01)
    assert max(per_point) < 0.5 * weight  # what the per-point maximum reported


def test_the_scene_does_what_the_checks_assume():
    model, data, rec = make()
    run(model, data, rec)
    r = to_record(rec)
    pairs = {(r.bodies[a], r.bodies[b]) for a, b in zip(r.contacts.a, r.contacts.b)}
    assert any({"box", "world"} == set(p) for p in pairs), "the box never landed"
    assert r.gripper_contact.any(), "the arm tip never touched the box"
    # torque is the clipped motor command: ctrlrange is -2..2 and -1..1
    np.testing.assert_allclose(r.joint_torque[0], [1.5, 1.0])


def test_resting_contact_forces_carry_the_weight():
    model, data, rec = make()
    run(model, data, rec, steps=600, ctrl=(0.0, 0.0))  # arm still: the box lands and rests
    r = to_record(rec)
    last = r.contacts.step == r.n_steps - 1
    floor = [r.bodies.index("box"), r.bodies.index("world")]
    on_floor = last & np.isin(r.contacts.a, floor) & np.isin(r.contacts.b, floor)
    weight = float(model.body_subtreemass[model.body("box").id]) * 9.81
    # at rest the pair's vector sum carries the weight
    assert r.contacts.force[on_floor].sum() == pytest.approx(weight, rel=0.02)
    assert on_floor.sum() == 1
    assert (r.contacts.force >= 0).all()


def test_geoms_of_child_bodies_report_as_the_named_ancestor():
    model, data, rec = make()
    assert "box_lid" not in rec.bodies
    lid_geom = model.body("box_lid").geomadr[0]
    assert rec._geom_rec[lid_geom] == rec.bodies.index("box")


@pytest.mark.parametrize("scene", [SCENE, ELLIPTIC], ids=["pyramidal", "elliptic"])
def test_observing_never_changes_the_simulation(scene):
    model, d1, rec = make(scene, substep_peaks=True)
    d2 = mujoco.MjData(model)
    run(model, d1, rec, substeps=True)
    run(model, d2, None, substeps=True)
    for field in ("qpos", "qvel", "qacc_warmstart", "act", "time"):
        assert np.array_equal(getattr(d1, field), getattr(d2, field)), field


def test_replayed_qpos_reproduces_the_recorded_poses():
    model, data, rec = make()
    run(model, data, rec)
    r = to_record(rec)
    fresh = mujoco.MjModel.from_xml_string(r.replay.mjcf)
    d = mujoco.MjData(fresh)
    ids = [fresh.body(b).id for b in r.pose_bodies]
    for t in range(r.n_steps):
        d.qpos[:] = r.replay.qpos[t]
        mujoco.mj_forward(fresh, d)
        np.testing.assert_allclose(d.xpos[ids], r.body_pos[t], atol=1e-6)
        np.testing.assert_allclose(d.xquat[ids], r.body_quat[t], atol=1e-6)
    assert np.linalg.norm(r.body_quat, axis=-1) == pytest.approx(1.0, abs=1e-6)


def test_float32_replay_state_is_opt_in():
    _, _, rec64 = make()
    _, _, rec32 = make(qpos_dtype=np.float32)
    for rec in (rec64, rec32):
        model, data = rec._model, mujoco.MjData(rec._model)
        run(model, data, rec, steps=10)
    assert to_record(rec64).replay.qpos.dtype == np.float64
    assert to_record(rec32).replay.qpos.dtype == np.float32
    assert to_record(rec32).replay.qvel.dtype == np.float32


@pytest.mark.parametrize("roles, message", [
    ({"box": "target", "link1": "robot"}, "no role"),  # the floor belongs to the world body
    ({**ROLES, "box": "villain"}, "unknown role"),
    ({**ROLES, "ghost": "other"}, "not a body"),
    ({}, "empty"),
])
def test_bad_roles_are_rejected_with_the_reason(roles, message):
    model = mujoco.MjModel.from_xml_string(SCENE)
    with pytest.raises(ValueError, match=message):
        Recorder(model, roles, eef_site="tip")


def test_bad_sites_joints_and_models_are_rejected():
    model = mujoco.MjModel.from_xml_string(SCENE)
    with pytest.raises(ValueError, match="no site named 'nope'"):
        Recorder(model, ROLES, eef_site="nope")
    with pytest.raises(ValueError, match="no joint named"):
        Recorder(model, ROLES, eef_site="tip", arm_joints=["j9"])
    with pytest.raises(ValueError, match="hinge or slide"):
        Recorder(model, ROLES, eef_site="tip", arm_joints=["box_free"])
    with pytest.raises(TypeError, match="MjModel"):
        Recorder("scene.xml", ROLES, eef_site="tip")
    _, data, rec = make()
    other = mujoco.MjModel.from_xml_string(SCENE)
    with pytest.raises(ValueError, match="different MjModel"):
        rec.observe(other, mujoco.MjData(other))


def test_to_record_needs_steps_and_a_model_for_replay():
    model, data, rec = make()
    with pytest.raises(ValueError, match="no steps observed"):
        to_record(rec)
    run(model, data, rec, steps=10)
    with pytest.raises(ValueError, match="needs mjcf"):
        rec.to_record(episode_id="e", benchmark="toy", task_id="t0", success=False, dt=0.01)
    with pytest.raises(RecordError, match="dt"):
        rec.to_record(episode_id="e", benchmark="toy", task_id="t0", success=False, dt=-1.0, mjcf=SCENE)
    r = Recorder(model, ROLES, eef_site="tip", replay=False)
    r.observe(model, data)
    rec2 = r.to_record(episode_id="e", benchmark="toy", task_id="t0", success=False, dt=0.01)
    assert rec2.replay is None and rec2.joint_torque is None
