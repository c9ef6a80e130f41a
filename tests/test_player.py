"""The timeline player's server side (`dashboard.player`): the pre-render order, the frames
filled by the real render thread (`RenderService.frames`, every frame equal to the service's
own render of that step), the component folder with its local vega bundle, and the seek
bookkeeping."""

from __future__ import annotations

import base64
import io
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from dashboard import player  # noqa: E402


@pytest.mark.parametrize("n,v,head", [(10, 4, [4, 5, 3, 6, 2]), (5, None, [0, 1, 2, 3, 4]), (6, 5, [5, 4, 3, 2, 1, 0]),
                                      (4, 0, [0, 1, 2, 3]), (3, 99, [2, 1, 0])])
def test_the_players_order_starts_at_the_violation_and_covers_every_step_once(n, v, head):
    from dashboard.frame_batch import violation_first_order

    order = violation_first_order(range(n), v, window=None)  # what player.frames asks for
    assert order[:len(head)] == head
    assert sorted(order) == list(range(n))


def test_violated_by_step_names_the_specs_of_each_violated_step():
    tr = pd.DataFrame({"step": [0, 1, 1, 2], "spec": ["a", "a", "b", "b"], "violated": [False, True, True, False]})
    assert player.violated_by_step(tr) == {"1": "a, b"}
    assert player.violated_by_step(tr.iloc[:0]) == {}


def test_component_dir_holds_the_page_the_script_and_the_vega_bundle(tmp_path, monkeypatch):
    pytest.importorskip("vl_convert")
    monkeypatch.setattr(player, "installed_vega_bundle", lambda: tmp_path / "not installed.js")  # made here
    out = player.component_dir(tmp_path)
    html = (out / "index.html").read_text()
    assert 'src="player.js" data-vega="vega-bundle.js"' in html  # the player loads the bundle itself
    assert "http://" not in html and "https://" not in html  # nothing from a CDN
    bundle = (out / "vega-bundle.js").read_text()
    assert "window.vegaEmbed" in bundle and len(bundle) > 100_000
    assert (out / "player.js").read_text() == (player.STATIC / "player.js").read_text()
    # three.js, vendored with its licence, served from the component's folder: no CDN
    for name in ("three.module.js", "three.core.js", "OrbitControls.js", "LICENSE-three.txt"):
        assert (out / "vendor" / name).stat().st_size == (player.STATIC / "vendor" / name).stat().st_size
    assert '"three": "./vendor/three.module.js"' in html
    for name in ("webview.js", "mujoco_look.js"):
        web = (out / name).read_text()
        assert "http://" not in web and "https://" not in web and 'from "three"' in web


def test_the_vega_bundle_is_copied_from_the_install_and_the_web_folder_needs_none(tmp_path, monkeypatch):
    pytest.importorskip("vl_convert")
    installed = tmp_path / "share" / "vega-bundle.js"
    installed.parent.mkdir()
    installed.write_text("window.vegaEmbed = 'as installed';")
    monkeypatch.setattr(player, "installed_vega_bundle", lambda: installed)
    bare = player.component_dir(tmp_path / "a", vega=False)
    assert (bare / "player.js").is_file() and not (bare / "vega-bundle.js").exists()
    out = player.component_dir(tmp_path / "b")
    assert (out / "vega-bundle.js").read_text() == installed.read_text()  # copied, not made
    installed.write_text("changed")
    assert (player.component_dir(tmp_path / "b") / "vega-bundle.js").read_text() != "changed"  # kept once there
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_the_install_script_made_the_vega_bundle_where_the_player_looks():
    pytest.importorskip("vl_convert")
    installed = player.installed_vega_bundle()  # scripts/install.sh, which the test command runs first
    assert installed.is_relative_to(sys.prefix)
    assert installed.is_file(), f"{installed}: scripts/install.sh did not make the vega bundle"
    assert "window.vegaEmbed" in installed.read_text()


def _until_complete(batch, timeout: float = 120.0) -> None:
    """Polls the batch as the page does (touching it) until every frame is in."""
    deadline = time.time() + timeout
    while not batch.complete and time.time() < deadline:
        batch.touch()
        time.sleep(0.05)


def _pixels(url: str) -> np.ndarray:
    from PIL import Image

    assert url.startswith("data:image/jpeg;base64,")
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))


@pytest.mark.render
def test_the_players_frames_come_violation_first_and_equal_the_services_render():
    pytest.importorskip("mujoco")
    import threading

    from PIL import Image

    from dashboard.replay_bridge import PLAYER, RenderService, jpeg
    from render_helpers import H, T, VIOL, W, toy_record

    rec = toy_record()
    svc = RenderService()
    try:
        batch = player.frames(svc, "toy", rec, (VIOL,), T, VIOL.step, size=(W, H))
        _until_complete(batch)
        assert batch.complete and not batch.errors and not batch.cancelled
        frames = batch.snapshot()
        assert sorted(frames) == list(range(T))
        assert list(frames)[0] == VIOL.step  # the violating step was rendered first
        assert batch.first_frame_s is not None and batch.done_s >= batch.first_frame_s
        for step in (0, VIOL.step, T - 1):
            want = svc.frame("toy", rec, step, (VIOL,), size=(W, H))
            want = np.asarray(Image.open(io.BytesIO(jpeg(want, quality=player.FRAME_QUALITY))).convert("RGB"))
            assert np.array_equal(_pixels(frames[step]), want), f"step {step}: the frame differs from the service's"
        assert not np.array_equal(_pixels(frames[0]), _pixels(frames[T - 1]))
        # frames the user left (cancelled, or nobody polled them for their idle time) render nothing more
        gate = threading.Event()
        svc.submit(gate.wait, 30)  # the render thread waits while both are queued
        left = player.frames(svc, "toy", rec, (), T, None, size=(W, H))
        left.cancel()
        idle = svc.frames("toy", rec, None, (), size=(W, H), idle_stop_s=1.0)
        time.sleep(1.5)  # nobody polls it meanwhile
        gate.set()
        # every queued job has run: queued behind the batches' jobs at their priority (at a
        # page's priority it overtook them, and on a slow machine ran before they had)
        svc.submit(lambda: None, priority=PLAYER).result(60)
        assert left.snapshot() == {} and idle.snapshot() == {}
        assert idle.complete and idle.cancelled
        assert idle.stopped_idle and not left.stopped_idle and not left.resume()
        # the user comes back to the idle one: what it left is rendered after all
        assert idle.resume() and not idle.complete
        _until_complete(idle)
        assert idle.complete and not idle.cancelled and sorted(idle.snapshot()) == list(range(T))
    finally:
        svc.close()


