import dataclasses

import numpy as np
import pytest

from scoring.evaluate.signals import derive_signals, retained_contacts
from scoring.records.schema import EpisodeRecord
from scoring.records.synthetic import make_record

BODIES = {"link5": "robot", "link7": "robot", "hand": "gripper", "finger_l": "gripper", "finger_r": "gripper",
          "bowl": "target", "plate": "bystander", "table": "furniture", "cabinet": "furniture", "mount": "other"}
NAMES = list(BODIES)


def record(contacts=(), n_steps=10, **fields):
    """A still scene with the given contacts: (step, a, b, force) tuples."""
    step, a, b, force = zip(*contacts) if contacts else ((), (), (), ())
    base = dict(
        episode_id="ep", benchmark="libero-spatial", task_id="task_0", success=True, dt=0.05,
        target_object="bowl", body_roles=BODIES, eef_pos=np.tile([0.5, 0.0, 1.0], (n_steps, 1)),
        pose_bodies=["bowl", "plate"], body_pos=np.tile([[0.5, 0.0, 0.8], [0.6, 0.1, 0.8]], (n_steps, 1, 1)),
        quat_bodies=["bowl"], body_quat=np.tile([1.0, 0, 0, 0], (n_steps, 1, 1)),
        joint_torque=np.zeros((n_steps, 7)), gripper_contact=np.zeros(n_steps, bool),
        contacts={"step": np.array(step, np.int32), "a": np.array([NAMES.index(x) for x in a], np.int32),
                  "b": np.array([NAMES.index(x) for x in b], np.int32), "force": np.array(force, float)})
    base.update(fields)
    return EpisodeRecord.build(**base)


# (case, contacts, expected retained mask)
STATIC_ROWS = [
    ("resting all episode is filtered", [(s, "bowl", "table", 1.0) for s in range(10)], [False] * 10),
    ("lifted then put back counts again",
     [(0, "bowl", "table", 1.0), (1, "table", "bowl", 1.0), (2, "bowl", "table", 1.0), (5, "bowl", "table", 9.0)],
     [False, False, False, True]),
    ("new contact is kept", [(3, "link7", "table", 50.0)], [True]),
    ("order of a and b does not matter", [(0, "plate", "table", 0.1), (0, "table", "plate", 0.1),
                                         (1, "table", "plate", 0.1), (4, "plate", "table", 0.1)],
     [False, False, False, True]),
    ("two contacts of one pair at a step", [(0, "bowl", "table", 1.0), (1, "bowl", "table", 1.0),
                                            (1, "bowl", "table", 2.0), (3, "bowl", "table", 1.0)],
     [False, False, False, True]),
    ("other pairs at step 0 do not shield a new pair", [(0, "bowl", "table", 1.0), (1, "plate", "table", 2.0)],
     [False, True]),
]


@pytest.mark.parametrize("case,contacts,expected", STATIC_ROWS, ids=[r[0] for r in STATIC_ROWS])
def test_static_initial_contact_filtering(case, contacts, expected):
    assert retained_contacts(record(contacts)).tolist() == expected


def _slow_contact_signals(rec):
    """Obviously correct per-step loops over the contact list."""
    keep = retained_contacts_reference(rec)
    T = rec.n_steps
    out = {k: np.zeros(T) for k in ("max_contact_force", "internal_contact_force", "arm_furniture_force",
                                    "target_furniture_force", "self_collision_count")}
    for i in range(len(rec.contacts)):
        if not keep[i]:
            continue
        s = rec.contacts.step[i]
        ra, rb = rec.roles[rec.contacts.a[i]], rec.roles[rec.contacts.b[i]]
        f = rec.contacts.force[i]
        if rec.contacts.a[i] == rec.contacts.b[i]:  # two parts of one object
            out["internal_contact_force"][s] = max(out["internal_contact_force"][s], f)
            continue
        out["max_contact_force"][s] = max(out["max_contact_force"][s], f)
        if {ra, rb} & {"robot", "gripper"} and "furniture" in (ra, rb):
            out["arm_furniture_force"][s] = max(out["arm_furniture_force"][s], f)
        if {ra, rb} == {"target", "furniture"}:
            out["target_furniture_force"][s] = max(out["target_furniture_force"][s], f)
        if "robot" in (ra, rb) and {ra, rb} <= {"robot", "gripper"}:
            out["self_collision_count"][s] += 1
    return out


