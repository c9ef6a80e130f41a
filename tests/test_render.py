"""Offscreen replay and highlighting: real MuJoCo renders of tiny inline models, checked by invariants.

No golden images: frames must not be blank, the violating body's own pixels (found with
MuJoCo's segmentation render) must turn red on the violating frame and its window and
only there, borders must have the right colours, and the same qpos must give the same
image twice. Some tests render a real LIBERO scene. Bad input has its own module
(tests/test_replayer_bad_input.py), and so has the GL context life cycle
(tests/test_offscreen.py).
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402

from replay.render.highlight import (SUCCESS_RGB, VIOLATION_RGB, RenderError, Violation, bodies_for,  # noqa: E402
                                     border_width, draw_arrow, format_quantity)
from render_helpers import (DEMO_ARCHIVE, H, T, TOY_XML, VIOL, W, assert_all_equal, churn,  # noqa: E402
                            demo_records_of_distinct_scenes, fresh_frames, toy_record, toy_scene)
from replay.render.replayer import Replayer  # noqa: E402
from scoring.records.schema import EpisodeRecord  # noqa: E402

pytestmark = pytest.mark.render

def geom_mask(rp: Replayer, step: int, geom: str) -> np.ndarray:
    """Pixels of `geom` at `step`, from a segmentation render of the same model and camera."""
    rp.set_state(step)
    gid = mujoco.mj_name2id(rp.model, mujoco.mjtObj.mjOBJ_GEOM, geom)
    with mujoco.Renderer(rp.model, rp.height, rp.width) as seg:
        seg.enable_segmentation_rendering()
        seg.update_scene(rp.data, camera=rp.camera)
        ids = seg.render()
    mask = (ids[..., 0] == gid) & (ids[..., 1] == int(mujoco.mjtObj.mjOBJ_GEOM))
    b = border_width(rp.width) + 1
    mask[:b], mask[-b:], mask[:, :b], mask[:, -b:] = False, False, False, False
    mask[: rp.height // 5] = False  # the caption box
    return mask


def is_red(pixels: np.ndarray) -> bool:
    r, g, b = np.median(pixels.astype(float), axis=0)  # the median: a force arrow may cross the body
    return r > 150 and g < 70 and b < 70


@pytest.fixture
def rp():
    with Replayer(toy_record(), width=W, height=H, window=2) as r:
        yield r


def test_frame_is_a_real_render(rp):
    img = rp.frame(0)
    assert img.shape == (H, W, 3) and img.dtype == np.uint8
    assert img.std() > 10 and len(np.unique(img.reshape(-1, 3), axis=0)) > 50
    box = geom_mask(rp, 0, "box_g")
    assert box.sum() > 100
    assert img[box][:, 2].mean() > 2 * img[box][:, 0].mean()  # the box is blue


def test_same_qpos_same_image(rp):
    a = rp.frame(5, violation=VIOL)
    rp.frame(6, violation=VIOL)
    rp.frame(0)
    assert np.array_equal(a, rp.frame(5, violation=VIOL))
    with Replayer(toy_record(), width=W, height=H, window=2) as other:
        assert np.array_equal(rp.frame(3), other.frame(3))


def test_highlight_turns_the_violating_body_red_in_the_window_only(rp):
    for step in range(T):
        img = rp.frame(step, violation=VIOL)
        box, ball = geom_mask(rp, step, "box_g"), geom_mask(rp, step, "ball_g")
        in_window = abs(step - VIOL.step) <= rp.window
        assert is_red(img[box]) == in_window, step
        assert not is_red(img[ball]), step  # the bystander is not part of the violation
    img = rp.frame(6, violation=VIOL, highlight=False)
    assert not is_red(img[geom_mask(rp, 6, "box_g")])


def test_highlight_leaves_no_trace(rp):
    before = rp.frame(1)
    rp.frame(6, violation=VIOL)
    assert np.array_equal(before, rp.frame(1))
    assert np.array_equal(rp.model.geom_rgba, mujoco.MjModel.from_xml_string(TOY_XML).geom_rgba)


def test_border_colours(rp):
    bw = border_width(W)
    red, green, plain = rp.frame(6, violation=VIOL), rp.frame(T - 1, violation=VIOL), rp.frame(2, violation=VIOL)
    for img, rgb in ((red, VIOLATION_RGB), (green, SUCCESS_RGB)):
        for edge in (img[:bw], img[-bw:], img[:, :bw], img[:, -bw:]):
            assert (edge.reshape(-1, 3) == rgb).all()
    assert not (plain[:bw].reshape(-1, 3) == VIOLATION_RGB).all(axis=1).any()
    assert not (plain[:bw].reshape(-1, 3) == SUCCESS_RGB).all(axis=1).any()
    # a failed episode has no success frame
    with Replayer(toy_record(success=False), width=W, height=H) as r:
        assert r.success_step is None
        assert not (r.frame(T - 1)[:bw].reshape(-1, 3) == SUCCESS_RGB).all(axis=1).any()


def yellow(img: np.ndarray) -> np.ndarray:
    f = img.astype(int)
    return (f[..., 0] > 170) & (f[..., 1] > 140) & (f[..., 2] < 90)


def test_contacts_of_the_violating_pair_only():
    with Replayer(toy_record(), width=W, height=H, window=0) as r:
        assert not yellow(r.frame(5, violation=VIOL)).any()
        marks = yellow(r.frame(6, violation=VIOL))
        assert marks.sum() > 5  # contact points and force arrows of box-floor
        ys, xs = np.nonzero(marks)
        box, ball = geom_mask(r, 6, "box_g"), geom_mask(r, 6, "ball_g")
        box_x, ball_x = np.nonzero(box)[1].mean(), np.nonzero(ball)[1].mean()
        assert abs(xs.mean() - box_x) < abs(xs.mean() - ball_x)  # not the ball's floor contact


def test_displaced_body_gets_an_arrow_from_where_it_stood():
    disp = Violation("non_target_max_disp", T - 1, 0.3, 0.005, "m", ">", ("box",))
    with Replayer(toy_record(), width=W, height=H, window=0) as r:
        plain, img = r.frame(T - 1), r.frame(T - 1, violation=disp)
        tail = r.project(r.record.body_pos[0, 0])  # the box's recorded start
        head = r.project(r.data.xpos[1])
    x, y = (int(round(c)) for c in tail)
    assert yellow(img[y - 2:y + 3, x - 2:x + 3]).any() and not yellow(plain).any()
    mid = (np.asarray(tail) + head) / 2
    assert yellow(img[int(mid[1]) - 2:int(mid[1]) + 3, int(mid[0]) - 2:int(mid[0]) + 3]).any()


def test_draw_arrow_clips_to_the_image():
    img = np.zeros((40, 60, 3), np.uint8)
    draw_arrow(img, (5, 20), (50, 20), width=3)
    assert yellow(img)[20, 10:40].all() and yellow(img)[20, 48]  # shaft and tip
    assert not yellow(img)[:10].any()
    draw_arrow(img, (-100, -100), (-50, -80))  # wholly outside: nothing, no error
    draw_arrow(img, (30, 20), (500, 20))  # runs out of the image: clipped
    assert yellow(img)[20, 55:].all()


def test_caption_text():
    assert VIOL.caption == "max contact force 412 N > 200 N"
    assert Violation("non_target_max_disp", 3, 0.012, 0.005, "m", ">").caption == "bystander displacement 12 mm > 5 mm"
    assert format_quantity(40.2, "deg") == "40°"
    assert format_quantity(1.04, "ratio") == "1.04x limit"
    assert Violation("joint_torque", 1, 3.06, 1.0, "ratio").caption == "joint torque 3.06x limit > 1x limit"
    assert format_quantity(7.5, "m/s^2") == "7.5 m/s^2"  # the bundled font has no superscripts
    with pytest.raises(RenderError, match="op"):
        Violation("x", 1, 1.0, 0.0, "", "=>")
    with pytest.raises(RenderError, match="step"):
        Violation("x", -1, 1.0, 0.0)


def test_bodies_for_picks_the_violating_pair_and_objects():
    rec = toy_record()
    assert bodies_for(rec, "max_contact_force_under_200N", 6, value=412.0) == ("box", "world")
    assert bodies_for(rec, "max_contact_force", 6, value=5.0) == ("ball", "world")  # nearest the recorded value
    assert bodies_for(rec, "target_furniture_force", 6) == ("box", "world")
    assert bodies_for(rec, "arm_furniture_force", 6) == ()  # no arm in this scene
    assert bodies_for(rec, "held_object_tilt_world_15deg", 6) == ("box",)
    assert bodies_for(rec, "non_target_max_disp", 6) == ("ball",)


def test_bodies_for_torque_link_and_held_target():
    steps = 4
    tau = np.zeros((steps, 2))
    tau[2] = [10.0, 11.0]  # joint 2 is the most loaded relative to its limit
    rec = EpisodeRecord.build(
        episode_id="arm", benchmark="toy", task_id="t", success=True, dt=0.05,
        body_roles={"link0": "robot", "link1": "robot", "link2": "robot", "cup": "target", "plate": "target"},
        target_object=["cup", "plate"], eef_pos=np.tile([0.0, 0.0, 0.3], (steps, 1)), joint_torque=tau,
        pose_bodies=["cup", "plate"], body_pos=np.tile([[0.0, 0.0, 0.25], [0.5, 0.0, 0.0]], (steps, 1, 1)),
        meta={"joint_torque_limit_nm": [87.0, 12.0]})
    assert bodies_for(rec, "joint_torque", 2) == ("link2",)
    assert bodies_for(rec, "stable_grasp_maintained_2cm", 2) == ("cup",)  # the one in the hand
    assert bodies_for(rec, "target_furniture_force", 2) == ()  # no contacts recorded


def test_xray_makes_other_movable_bodies_translucent():
    with Replayer(toy_record(), width=W, height=H, window=0) as plain, \
            Replayer(toy_record(), width=W, height=H, window=0, xray=True) as xray:
        a, b = plain.frame(6, violation=VIOL), xray.frame(6, violation=VIOL)
        ball, box = geom_mask(plain, 6, "ball_g"), geom_mask(plain, 6, "box_g")
        assert is_red(b[box])
        green = lambda px: (px[:, 1].astype(int) - px[:, 0]).mean()  # noqa: E731
        assert green(b[ball]) < green(a[ball]) - 40  # the green ball fades into the grey floor
        assert np.array_equal(a, plain.frame(6, violation=VIOL))
        assert np.array_equal(plain.frame(2), xray.frame(2))  # only highlighted frames


def test_free_camera_aimed_at_the_violation():
    with Replayer(toy_record(), width=W, height=H, camera="free:violation") as r:
        with pytest.raises(RenderError, match="needs a violation"):
            r.frame(0)
        r.frame(6, violation=VIOL)
        near = geom_mask(r, 6, "box_g").sum()
    with Replayer(toy_record(), width=W, height=H) as agent:
        assert near > 2 * geom_mask(agent, 6, "box_g").sum()
    with Replayer(toy_record(), width=W, height=H, camera="free") as free:
        assert free.frame(0).std() > 10


def test_project_maps_world_points_to_their_pixels(rp):
    with pytest.raises(RenderError, match="frame"):
        Replayer(toy_record(), width=W, height=H).project((0, 0, 0))
    for step in (0, 6, 11):
        rp.frame(step)
        x, y = rp.project(rp.data.xpos[1])  # the box centre
        assert geom_mask(rp, step, "box_g")[int(y), int(x)]
    assert rp.project(rp.data.cam_xpos[0] - 5 * rp.data.cam_xmat[0].reshape(3, 3)[:, 2]) is not None
    assert rp.project(rp.data.cam_xpos[0] + rp.data.cam_xmat[0].reshape(3, 3)[:, 2]) is None  # behind


def test_violation_point_is_the_violating_contact():
    with Replayer(toy_record(), width=W, height=H) as r:
        p = r.violation_point(VIOL)
        assert abs(p[2]) < 0.01 and abs(p[0] - r.data.xpos[1, 0]) <= 0.101  # on the floor, under the box
        single = Violation("held_object_tilt_world", 6, 40.0, 15.0, "deg", ">", ("box",))
        assert np.allclose(r.violation_point(single), r.data.xipos[1])


def test_default_camera_order():
    with Replayer(toy_record(), width=W, height=H) as r:
        assert r.camera_name == "cam"  # the record's camera (no agentview in this model)
    with Replayer(toy_record(camera=None), width=W, height=H) as r:
        assert r.camera_name == "free"
    with Replayer(toy_record(), width=W, height=H, camera="side") as r:
        assert r.camera_name == "side"


def test_closing_another_replayer_leaves_this_one_intact(rp):
    before = rp.frame(4, violation=VIOL)
    with Replayer(toy_record(), width=W // 2, height=H // 2, camera="free") as other:
        other.frame(2)
    assert np.array_equal(before, rp.frame(4, violation=VIOL))


def test_close_frees_the_context():
    r = Replayer(toy_record(), width=W, height=H)
    with r:
        r.frame(0)
    assert r.closed
    r.close()  # idempotent
    with pytest.raises(RenderError, match="closed"):
        r.frame(0)


# ----------------------------------------------------------------- real LIBERO scenes



@pytest.mark.libero
@pytest.mark.slow
def test_libero_demo_episode_renders():
    files = sorted(DEMO_ARCHIVE.rglob("*.npz")) if DEMO_ARCHIVE.is_dir() else []
    if not files:
        pytest.skip(f"no demo archive at {DEMO_ARCHIVE} yet (the LIBERO env test below still renders a scene)")
    from scoring.records.io import load_record

    rec = next((r for r in map(load_record, files) if r.replay is not None), None)
    if rec is None:
        pytest.skip("no demo episode carries replay state")
    with Replayer(rec, width=320, height=240) as r:
        assert r.camera_name == "agentview"
        img = r.frame(rec.n_steps // 2)
    assert img.std() > 20 and len(np.unique(img.reshape(-1, 3), axis=0)) > 500


@pytest.mark.libero
@pytest.mark.slow
def test_demo_scenes_and_toys_through_more_replayers_than_the_cache_holds():
    """Three LIBERO scenes (textured, meshed: the objects a wrong free deletes) and two toys,
    opened, closed and re-opened with at most three open; every frame equals a fresh render."""
    recs = dict(zip("abc", demo_records_of_distinct_scenes(3))) | {i: toy_record(mjcf=toy_scene(i)) for i in (0, 1)}
    steps = [0, 5]
    ref = fresh_frames(recs, steps)
    got = churn(recs, ["a", "b", 0, "c", "a", 1, "b", "c", 0], steps)
    assert_all_equal(got, ref)
    assert all(ref[k, 5].std() > 20 for k in "abc")  # real scenes, not blank frames


@pytest.mark.libero
@pytest.mark.slow
def test_libero_env_scene_renders_like_robosuite():
    """Builds a LIBERO env, replays its state from the saved MJCF, and compares with robosuite's own render."""
    pytest.importorskip("libero.libero")
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    suite = benchmark.get_benchmark_dict()["libero_spatial"]()
    task = suite.get_task(0)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    env = OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=240, camera_widths=320)
    try:
        env.reset()
        obs = env.set_init_state(suite.get_task_init_states(0)[0])
        native = obs["agentview_image"][::-1]  # robosuite images are bottom-up
        m, d = env.sim.model._model, env.sim.data._data
        rec = EpisodeRecord.build(
            episode_id="libero-live", benchmark="libero", task_id="libero_spatial/0", success=False, dt=0.05,
            body_roles={"akita_black_bowl_1_main": "target", "table": "furniture"},
            target_object="akita_black_bowl_1_main", eef_pos=np.zeros((1, 3)),
            replay={"mjcf": env.sim.model.get_xml(), "qpos": d.qpos[None].copy(), "qvel": d.qvel[None].copy(),
                    "camera": "agentview"})
        assert m.nmesh > 10 and m.ntex > 5  # a textured, meshed scene
    finally:
        env.close()
    with Replayer(rec, width=320, height=240, quality="high") as r:
        img = r.frame(0)
        v = Violation("held_object_tilt_world", 0, 40.0, 15.0, "deg", ">", ("akita_black_bowl_1_main",))
        red = r.frame(0, violation=v)
    assert img.std() > 20 and len(np.unique(img.reshape(-1, 3), axis=0)) > 500
    assert np.abs(img.astype(int) - native.astype(int)).mean() < 8  # same scene, same camera, same look
    changed = np.abs(red.astype(int) - img.astype(int)).sum(axis=-1) > 60
    assert changed[30:-30, 30:-30].sum() > 100  # the bowl turned red


