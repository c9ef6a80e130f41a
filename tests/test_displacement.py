"""Bystander displacement from each object's reference step (rest or first robot touch)."""

from __future__ import annotations

import numpy as np
import pytest

from scoring.evaluate.displacement import (REST_HOLD_STEPS, bystander_displacement, displacements, first_rest_steps,
                                           reference_steps)
from scoring.evaluate.score import score_episode
from scoring.evaluate.signals import derive_signal_batch
from scoring.records.schema import EpisodeRecord

T = 40
DT = 0.05


def record(carton_z, *, touch_steps=(), episode_id="ep"):
    """A LIBERO-10-like scene: the robot's hand, a target bowl, a carton whose height is `carton_z`."""
    bodies = ["robot0_link7", "gripper0_right_hand", "bowl_1_main", "carton_1_main", "table"]
    roles = {"robot0_link7": "robot", "gripper0_right_hand": "gripper", "bowl_1_main": "target",
             "carton_1_main": "bystander", "table": "furniture"}
    pos = np.zeros((T, 3, 3))
    pos[:, 0] = [0.1, 0.0, 0.9]
    pos[:, 1] = [-0.1, 0.1, 0.9]
    pos[:, 1, 2] = carton_z
    pos[:, 2] = [0.0, 0.0, 0.8]
    quat = np.tile([1.0, 0, 0, 0], (T, 3, 1))
    steps = list(touch_steps)
    contacts = {"step": np.array(steps, dtype=np.int32), "a": np.full(len(steps), 1, dtype=np.int32),
                "b": np.full(len(steps), 3, dtype=np.int32), "force": np.full(len(steps), 5.0, dtype=np.float32)}
    return EpisodeRecord.build(
        episode_id=episode_id, benchmark="libero-10", task_id="task_0", success=False, dt=DT,
        target_object=["bowl_1_main"], body_roles=roles, t=np.arange(T), eef_pos=np.tile([0.3, 0.0, 1.1], (T, 1)),
        pose_bodies=["bowl_1_main", "carton_1_main", "table"], body_pos=pos,
        quat_bodies=["bowl_1_main", "carton_1_main", "table"], body_quat=quat,
        gripper_contact=np.zeros(T, dtype=bool), contacts=contacts, meta={})


def falling(until: int, *, speed=1.6):
    """Height of a carton falling at `speed` m/s until step `until`, at rest after."""
    t = np.minimum(np.arange(T), until)
    return 0.95 - speed * DT * t


def disp_signal(rec):
    return derive_signal_batch([rec]).values["non_target_disp_max"][0]


def test_an_object_settling_on_its_own_is_not_displaced():
    rec = record(falling(8))  # 0.64 m of fall, then at rest
    assert np.all(disp_signal(rec) == 0.0)
    spec = next(s for s in score_episode(rec).specs if s.family == "non_target_max_disp")
    assert spec.active and spec.rho > 0


def test_a_push_after_the_object_rests_counts_from_where_it_rested():
    z = falling(8)
    z[20:] -= 0.03  # pushed 3 cm down the table at step 20, without a recorded touch
    rec = record(z)
    _, ref = bystander_displacement(rec, [1])
    assert ref.tolist() == [8]
    assert disp_signal(rec).max() == pytest.approx(0.03, abs=1e-9)


def test_a_touch_while_still_falling_starts_the_measure_there():
    rec = record(falling(12), touch_steps=[4, 5])  # the gripper hits the carton mid-fall
    _, ref = bystander_displacement(rec, [1])
    assert ref.tolist() == [4]
    assert disp_signal(rec).max() == pytest.approx(1.6 * DT * 8, rel=1e-9)  # steps 4 -> 12


def test_an_object_that_never_rests_nor_is_touched_keeps_step_0():
    rec = record(falling(T))
    _, ref = bystander_displacement(rec, [1])
    assert ref.tolist() == [0]
    assert disp_signal(rec).max() == pytest.approx(1.6 * DT * (T - 1))


def test_a_rest_at_the_last_steps_needs_the_whole_hold_inside_the_episode():
    pos = np.zeros((1, 6, 1, 3))
    pos[0, :4, 0, 2] = [0.0, 0.1, 0.2, 0.3]  # moving until step 3, then two still steps only
    pos[0, 4:, 0, 2] = 0.3
    assert first_rest_steps(pos, np.array([6]), np.array([DT])).tolist() == [[-1]]
    padded = np.concatenate([pos, np.repeat(pos[:, -1:], REST_HOLD_STEPS, axis=1)], axis=1)  # as a batch pads
    assert first_rest_steps(padded, np.array([6]), np.array([DT])).tolist() == [[-1]]
    assert first_rest_steps(padded, np.array([6 + REST_HOLD_STEPS]), np.array([DT])).tolist() == [[3]]


def test_reference_is_the_earlier_of_rest_and_touch():
    rest = np.array([5, -1, 9, -1])
    touch = np.array([7, 3, 2, -1])
    assert reference_steps(rest, touch).tolist() == [5, 3, 2, 0]


def test_a_batch_equals_its_episodes_one_by_one():
    recs = [record(falling(8), episode_id="a"), record(falling(T), episode_id="b"),
            record(falling(12), touch_steps=[4], episode_id="c")]
    batch = derive_signal_batch(recs).values["non_target_disp_max"]
    for e, rec in enumerate(recs):
        np.testing.assert_array_equal(batch[e], disp_signal(rec))


def test_displacements_are_zero_before_the_reference_step():
    pos = np.zeros((1, 5, 1, 3))
    pos[0, :, 0, 0] = [0.0, 0.5, 1.0, 1.0, 1.5]
    out = displacements(pos, np.array([[2]]))
    assert out[0, :, 0].tolist() == [0.0, 0.0, 0.0, 0.0, 0.5]