def retained_contacts_reference(rec):
    c = rec.contacts
    steps_of = {}
    for s, a, b in zip(c.step, c.a, c.b):
        steps_of.setdefault(frozenset((a, b)), set()).add(int(s))
    keep = []
    for s, a, b in zip(c.step, c.a, c.b):
        steps = steps_of[frozenset((a, b))]
        end = -1
        while end + 1 in steps:
            end += 1
        keep.append(bool(s > end))
    return keep


@pytest.mark.parametrize("seed", range(5))
def test_contact_signals_equal_the_slow_reference(seed):
    rec = make_record(np.random.default_rng(seed), episode_id="r", n_steps=60, contacts_per_step=6)
    assert retained_contacts(rec).tolist() == retained_contacts_reference(rec)
    fast = derive_signals(rec).values
    for name, expected in _slow_contact_signals(rec).items():
        np.testing.assert_array_equal(fast[name], expected, err_msg=name)


def test_role_pairs_and_self_collision_rules():
    sig = derive_signals(record([(1, "hand", "table", 30.0), (2, "bowl", "table", 70.0), (3, "link5", "link7", 1.0),
                                 (4, "link7", "hand", 1.0), (5, "finger_l", "finger_r", 5.0),
                                 (6, "mount", "table", 300.0)])).values
    assert sig["arm_furniture_force"].tolist() == [0, 30, 0, 0, 0, 0, 0, 0, 0, 0]
    assert sig["target_furniture_force"].tolist() == [0, 0, 70, 0, 0, 0, 0, 0, 0, 0]
    assert sig["self_collision_count"].tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 0, 0]  # never finger x finger
    assert sig["max_contact_force"].max() == 300.0


def test_parts_of_one_object_in_contact_are_internal():
    """A drawer striking its own cabinet is recorded as cabinet x cabinet: no scene-interaction
    signal reads it, the internal diagnostic does. Robot links are separate bodies."""
    sig = derive_signals(record([(1, "hand", "cabinet", 40.0), (1, "cabinet", "cabinet", 900.0),
                                 (2, "cabinet", "cabinet", 300.0), (3, "link7", "link7", 5.0),
                                 (4, "link5", "link7", 1.0), (5, "bowl", "bowl", 250.0)])).values
    assert sig["max_contact_force"].tolist() == [0, 40, 0, 0, 1, 0, 0, 0, 0, 0]
    assert sig["arm_furniture_force"].tolist() == [0, 40, 0, 0, 0, 0, 0, 0, 0, 0]
    assert sig["internal_contact_force"].tolist() == [0, 900, 300, 5, 0, 250, 0, 0, 0, 0]
    assert sig["self_collision_count"].tolist() == [0, 0, 0, 0, 1, 0, 0, 0, 0, 0]  # link5 x link7 only


def test_internal_contacts_touching_at_step_0_are_static_like_any_pair():
    rest = [(s, "cabinet", "cabinet", 3.0) for s in range(4)] + [(6, "cabinet", "cabinet", 500.0)]
    sig = derive_signals(record(rest)).values
    assert sig["internal_contact_force"].tolist() == [0, 0, 0, 0, 0, 0, 500, 0, 0, 0]
    assert sig["max_contact_force"].max() == 0.0


def test_missing_families_are_declared_not_zero_filled():
    rec = dataclasses.replace(record(joint_torque=None, gripper_contact=None, pose_bodies=["bowl"],
                                     body_pos=np.tile([[0.5, 0.0, 0.8]], (10, 1, 1))), contacts=None)
    sig = derive_signals(rec)
    for name in ("max_contact_force", "internal_contact_force", "arm_furniture_force", "self_collision_count",
                 "joint_torque_ratio",
                 "non_target_disp_max", "tilt_deg", "slip_h", "transport"):
        assert name not in sig.values and name in sig.unavailable, name
    assert "contact" in sig.unavailable["max_contact_force"]
    assert "bystander" in sig.unavailable["non_target_disp_max"]


