"""The dashboard's render service (`dashboard.replay_bridge.RenderService`) under churn:
more episodes than it keeps replayers open for, opened, evicted and re-opened on its own
render thread, every frame compared with a fresh render of the same step (issue 16)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

pytest.importorskip("mujoco")

from dashboard.replay_bridge import RenderService  # noqa: E402
from render_helpers import (H, T, VIOL, W, assert_all_equal, demo_records_of_distinct_scenes,  # noqa: E402
                            fresh_frames, toy_record, toy_scene)

pytestmark = pytest.mark.render


def through_service(records: dict, order, steps, *, max_open: int = 3) -> list:
    """Frames of `order` (keys of `records`) at `steps`, as the detail page asks for them."""
    svc = RenderService(max_open=max_open)
    try:
        return [((key, s), svc.frame(str(key), records[key], s, (VIOL,) if s == VIOL.step else (), size=(W, H)))
                for key in order for s in steps]
    finally:
        svc.close()


def test_service_frames_equal_fresh_renders_past_its_cache():
    recs = {i: toy_record(mjcf=toy_scene(i)) for i in range(5)}
    steps = [0, VIOL.step, T - 1]
    ref = fresh_frames(recs, steps)
    got = through_service(recs, [0, 1, 2, 3, 1, 4, 0, 2, 3, 4, 1, 0], steps)
    assert_all_equal(got, ref)


def test_service_frames_of_evicted_and_kept_replayers_after_a_close_on_its_thread():
    """The issue's report: after the fourth episode opened, the kept ones rendered noise."""
    recs = {i: toy_record(mjcf=toy_scene(i)) for i in range(4)}
    ref = fresh_frames(recs, [0, 3])
    got = through_service(recs, [0, 1, 2, 3, 2, 1, 3, 0], [0, 3])
    assert_all_equal(got, ref)
    assert not np.array_equal(ref[1, 0], ref[2, 0])


@pytest.mark.libero
@pytest.mark.slow
def test_service_on_demo_scenes_past_its_cache():
    recs = dict(zip("abcd", demo_records_of_distinct_scenes(4)))
    steps = [4]
    ref = fresh_frames(recs, steps, size=(W, H))
    got = through_service(recs, ["a", "b", "c", "d", "c", "b", "a"], steps)
    assert_all_equal(got, ref)


def test_the_service_writes_new_scenes_to_the_disk_cache_after_the_frame(tmp_path, monkeypatch):
    import time

    import replay.scene_cache as scene_cache

    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", str(tmp_path))
    rec = toy_record(mjcf=toy_scene(7))  # a scene no other test compiles
    svc = RenderService()
    try:
        assert scene_cache._DEFER[0]
        assert svc.frame("new", rec, 0, size=(W, H)).std() > 10
        deadline = time.monotonic() + 30
        while not any(tmp_path.glob("*" + scene_cache.SUFFIX)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(list(tmp_path.glob("*" + scene_cache.SUFFIX))) == 1
    finally:
        svc.close()
        monkeypatch.setattr(scene_cache, "_DEFER", [False])
