"""The dashboard's render service (`dashboard.replay_bridge.RenderService`) under churn:
more episodes than it keeps replayers open for, opened, evicted and re-opened on its own
render thread, every frame compared with a fresh render of the same step."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

pytest.importorskip("mujoco")

from dashboard.replay_bridge import RenderService  # noqa: E402
from render_helpers import (BIG_TEXTURE_XML, H, T, VIOL, W, assert_all_equal,  # noqa: E402
                            demo_records_of_distinct_scenes, fresh_frames, toy_record, toy_scene)

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
    """The bug this guards: after the fourth episode opened, the kept ones rendered noise."""
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
    ref = fresh_frames(recs, steps, size=(W, H), textures="preview")  # the service's pages use preview textures
    got = through_service(recs, ["a", "b", "c", "d", "c", "b", "a"], steps)
    assert_all_equal(got, ref)


def test_the_service_writes_new_scenes_to_the_disk_cache_after_the_frame(tmp_path, monkeypatch):
    import time

    import replay.render.scene_cache as scene_cache

    from replay.render.render_assets import preview_texture_px
    from replay.render.preview_scene import preview_text
    from replay.render.scene_models import _resolved_scene, scene_key

    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", str(tmp_path))
    rec = toy_record(mjcf=toy_scene(7))  # a scene no other test compiles
    resolved, base, _ = _resolved_scene(scene_key(rec))
    folder = str(base) + os.sep
    written = tmp_path / (scene_cache.scene_digest(resolved, folder) + scene_cache.SUFFIX)
    svc = RenderService()
    try:
        assert scene_cache._DEFER[0]
        assert svc.frame("new", rec, 0, size=(W, H)).std() > 10
        deadline = time.monotonic() + 60
        while not written.is_file():  # another test's live service (the app's) may keep the writer waiting
            assert time.monotonic() < deadline, "the idle service's scene was never written"
            time.sleep(0.05)
        time.sleep(0.5)
        preview = preview_text(resolved, preview_texture_px(W, H))
        assert not (tmp_path / (scene_cache.scene_digest(preview, folder) + scene_cache.SUFFIX)).exists()  # small textures: no preview scene
        # files of other scenes may be here: a live service of an earlier test compiles while this env is set
    finally:
        svc.close()
        monkeypatch.setattr(scene_cache, "_DEFER", [False])


def test_a_closed_service_is_no_longer_asked_by_the_writer():
    """A closed service is idle forever: the scene cache's writer would take it as leave to
    write while a live one renders. `close()` withdraws it."""
    import replay.render.scene_cache as scene_cache

    svc = RenderService()
    assert svc.idle in scene_cache._WRITER["asks"]
    svc.close()
    assert svc.idle not in scene_cache._WRITER["asks"]


def test_a_frame_does_not_wait_for_a_scene_being_written(tmp_path, monkeypatch):
    """The disk-cache write of a scene compiled earlier (0.5-0.7 s for a LIBERO scene, a
    preview build 2-3.5 s) runs on the writer's own thread: a frame of another scene asked
    meanwhile is rendered while that write is still held, here until the frame is back."""
    import threading

    import mujoco

    import replay.render.scene_cache as scene_cache

    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", str(tmp_path))
    started, release = threading.Event(), threading.Event()
    real_save = mujoco.mj_saveModel

    def held_save(*args):
        started.set()
        release.wait(120)
        return real_save(*args)

    monkeypatch.setattr(mujoco, "mj_saveModel", held_save)
    svc = RenderService()
    try:
        assert svc.frame("written", toy_record(mjcf=toy_scene(8)), 0, size=(W, H)).std() > 10
        assert started.wait(60), "the idle service never wrote the new scene"
        assert svc.frame("other", toy_record(mjcf=toy_scene(9)), 0, size=(W, H), timeout=60).std() > 10
        assert not release.is_set() and scene_cache._WRITER["thread"].is_alive()
    finally:
        release.set()
        svc.close()
        monkeypatch.setattr(scene_cache, "_DEFER", [False])


def test_the_service_is_idle_for_the_writer_only_after_its_quiet_time(monkeypatch):
    """The scene cache's writer asks `idle()`: not while a job waits or runs, and not until
    the thread was idle `WRITE_QUIET_S` (the gap between a linked scene's open and the page's
    first frame request is not idle time)."""
    import threading

    import dashboard.replay_bridge as bridge

    running, release = threading.Event(), threading.Event()
    svc = RenderService()
    try:
        monkeypatch.setattr(bridge, "WRITE_QUIET_S", 0.0)
        svc.submit(lambda: None).result(60)
        assert svc.idle()
        monkeypatch.setattr(bridge, "WRITE_QUIET_S", 3600.0)
        assert not svc.idle()  # idle, but not for an hour
        monkeypatch.setattr(bridge, "WRITE_QUIET_S", 0.0)
        fut = svc.submit(lambda: running.set() or release.wait(60))
        assert running.wait(60) and not svc.idle()  # a job runs
        release.set()
        fut.result(60)
        assert svc.idle()
    finally:
        release.set()
        svc.close()


# -- batch pre-rendering for the player, cameras -----------------------------------------

from dashboard.replay_bridge import violation_first_order  # noqa: E402


@pytest.mark.parametrize("steps, focus, window, want", [
    (range(8), 4, None, [4, 5, 3, 6, 2, 7, 1, 0]),
    (range(10), 2, 1, [2, 3, 1, 0, 4, 5, 6, 7, 8, 9]),
    (range(5), None, 3, [0, 1, 2, 3, 4]),
    ([3, 3, 0, 9], 9, 2, [9, 0, 3]),
    ([], 4, 2, []),
])
def test_violation_first_order(steps, focus, window, want):
    assert violation_first_order(steps, focus, window=window) == want


def test_batch_frames_come_violation_first_and_equal_fresh_renders():
    from replay.render.offscreen import pool_for_this_thread
    from replay.render.replayer import Replayer

    rec = toy_record(mjcf=toy_scene(3))
    pool_for_this_thread().close()
    with Replayer(rec, width=W, height=H) as fresh:  # the violation passed for every step, as the batch does
        ref = {(0, s): fresh.frame(s, violation=VIOL) for s in range(T)}
    pool_for_this_thread().close()
    svc = RenderService()
    try:
        batch = svc.frames("toy", rec, None, (VIOL,), size=(W, H), window=3, encode=None)
        assert batch.order == [6, 7, 5, 8, 4, 9, 3, 0, 1, 2, 10, 11]
        assert batch.wait(120) and batch.complete and batch.done == batch.total == T and not batch.errors
        assert list(batch.ready) == batch.order  # completed in that order
        assert_all_equal([((0, s), img) for s, img in batch.ready.items()], ref)
        jpegs = svc.frames("toy", rec, [6, 0], (VIOL,), size=(W, H))
        assert jpegs.wait(60) and all(b[:2] == b"\xff\xd8" for b in jpegs.ready.values())
    finally:
        svc.close()


def test_a_page_frame_overtakes_a_running_batch_and_cancel_drops_the_rest():
    import threading

    rec = toy_record(mjcf=toy_scene(4))
    svc = RenderService()
    try:
        busy, hold = threading.Event(), threading.Event()
        svc.submit(busy.wait, 60)  # the render thread is busy while the batch and the page's frame queue up
        batch = svc.frames("toy", rec, None, (VIOL,), size=(W, H), encode=None)
        page = svc.submit(lambda: (svc._frame("toy", rec, 0, (), (W, H), True), batch.done, hold.wait(60))[1])
        busy.set()
        deadline = time.monotonic() + 60
        while not page.running() and time.monotonic() < deadline:
            time.sleep(0.01)
        batch.cancel()  # the user left the episode while the page's frame renders
        hold.set()
        assert page.result(60) == 0  # the page's frame ran before any of the batch
        svc.submit(lambda: None).result(60)  # every queued job has run: the cancelled steps skipped
        assert batch.complete and batch.done == 0 and batch.total == T
    finally:
        svc.close()


def test_service_renders_another_camera_and_refuses_an_unknown_one():
    from replay.render.highlight import RenderError

    rec = toy_record(mjcf=toy_scene(1))
    ref = fresh_frames({0: rec}, [2], camera="side")
    svc = RenderService()
    try:
        assert svc.cameras(rec) == ("cam", "side", "free", "free:violation")
        side = svc.frame("toy", rec, 2, size=(W, H), camera="side")
        assert_all_equal([((0, 2), side)], ref)
        assert not np.array_equal(side, svc.frame("toy", rec, 2, size=(W, H)))
        with pytest.raises(RenderError, match="unknown camera 'wrist'; valid cameras: cam, side"):
            svc.frame("toy", rec, 2, size=(W, H), camera="wrist")
    finally:
        svc.close()


def test_prewarm_opens_the_replayer_the_page_then_uses():
    rec = toy_record(mjcf=toy_scene(2))
    svc = RenderService()
    try:
        svc.prewarm("toy", rec, (W, H)).result(60)
        assert [k[3] for k in svc._open] == ["preview"]
        svc.frame("toy", rec, 1, size=(W, H))
        svc.frames("toy", rec, [0, 2], size=(W, H)).wait(60)
        assert len(svc._open) == 1  # the prewarmed replayer served both: nothing opened again
    finally:
        svc.close()


def test_batch_errors_are_one_line_messages_and_a_record_without_replay_is_refused():
    import dataclasses

    from scoring.errors import RecordError

    rec = toy_record(mjcf=toy_scene(0))
    svc = RenderService()
    try:
        batch = svc.frames("toy", rec, [0, 1], camera="wrist", size=(W, H))
        assert batch.wait(60) and not batch.ready and set(batch.errors) == {0, 1}
        assert all(m.startswith("RenderError: unknown camera 'wrist'") and "\n" not in m for m in batch.errors.values())
        with pytest.raises(RecordError, match="has no replay state"):
            svc.frames("bare", dataclasses.replace(rec, replay=None), None)
    finally:
        svc.close()


def test_a_scene_opens_with_a_short_gil_switch_interval_and_puts_it_back(monkeypatch):
    """Opening a scene hands the GIL back and forth (the texture shrink): the render thread
    opens it with a 0.5 ms switch interval and restores the process's own afterwards."""
    import sys

    import dashboard.replay_bridge as bridge
    from replay.render import replayer

    seen, real = [], replayer.Replayer.__init__

    def init(self, *args, **kwargs):
        seen.append(sys.getswitchinterval())
        real(self, *args, **kwargs)

    monkeypatch.setattr(replayer.Replayer, "__init__", init)
    before = sys.getswitchinterval()
    svc = RenderService()
    try:
        svc.prewarm("toy", toy_record(mjcf=toy_scene(1)), (W, H)).result(60)
        svc.frame("toy", toy_record(mjcf=toy_scene(1)), 1, size=(W, H))  # open already: no second open
    finally:
        svc.close()
    assert seen == [bridge.OPEN_SWITCH_INTERVAL_S] and sys.getswitchinterval() == before
