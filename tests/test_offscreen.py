"""GL context pool (replay/render/offscreen.py): contexts handed back across threads, never left current."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from render_helpers import BIG_TEXTURE_XML, VIOL, H, W, fresh_frames, toy_record, toy_scene  # noqa: E402
from replay.render.offscreen import pool_for_this_thread  # noqa: E402
from replay.render.replayer import Replayer  # noqa: E402

pytestmark = pytest.mark.render


def test_a_replayer_closed_on_another_thread_hands_its_context_back():
    rec = toy_record(mjcf=toy_scene(2))
    ref = fresh_frames({0: rec}, [0])
    pool = pool_for_this_thread()
    r = Replayer(rec, width=W, height=H)
    ctx = r._ctx
    r.frame(0)
    t = threading.Thread(target=r.close)  # e.g. garbage collection on a Streamlit thread
    t.start()
    t.join()
    assert r.closed and not ctx.closed  # not freed there: its thread may be rendering with it
    with Replayer(toy_record(mjcf=toy_scene(2)), width=W, height=H) as again:
        assert again._ctx is ctx  # handed back, then reused
        assert np.array_equal(again.frame(0), ref[0, 0])


def test_no_context_is_left_current_after_a_frame():
    import mujoco.egl as egl

    with Replayer(toy_record(mjcf=toy_scene(1)), width=W, height=H) as r:
        r.frame(0)
        assert not egl.EGL.eglGetCurrentContext()


def test_each_thread_renders_with_its_own_pool():
    rec = toy_record(mjcf=toy_scene(3))
    ref = fresh_frames({0: rec}, [0, 5])
    got, pools = {}, {}

    def work(name):
        pools[name] = pool_for_this_thread()
        with Replayer(rec, width=W, height=H) as r:
            got[name] = [r.frame(s) for s in (0, 5)]

    threads = [threading.Thread(target=work, args=(n,)) for n in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pools["a"] is not pools["b"]
    for name in "ab":
        assert np.array_equal(got[name][0], ref[0, 0]) and np.array_equal(got[name][1], ref[0, 5])


# -- "preview" textures: 2D textures box-downscaled for the upload only ----------------------

def test_preview_upload_leaves_the_shared_model_as_it_was():
    import mujoco

    from replay.render.offscreen import OffscreenContext

    m = mujoco.MjModel.from_xml_string(BIG_TEXTURE_XML)
    before = (m.tex_data.copy(), m.tex_width.copy(), m.tex_height.copy())
    assert list(m.tex_type) == [0, 2, 1] and (np.maximum(m.tex_width, m.tex_height // 6) > 256).all()  # 2D, skybox, cube
    OffscreenContext(m, width=W, height=H, max_texture_px=256).close()
    assert np.array_equal(m.tex_data, before[0])
    assert np.array_equal(m.tex_width, before[1]) and np.array_equal(m.tex_height, before[2])


def test_preview_frames_are_close_to_full_and_exact_among_themselves():
    rec = toy_record(mjcf=BIG_TEXTURE_XML.replace('<geom name="floor"', '<geom name="floor0"').replace(
        "</worldbody>", '<body name="box" pos="0 0 .095"><freejoint/><geom size=".1 .1 .1" rgba="0 0 1 1"/></body>'
        '<body name="ball" pos=".4 0 .095"><freejoint/><geom size=".1" rgba="0 .8 0 1"/></body></worldbody>'))
    with Replayer(rec, width=W, height=H, camera="cam") as full:
        a = full.frame(0, highlight=False)
    with Replayer(rec, width=W, height=H, camera="cam", textures="preview") as p1:
        b = p1.frame(0, highlight=False)
    pool_for_this_thread().close()
    with Replayer(rec, width=W, height=H, camera="cam", textures="preview") as p2:
        assert np.array_equal(b, p2.frame(0, highlight=False))  # a fresh preview context: the same bytes
    diff = np.abs(a.astype(int) - b.astype(int))
    assert 0 < diff.mean() < 25  # the 1024-px speckled texture, seen up close, shrunk to 256 px: blurred, not another image


def test_unknown_texture_setting_is_refused():
    from replay.render.highlight import RenderError

    with pytest.raises(RenderError, match="unknown textures 'tiny'; expected one of full, preview"):
        Replayer(toy_record(), width=W, height=H, textures="tiny")


# -- one context for the scenes that share their assets (LIBERO: a scene file per episode) --

def _toy_model(xml: str):
    import mujoco

    return mujoco.MjModel.from_xml_string(xml)


def test_scenes_with_the_same_assets_share_a_context_and_render_as_their_own():
    """Two scene texts that differ in the ball's colour: one context, and each scene's frames
    equal a fresh render from a context made from its own model."""
    a = toy_record(mjcf=toy_scene(1))
    b = toy_record(mjcf=toy_scene(1).replace('rgba="0 .8 0 1"', 'rgba="1 .8 0 1"'))
    steps = [0, 6]
    ref = fresh_frames({"a": a, "b": b}, steps)
    assert not np.array_equal(ref["a", 0], ref["b", 0])  # the scenes look different
    pool = pool_for_this_thread()
    pool.close()
    with Replayer(a, width=W, height=H) as ra, Replayer(b, width=W, height=H) as rb:
        assert ra._ctx is rb._ctx and pool.n_open == 1
        for s in steps:
            v = VIOL if s == VIOL.step else None  # highlighted as fresh_frames does
            assert np.array_equal(rb.frame(s, violation=v), ref["b", s])
            assert np.array_equal(ra.frame(s, violation=v), ref["a", s])


@pytest.mark.libero
@pytest.mark.slow
def test_demo_scenes_of_one_task_share_a_context_and_render_as_their_own():
    """The demo's libero_spatial episodes each have a scene file of their own, all with the
    same assets: the second opens no context, and both render as from their own."""
    from render_helpers import demo_records_of_distinct_scenes

    from replay.render.render_assets import render_assets_key
    from replay.render.scene_models import scene_model

    a, b = demo_records_of_distinct_scenes(2, "libero_spatial")
    assert render_assets_key(scene_model(a)) == render_assets_key(scene_model(b))
    size, steps = (480, 360), [0, 20]
    ref = fresh_frames({"a": a, "b": b}, steps, size=size, textures="preview")
    assert not np.array_equal(ref["a", 0], ref["b", 0])
    pool = pool_for_this_thread()
    pool.close()
    with Replayer(a, width=size[0], height=size[1], textures="preview") as ra, \
            Replayer(b, width=size[0], height=size[1], textures="preview") as rb:
        assert ra._ctx is rb._ctx and pool.n_open == 1
        for s in steps:
            assert np.array_equal(rb.frame(s), ref["b", s]) and np.array_equal(ra.frame(s), ref["a", s])


# -- one GL context per pool: the offscreen contexts of other asset sets live beside each other --

def _toy_frame(ctx, model) -> np.ndarray:
    import mujoco

    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    scene, cam = mujoco.MjvScene(model, maxgeom=1000), mujoco.MjvCamera()
    cam.type, cam.fixedcamid = mujoco.mjtCamera.mjCAMERA_FIXED, 0
    mujoco.mjv_updateScene(model, data, mujoco.MjvOption(), None, cam, mujoco.mjtCatBit.mjCAT_ALL, scene)
    return ctx.render(scene)


def test_a_pools_contexts_share_one_gl_context_and_render_as_in_their_own():
    """Scenes of different assets opened in one pool: one GL context, and each scene's frames,
    after the others were opened and some closed, equal a render in a GL context of its own."""
    recs = {i: toy_record(mjcf=toy_scene(i)) for i in range(4)}
    ref = fresh_frames(recs, [0, 6])
    pool = pool_for_this_thread()
    pool.close()
    opened = [Replayer(recs[i], width=W, height=H) for i in range(4)]
    assert len({r._ctx for r in opened}) == 4 and len({r._ctx._gl for r in opened}) == 1
    opened[1].close()
    opened[2].close()
    pool.close()  # frees the idle contexts of scenes 1 and 2 in the shared GL context
    with Replayer(recs[2], width=W, height=H) as again:
        assert again._ctx._gl is opened[0]._ctx._gl
        for r, i in ((opened[0], 0), (opened[3], 3), (again, 2)):
            for s in (0, 6):
                assert np.array_equal(r.frame(s, violation=VIOL if s == VIOL.step else None), ref[i, s])
    for r in opened:
        r.close()
    pool.close()
    assert pool._gl is None  # no offscreen context left: the GL context is freed too


def test_a_context_collected_while_its_gl_context_is_in_use_is_freed_there_later():
    """Garbage collection may drop an offscreen context on the very thread that holds the shared
    GL context current (inside a render): it must neither wait for that lock nor free in a
    context it does not hold, but leave the MjrContext to be freed the next time."""
    from replay.render.offscreen import OffscreenContext, SharedGL

    ma, mb = _toy_model(toy_scene(0)), _toy_model(toy_scene(1))
    own = OffscreenContext(mb, width=W, height=H)
    ref = _toy_frame(own, mb)
    own.close()
    gl = SharedGL(W, H)
    b = OffscreenContext(mb, width=W, height=H, gl=gl)
    a = OffscreenContext(ma, width=W, height=H, gl=gl)
    assert not np.array_equal(_toy_frame(a, ma), ref)

    def drop_a_while_current():
        nonlocal a
        with gl.current():
            del a  # the last reference: collected here, with the lock held

    t = threading.Thread(target=drop_a_while_current, daemon=True)
    t.start()
    t.join(timeout=30)
    assert not t.is_alive(), "collecting a context deadlocked on its GL context's lock"
    assert len(gl._orphans) == 1
    assert np.array_equal(_toy_frame(b, mb), ref)  # frees the orphan first, then renders b as its own
    assert not gl._orphans
    b.close()
    gl.free()