@pytest.mark.render
def test_the_players_frames_from_the_wrist_camera_equal_the_services_wrist_render():
    pytest.importorskip("mujoco")
    from PIL import Image

    from dashboard.replay_bridge import RenderService, jpeg
    from scoring.records.io import load_record

    rec = load_record(Path(__file__).resolve().parent.parent / "assets" / "demo" / "archive" / "libero_goal"
                      / "task_1" / "scripted-careful" / "ep_000.npz")
    svc = RenderService()
    try:
        steps = [0, rec.n_steps // 2]
        batch = svc.frames("demo", rec, steps, (), size=(160, 120), camera="robot0_eye_in_hand", encode="data-url",
                           jpeg_quality=player.FRAME_QUALITY, idle_stop_s=player.IDLE_STOP_S)
        _until_complete(batch, 180)
        assert batch.complete and not batch.errors, batch.errors
        for step in steps:
            wrist = svc.frame("demo", rec, step, size=(160, 120), camera="robot0_eye_in_hand")
            agent = svc.frame("demo", rec, step, size=(160, 120))
            want = np.asarray(Image.open(io.BytesIO(jpeg(wrist, quality=player.FRAME_QUALITY))).convert("RGB"))
            assert np.array_equal(_pixels(batch.snapshot()[step]), want), f"step {step}: the wrist frame differs"
            assert np.abs(wrist.astype(int) - agent).mean() > 10, "the wrist view should not be the agent view"
    finally:
        svc.close()


@pytest.mark.render
def test_a_wanted_step_jumps_the_pre_render_queue_and_every_step_is_rendered_once():
    pytest.importorskip("mujoco")
    import threading

    from dashboard.frame_batch import violation_first_order
    from dashboard.replay_bridge import RenderService
    from render_helpers import H, T, VIOL, W, toy_record

    rec = toy_record()
    svc = RenderService()
    rendered: list[int] = []
    try:
        gate = threading.Event()
        svc.submit(gate.wait, 30)  # hold the render thread while the frames and the want are queued
        far = violation_first_order(range(T), VIOL.step, window=None)[-1]  # the step rendered last
        batch = player.frames(svc, "toy", rec, (VIOL,), T, VIOL.step, size=(W, H))
        put = batch.put
        batch.put = lambda step, frame: (rendered.append(step), put(step, frame))
        queued = batch.want(far, ahead=2)
        assert queued == [s for s in range(far, far + 3) if s < T]
        assert batch.want(far, ahead=2) == []  # asked twice: queued once
        gate.set()
        _until_complete(batch)
        assert batch.complete and not batch.errors
        assert rendered[:len(queued)] == queued, f"the wanted steps were not rendered first: {rendered[:5]}"
        assert sorted(rendered) == list(range(T)), "a step was rendered twice or not at all"
        assert batch.want(0) == []  # everything is in: nothing more to queue
    finally:
        svc.close()


@pytest.mark.render
def test_an_episode_whose_frames_keep_failing_stops_after_max_errors():
    pytest.importorskip("mujoco")
    from dashboard.replay_bridge import PLAYER, RenderService
    from render_helpers import H, T, W, toy_record

    svc = RenderService()
    try:
        batch = player.frames(svc, "toy", toy_record(), (), T, None, size=(W, H), camera="no-such-camera")
        _until_complete(batch)
        svc.submit(lambda: None, priority=PLAYER).result(60)  # after every job of the batch
        assert batch.complete and batch.cancelled and not batch.ready
        assert len(batch.errors) == player.MAX_ERRORS + 1, batch.errors  # the rest were not even tried
        assert all("unknown camera 'no-such-camera'" in m for m in batch.errors.values())
    finally:
        svc.close()


def test_wait_first_returns_on_the_first_frame_failure_or_end_not_at_its_timeout():
    import threading

    from dashboard.frame_batch import FrameBatch

    batch = FrameBatch([3, 4, 5])
    assert not batch.wait_first(0)  # nothing rendered yet
    threading.Timer(0.05, batch.put, args=(4, b"jpeg")).start()
    assert batch.wait_first(60) and batch.snapshot() == {4: b"jpeg"} and not batch.complete
    failed = FrameBatch([0, 1])
    threading.Timer(0.05, failed.fail, args=(0, "unknown camera")).start()
    assert failed.wait_first(60) and failed.errors == {0: "unknown camera"} and not failed.ready
    left = FrameBatch([0])
    left.cancel()
    assert left.wait_first(0)  # cancelled: nothing will come, so nobody waits for it
    assert FrameBatch([]).wait_first(0)  # nothing to render at all
