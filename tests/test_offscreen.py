"""GL contexts (replay/render/offscreen.py): the pool, contexts handed back across threads and
never left current, one GL context per pool, and closing one replayer (or a foreign renderer)
never touching another's GL objects."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402

from render_helpers import (BIG_TEXTURE_XML, VIOL, H, T, W, assert_all_equal, churn, fresh_frames,  # noqa: E402
                            toy_record, toy_scene)
from replay.render.offscreen import IDLE_CONTEXTS, pool_for_this_thread  # noqa: E402
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


# -- the life cycle across replayers: closing one never touches another's GL objects ----------
# Frames must equal fresh renders exactly: render_helpers.py says why.

def test_three_open_one_closed_then_a_fourth_opened_render_like_fresh_ones():
    # the sequence that turned frames to noise while closing a renderer freed GL objects by
    # name in whichever context was current: the others' textures and framebuffers
    recs = {i: toy_record(mjcf=toy_scene(i)) for i in range(4)}
    ref = fresh_frames(recs, [0, 6])
    rps = [Replayer(recs[i], width=W, height=H) for i in range(3)]
    for r in rps:
        r.frame(0)
    rps[0].close()
    with Replayer(recs[3], width=W, height=H) as fourth:
        assert np.array_equal(fourth.frame(0), ref[3, 0])
        for i in (1, 2):
            assert np.array_equal(rps[i].frame(0), ref[i, 0]), f"replayer {i} after another closed"
            assert np.array_equal(rps[i].frame(6, violation=VIOL), ref[i, 6])
    for r in rps[1:]:
        r.close()


def test_more_replayers_than_the_cache_holds_render_like_fresh_ones():
    recs = {i: toy_record(mjcf=toy_scene(i)) for i in range(5)}
    recs["0b"] = toy_record(mjcf=toy_scene(0))  # a second episode of scene 0: shares its context
    steps = [0, 6, T - 1]
    ref = fresh_frames(recs, steps)
    ref.update({("0b", s): ref[0, s] for s in steps})
    got = churn(recs, [0, 1, 2, 3, 0, "0b", 4, 1, 2, 3, "0b", 4, 0, 1], steps)
    assert len(got) > 100
    assert_all_equal(got, ref)
    assert len({ref[i, 0].tobytes() for i in range(5)}) == 5  # the scenes really differ


def test_a_foreign_renderer_closing_leaves_replayers_intact():
    """A plain mujoco.Renderer frees its GL objects in whatever context is current: with our
    contexts released after every frame, that is none of ours."""
    recs = {i: toy_record(mjcf=toy_scene(i)) for i in range(2)}
    ref = fresh_frames(recs, [0])
    with Replayer(recs[0], width=W, height=H) as a, Replayer(recs[1], width=W, height=H) as b:
        a.frame(0)
        foreign = mujoco.Renderer(a.model, H, W)
        foreign.update_scene(a.data)
        foreign.render()
        b.frame(0)  # b's context was current last
        foreign.close()
        assert np.array_equal(a.frame(0), ref[0, 0]) and np.array_equal(b.frame(0), ref[1, 0])


def test_replayers_of_one_scene_share_a_context_and_it_is_kept_for_reuse():
    pool = pool_for_this_thread()
    pool.close()
    rec = toy_record(mjcf=toy_scene(1))
    with Replayer(rec, width=W, height=H) as a, Replayer(rec, width=W, height=H) as b:
        assert a._ctx is b._ctx and pool.n_open == 1
        with Replayer(rec, width=W // 2, height=H // 2) as small:
            assert small._ctx is not a._ctx and pool.n_open == 2  # one context per frame size
    kept = a._ctx_key
    assert pool.n_open == 2  # unused now, kept for a re-opened scene
    with Replayer(rec, width=W, height=H):
        assert pool.n_open == 2
    for i in range(2, 3 + IDLE_CONTEXTS):
        Replayer(toy_record(mjcf=toy_scene(i)), width=W, height=H).close()
    assert pool.n_open == IDLE_CONTEXTS and kept not in [k[0] for k in pool._idle]