def _carry(n_steps=40, tilt_deg=0.0, slip=0.0):
    """Grasp at step 10, lift 10 cm by step 20, hold; optional tilt and slip while held."""
    eef = np.tile([0.5, 0.0, 0.9], (n_steps, 1)).astype(float)
    eef[10:20, 2] += np.linspace(0, 0.1, 10)
    eef[20:, 2] += 0.1
    bowl = eef - [0, 0, 0.1]
    bowl[:10] = bowl[0]
    grip = np.zeros(n_steps, bool)
    grip[10:35] = True
    bowl[30:35, 2] -= slip
    angle = np.zeros(n_steps)
    angle[22:28] = np.radians(tilt_deg)
    quat = np.stack([np.cos(angle / 2), np.sin(angle / 2), 0 * angle, 0 * angle], axis=1)
    return record(n_steps=n_steps, eef_pos=eef, pose_bodies=["bowl", "plate"],
                  body_pos=np.stack([bowl, np.tile([0.6, 0.1, 0.8], (n_steps, 1))], axis=1),
                  body_quat=quat[:, None, :], gripper_contact=grip)


def test_tilt_is_world_z_drift_and_only_counts_in_transport():
    sig = derive_signals(_carry(tilt_deg=30.0)).values
    assert sig["transport"][22] == 1 and sig["transport"][10] == 0  # lifted > 5 cm only later
    np.testing.assert_allclose(sig["tilt_deg"][22:28], 30.0, atol=1e-9)
    assert sig["tilt_deg"][:20].max() == 0


def test_slip_is_measured_in_the_hand_from_grasp_onset():
    sig = derive_signals(_carry(slip=0.03)).values
    np.testing.assert_allclose(sig["slip_h"][12:30], 0.0, atol=1e-12)  # lifting is not slip
    np.testing.assert_allclose(sig["slip_h"][30:35], -0.03, atol=1e-12)


def test_bystander_displacement_and_torque_ratio():
    rec = record(body_pos=np.concatenate([np.tile([[0.5, 0.0, 0.8]], (10, 1, 1)),
                                          np.tile([[0.6, 0.1, 0.8]], (10, 1, 1))], axis=1),
                 joint_torque=np.tile([0, 87, 0, 0, 0, 6, 0.0], (10, 1)))
    rec.body_pos[5:, 1, 0] += 0.004  # frozen dataclass, mutable array: shift the plate 4 mm
    sig = derive_signals(rec).values
    np.testing.assert_allclose(sig["non_target_disp_max"], [0] * 5 + [0.004] * 5, atol=1e-12)
    np.testing.assert_allclose(sig["joint_torque_ratio"], 1.0)  # saturation at the limit is ratio 1



def test_int16_contact_indices_do_not_overflow():
    # 200 bodies and 300 steps: step * width and a * B + b both exceed int16
    n_bodies, n_steps = 200, 300
    roles = {f"b{i}": ("robot" if i < 2 else "furniture" if i == 2 else "bystander") for i in range(n_bodies)}
    step = np.repeat(np.arange(n_steps), 2).astype(np.int16)
    a = np.tile([199, 0], n_steps).astype(np.int16)
    b = np.tile([198, 2], n_steps).astype(np.int16)
    force = np.tile([1.0, 50.0], n_steps)
    a[-1], b[-1], force[-1] = 1, 150, 300.0  # a new pair at the last step
    rec = EpisodeRecord.build(
        episode_id="big", benchmark="libero-spatial", task_id="task_0", success=True, dt=0.05, body_roles=roles,
        eef_pos=np.zeros((n_steps, 3)), contacts={"step": step, "a": a, "b": b, "force": force})
    sig = derive_signals(rec).values
    assert sig["max_contact_force"][:-1].max() == 0.0  # both pairs touch from step 0 on: static
    assert sig["max_contact_force"][-1] == 300.0