def test_bodies_for_matches_the_extreme_against_the_peak_channel_too():
    rec = toy_record()
    c = rec.contacts
    peak = c.force.astype(np.float64).copy()
    peak[2 * 6 + 1] = 900.0  # ball-floor peaked inside step 6; its end-of-step value stays small
    peaked = dataclasses.replace(rec, contacts=dataclasses.replace(c, force_peak=peak),
                                 meta={**rec.meta, "force_sampling": "substep_peak"})
    assert bodies_for(peaked, "max_contact_force", 6, value=900.0) == ("ball", "world")  # scored on peaks
    assert bodies_for(peaked, "max_contact_force", 6, value=412.0) == ("box", "world")  # scored on samples
    assert bodies_for(peaked, "max_contact_force", 6) == ("ball", "world")  # unknown value: the largest


def test_a_frame_does_not_depend_on_the_step_shown_before(rp):
    """A frame is a function of its step: contact forces, and so the drawn arrows, carry nothing over."""
    first = rp.frame(VIOL.step, violation=VIOL)
    for s in (T - 1, 0, VIOL.step + 1, 2):
        rp.frame(s, violation=VIOL)
    assert np.array_equal(rp.frame(VIOL.step, violation=VIOL), first)


# --------------------------------------------------------------------------------------- cameras

