"""replay.record.settle: at-rest detection on tiny inline scenes (no LIBERO needed)."""

from __future__ import annotations

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

from replay.record.settle import FreeBodySpeeds, SettleCriterion, settle  # noqa: E402

SCENE = """
<mujoco>
  <option timestep="0.002" gravity="0 0 {g}"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1"/>
    <body name="box" pos="0 0 {z}">
      <freejoint/>
      <geom type="box" size="0.05 0.05 0.05" mass="0.2"/>
    </body>
    <body name="fixed" pos="0.5 0 0.05"><geom type="box" size="0.05 0.05 0.05"/></body>
  </worldbody>
</mujoco>
"""


def scene(*, z: float, g: float = -9.81):
    model = mujoco.MjModel.from_xml_string(SCENE.format(z=z, g=g))
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    return model, data


def control_step(model, data, substeps: int = 25):
    """One 50 ms control step, like robosuite's 25 physics substeps."""
    def step():
        for _ in range(substeps):
            mujoco.mj_step(model, data)
        return data.time
    return step


def test_a_body_at_rest_keeps_the_standard_protocol():
    model, data = scene(z=0.05)  # resting on the floor
    result, last = settle(control_step(model, data), model, data)
    assert (result.steps, result.settled, result.moving_body) == (10, True, None)
    assert last == pytest.approx(10 * 0.05)
    assert result.linear_speed < 0.002


def test_a_falling_body_takes_longer_and_the_count_is_exact():
    model, data = scene(z=1.5)  # falls 1.45 m: about 0.55 s in the air, then bounces
    result, _ = settle(control_step(model, data), model, data)
    assert result.settled and result.steps > 10
    # reference: replay the same steps by hand and find the first hold of 3 still steps
    model2, data2 = scene(z=1.5)
    step, speeds, still = control_step(model2, data2), FreeBodySpeeds(model2), []
    for _ in range(result.steps):
        step()
        lin, ang = speeds(data2)
        still.append(bool((lin < 0.002).all() and (ang < 0.05).all()))
    assert all(still[-3:]) and not all(still[-4:])
    assert result.meta() == {"settle_steps": result.steps, "settled": True,
                             "settle_linear_speed": result.linear_speed,
                             "settle_angular_speed": result.angular_speed}


def test_a_body_that_never_rests_is_reported_unsettled_at_the_cap():
    model, data = scene(z=0.5, g=0.0)
    data.qvel[:3] = [0.1, 0.0, 0.0]  # drifts at 10 cm/s forever in zero gravity
    crit = SettleCriterion(max_steps=40)
    result, _ = settle(control_step(model, data), model, data, criterion=crit)
    assert (result.steps, result.settled, result.moving_body) == (40, False, "box")
    assert result.linear_speed == pytest.approx(0.1, rel=1e-6)
    assert result.meta()["settle_moving_body"] == "box"


def test_hold_and_min_steps_are_respected():
    model, data = scene(z=0.05)
    result, _ = settle(control_step(model, data), model, data, criterion=SettleCriterion(min_steps=0, hold_steps=5))
    assert result.steps == 5


def test_speeds_read_every_free_body_and_nothing_else():
    model, data = scene(z=0.05)
    speeds = FreeBodySpeeds(model)
    assert speeds.names == ("box",)
    data.qvel[:] = [0.3, 0.4, 0.0, 0.0, 0.0, 2.0]
    lin, ang = speeds(data)
    np.testing.assert_allclose(lin, [0.5])
    np.testing.assert_allclose(ang, [2.0])


@pytest.mark.parametrize("kwargs", [dict(linear_speed=0), dict(angular_speed=-1), dict(hold_steps=0),
                                    dict(min_steps=400), dict(hold_steps=301)])
def test_bad_criteria_are_rejected(kwargs):
    with pytest.raises(ValueError):
        SettleCriterion(**kwargs)