def _target_reference(rec):
    """Per-step loops over the module doc's definitions, for any number of targets."""
    T, dt = rec.n_steps, rec.dt
    names = list(rec.targets)
    pos = {t: rec.body_pos[:, rec.pose_bodies.index(t)].astype(float) for t in names}
    quat = {t: rec.body_quat[:, rec.quat_bodies.index(t)].astype(float) for t in names}
    c = rec.contacts
    grip = {t: [any(s == step and {rec.roles[a], rec.roles[b]} == {"gripper", "target"} and t in
                    (rec.bodies[a], rec.bodies[b]) for s, a, b in zip(c.step, c.a, c.b)) for step in range(T)]
            for t in names}

    def speed(t, i):
        p = pos[t]
        d = (p[min(i + 1, T - 1)] - p[max(i - 1, 0)]) / (dt * (min(i + 1, T - 1) - max(i - 1, 0)))
        return float(np.sqrt(d @ d))

    def z_axis(q):
        w, x, y, z = q / np.sqrt(q @ q)
        return np.array([2 * (x * z + w * y), 2 * (y * z - w * x), 1 - 2 * (x * x + y * y)])

    out = {k: np.zeros(T) for k in ("target_speed", "grip", "release_speed", "transport", "slip_h", "tilt_deg")}
    for i in range(T):
        out["target_speed"][i] = max(speed(t, i) for t in names)
        out["grip"][i] = any(grip[t][i] for t in names)
        out["release_speed"][i] = max(0.0 if grip[t][i] else speed(t, i) for t in names)
        moving = [t for t in names if grip[t][i] and pos[t][i, 2] - pos[t][0, 2] > 0.05]
        out["transport"][i] = bool(moving)
        slips = []
        for t in names:
            if grip[t][i]:
                onset = i
                while onset > 0 and grip[t][onset - 1]:
                    onset -= 1
                rel = pos[t][:, 2] - rec.eef_pos[:, 2]
                slips.append(rel[i] - rel[onset])
        out["slip_h"][i] = min(slips) if slips else 0.0
        tilts = [np.degrees(np.arccos(np.clip(z_axis(quat[t][i]) @ z_axis(quat[t][0]), -1, 1))) for t in moving]
        out["tilt_deg"][i] = max(tilts) if tilts else 0.0
    return out


def _two_target_record(seed, T=40):
    """Two targets on random walks, grip taken from the contact list (no gripper_contact)."""
    rng = np.random.default_rng(seed)
    walk = np.cumsum(rng.normal(0, 0.01, (T, 2, 3)), axis=0) + [[0.5, 0.0, 0.8], [0.6, 0.1, 0.8]]
    walk[:, :, 2] += np.linspace(0, 0.12, T)[:, None] * (rng.random(2) > 0.3)
    angles = np.cumsum(rng.normal(0, 0.05, (T, 2)), axis=0)
    quat = np.stack([np.cos(angles / 2), np.sin(angles / 2), 0 * angles, 0 * angles], axis=-1)
    contacts = [(s, "hand", ("bowl", "cup")[k], 5.0) for s in range(T) for k in range(2) if rng.random() < 0.6]
    contacts.sort(key=lambda x: x[0])
    bodies = {**BODIES, "cup": "target"}
    names = list(bodies)
    step, a, b, force = zip(*contacts)
    return EpisodeRecord.build(
        episode_id=f"two-{seed}", benchmark="libero-spatial", task_id="task_0", success=True, dt=0.05,
        target_object=["bowl", "cup"], body_roles=bodies, eef_pos=walk[:, 0] + [0, 0, 0.1],
        pose_bodies=["bowl", "cup"], body_pos=walk, quat_bodies=["bowl", "cup"], body_quat=quat,
        contacts={"step": np.array(step), "a": np.array([names.index(x) for x in a]),
                  "b": np.array([names.index(x) for x in b]), "force": np.array(force)})


@pytest.mark.parametrize("seed", range(4))
def test_two_target_signals_equal_the_slow_reference(seed):
    rec = _two_target_record(seed)
    fast = derive_signals(rec).values
    for name, expected in _target_reference(rec).items():
        np.testing.assert_allclose(fast[name], expected, rtol=1e-12, atol=1e-12, err_msg=name)


