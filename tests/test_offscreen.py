"""GL context pool (replay/offscreen.py): contexts handed back across threads, never left current."""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from render_helpers import H, W, fresh_frames, toy_record, toy_scene  # noqa: E402
from replay.offscreen import pool_for_this_thread  # noqa: E402
from replay.render import Replayer  # noqa: E402

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