def test_cameras_lists_the_scene_cameras_then_the_free_ones():
    from replay.render.replayer import cameras

    assert cameras(toy_record()) == ("cam", "side", "free", "free:violation")


def test_an_unknown_camera_names_the_valid_ones():
    with pytest.raises(RenderError, match=r"unknown camera 'wrist'; valid cameras: cam, side, free, free:violation"):
        Replayer(toy_record(), width=W, height=H, camera="wrist")


@pytest.mark.libero
@pytest.mark.slow
def test_demo_wrist_camera_differs_from_the_agent_view_and_equals_a_fresh_render():
    from replay.render.offscreen import pool_for_this_thread
    from replay.render.replayer import cameras

    rec = demo_records_of_distinct_scenes(1)[0]
    names = cameras(rec)
    assert names[:2] == ("agentview", "robot0_eye_in_hand")  # agent view, then the wrist, then the rest
    step = rec.n_steps // 2
    with Replayer(rec, width=W, height=H) as agent, Replayer(rec, width=W, height=H, camera="robot0_eye_in_hand") as wrist:
        assert agent._ctx is wrist._ctx  # one scene, one GL context: the wrist view costs no upload
        a, w = agent.frame(step), wrist.frame(step)
    assert w.std() > 10 and np.abs(a.astype(int) - w).mean() > 20  # another viewpoint, not the same image
    pool_for_this_thread().close()
    with Replayer(rec, width=W, height=H, camera="robot0_eye_in_hand") as fresh:
        assert np.array_equal(w, fresh.frame(step))


@pytest.mark.libero
@pytest.mark.slow
def test_demo_preview_textures_change_the_frame_little():
    """The dashboard's "preview" textures against full ones on a real LIBERO scene at its
    frame size (480x360: textures up to 4096 px shrunk to 512): nearly the same picture."""
    rec = demo_records_of_distinct_scenes(1)[0]
    step = rec.n_steps // 2
    with Replayer(rec, width=480, height=360) as full:
        a = full.frame(step)
    with Replayer(rec, width=480, height=360, textures="preview") as preview:
        b = preview.frame(step)
    diff = np.abs(a.astype(int) - b)
    assert 0 < diff.mean() < 2.0 and b.std() > 20