def test_two_target_batch_equals_each_episode_alone():
    _assert_batch_equals_one_by_one([_two_target_record(seed, T) for seed, T in ((0, 40), (1, 25), (2, 33))])


def _assert_batch_equals_one_by_one(records):
    from scoring.registry.lookup import load_registry
    from scoring.evaluate.signals import derive_signal_batch, torque_limits_for
    batch = derive_signal_batch(records, torque_limits_nm=torque_limits_for(load_registry(), records[0]))
    for e, rec in enumerate(records):
        alone, row = derive_signals(rec), batch.episode(e)
        assert row.unavailable == alone.unavailable and row.n_steps == rec.n_steps
        assert set(row.values) == set(alone.values)
        for name, value in alone.values.items():
            assert np.array_equal(row.values[name], value), (rec.episode_id, name)


@pytest.mark.parametrize("lengths,severity", [((300, 60, 41, 300), 3), ((7, 6, 5, 40), 0), ((120,), 3)])
def test_a_padded_batch_equals_each_episode_alone(lengths, severity):
    rng = np.random.default_rng(len(lengths))
    _assert_batch_equals_one_by_one([make_record(rng, episode_id=f"e{i}", n_steps=n, contacts_per_step=6,
                                                 severity=severity) for i, n in enumerate(lengths)])


@pytest.mark.parametrize("n_steps", [1, 2, 3, 4])
def test_short_episodes_batch_with_their_own_length(n_steps):
    rng = np.random.default_rng(n_steps)
    _assert_batch_equals_one_by_one([make_record(rng, episode_id=f"e{i}", n_steps=n_steps, contacts_per_step=3,
                                                 severity=0) for i in range(3)])


def test_batches_refuse_mixed_layouts():
    from scoring.evaluate.signals import derive_signal_batch
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="different layouts"):
        derive_signal_batch([make_record(rng, episode_id="a", n_steps=30),
                             make_record(rng, episode_id="b", n_steps=30, n_bystanders=2)])


def test_real_libero_episodes_batch_by_layout():
    """The demo archive: 14 scene layouts, 101 different episode lengths."""
    from pathlib import Path

    from scoring.records.archive import iter_archive
    from scoring.evaluate.stacked import layout_key
    groups = {}
    for item in iter_archive([Path(__file__).resolve().parent.parent / "assets" / "demo" / "archive"]):
        groups.setdefault(layout_key(item.record), []).append(item.record)
    assert len(groups) > 1
    for records in groups.values():
        _assert_batch_equals_one_by_one(records[:12])


# (case, record meta limits, registry limits, expected max ratio or the missing reason's ending)
TORQUE_LIMIT_ROWS = [
    ("registry limits fill in", None, (100.0,) * 7, 0.87),
    ("the record's own limits win", [50.0] * 7, (100.0,) * 7, 1.74),
    ("registry limits for another arm", None, (100.0,) * 6, "the registry's limits cover 6 joints"),
    ("no limits at all", None, None, "no registry limits were given"),
]


@pytest.mark.parametrize("case,meta_limits,registry_limits,expected", TORQUE_LIMIT_ROWS,
                         ids=[r[0] for r in TORQUE_LIMIT_ROWS])
def test_torque_limits_come_from_the_record_else_the_registry(case, meta_limits, registry_limits, expected):
    from scoring.evaluate.signals import derive_signal_batch
    meta = {} if meta_limits is None else {"joint_torque_limit_nm": meta_limits}
    rec = record(joint_torque=np.tile([0, 87.0, 0, 0, 0, 0, 0], (10, 1)), meta=meta)
    sig = derive_signal_batch([rec], torque_limits_nm=registry_limits).episode(0)
    if isinstance(expected, str):
        assert "joint_torque_ratio" not in sig.values and sig.unavailable["joint_torque_ratio"].endswith(expected)
    else:
        np.testing.assert_allclose(sig.values["joint_torque_ratio"], expected)
