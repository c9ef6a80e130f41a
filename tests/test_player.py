"""The timeline player's server side (`dashboard.player`): the pre-render order, the frame
strip filled by the real render thread (every frame equal to the service's own render of
that step), the component folder with its local vega bundle, and the seek bookkeeping."""

from __future__ import annotations

import base64
import io
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

from dashboard import player  # noqa: E402


@pytest.mark.parametrize("n,v,head", [(10, 4, [4, 5, 3, 6, 2]), (5, None, [0, 1, 2, 3, 4]), (6, 5, [5, 4, 3, 2, 1, 0]),
                                      (4, 0, [0, 1, 2, 3]), (3, 99, [2, 1, 0])])
def test_prerender_order_starts_at_the_violation_and_covers_every_step_once(n, v, head):
    order = player.prerender_order(n, v)
    assert order[:len(head)] == head
    assert sorted(order) == list(range(n))


def test_violated_by_step_names_the_specs_of_each_violated_step():
    tr = pd.DataFrame({"step": [0, 1, 1, 2], "spec": ["a", "a", "b", "b"], "violated": [False, True, True, False]})
    assert player.violated_by_step(tr) == {"1": "a, b"}
    assert player.violated_by_step(tr.iloc[:0]) == {}


def test_component_dir_holds_the_page_the_script_and_the_vega_bundle(tmp_path):
    pytest.importorskip("vl_convert")
    out = player.component_dir(tmp_path)
    html = (out / "index.html").read_text()
    assert 'src="vega-bundle.js"' in html and 'src="player.js"' in html
    assert "http://" not in html and "https://" not in html  # nothing from a CDN
    bundle = (out / "vega-bundle.js").read_text()
    assert "window.vegaEmbed" in bundle and len(bundle) > 100_000
    assert (out / "player.js").read_text() == (player.STATIC / "player.js").read_text()


@pytest.mark.render
def test_frame_strip_renders_every_step_violation_first_equal_to_the_service():
    pytest.importorskip("mujoco")
    from PIL import Image

    from dashboard.replay_bridge import RenderService, jpeg
    from render_helpers import H, T, VIOL, W, toy_record

    rec = toy_record()
    svc = RenderService()
    try:
        order = player.prerender_order(T, VIOL.step)
        strip = player.FrameStrip(key="toy", record=rec, violations=(VIOL,), n_steps=T, order=order, size=(W, H))
        strip.start(svc)
        deadline = time.time() + 120
        while not strip.complete and time.time() < deadline:
            strip.touch()
            time.sleep(0.05)
        assert strip.complete and not strip.errors
        frames = strip.snapshot()
        assert sorted(frames) == list(range(T))
        assert list(frames)[0] == VIOL.step  # the violating step was rendered first
        assert strip.first_frame_s is not None and strip.done_s >= strip.first_frame_s
        for step in (0, VIOL.step, T - 1):
            url = frames[step]
            assert url.startswith("data:image/jpeg;base64,")
            got = np.asarray(Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).convert("RGB"))
            want = svc.frame("toy", rec, step, (VIOL,), size=(W, H))
            want = np.asarray(Image.open(io.BytesIO(jpeg(want, quality=player.FRAME_QUALITY))).convert("RGB"))
            assert np.array_equal(got, want), f"step {step}: the strip's frame differs from the service's render"
        assert not np.array_equal(frames[0], frames[T - 1])
        # a cancelled strip renders nothing more
        other = player.FrameStrip(key="toy", record=rec, violations=(), n_steps=T, order=order, size=(W, H))
        other.cancel()
        other.start(svc)
        svc.frame("toy", rec, 0, size=(W, H))  # queued after the strip's jobs at a lower priority: they ran
        time.sleep(0.2)
        assert other.snapshot() == {}
    finally:
        svc.close()


@pytest.mark.render
def test_frame_strip_from_the_wrist_camera_equals_the_services_wrist_render():
    pytest.importorskip("mujoco")
    from PIL import Image

    from dashboard.replay_bridge import RenderService, jpeg
    from scoring.records.io import load_record

    rec = load_record(Path(__file__).resolve().parent.parent / "assets" / "demo" / "archive" / "libero_goal"
                      / "task_1" / "scripted-careful" / "ep_000.npz")
    svc = RenderService()
    try:
        steps = [0, rec.n_steps // 2]
        strip = player.FrameStrip(key="demo", record=rec, violations=(), n_steps=rec.n_steps, order=steps,
                                  size=(160, 120), camera="robot0_eye_in_hand").start(svc)
        deadline = time.time() + 180
        while not strip.complete and time.time() < deadline:
            strip.touch()
            time.sleep(0.05)
        assert strip.complete and not strip.errors, strip.errors
        for step in steps:
            got = np.asarray(Image.open(io.BytesIO(base64.b64decode(strip.snapshot()[step].split(",", 1)[1]))))
            wrist = svc.frame("demo", rec, step, size=(160, 120), camera="robot0_eye_in_hand")
            agent = svc.frame("demo", rec, step, size=(160, 120))
            want = np.asarray(Image.open(io.BytesIO(jpeg(wrist, quality=player.FRAME_QUALITY))).convert("RGB"))
            assert np.array_equal(got, want), f"step {step}: the strip's wrist frame differs from the service's"
            assert np.abs(wrist.astype(int) - agent).mean() > 10, "the wrist view should not be the agent view"
    finally:
        svc.close()


@pytest.mark.render
def test_a_wanted_step_jumps_the_pre_render_queue_and_every_step_is_rendered_once():
    pytest.importorskip("mujoco")
    import threading

    from dashboard.replay_bridge import RenderService
    from render_helpers import H, T, VIOL, W, toy_record

    rec = toy_record()
    svc = RenderService()
    rendered: list[int] = []
    try:
        gate = threading.Event()
        svc.submit(gate.wait, 30)  # hold the render thread while the strip and the want are queued
        order = player.prerender_order(T, VIOL.step)
        far = order[-1]  # the step the violation-first order would render last
        strip = player.FrameStrip(key="toy", record=rec, violations=(VIOL,), n_steps=T, order=order, size=(W, H))
        real = strip._render_one

        def counted(service, step):
            before = step in strip.frames
            real(service, step)
            if not before and step in strip.frames:
                rendered.append(step)
        strip._render_one = counted
        strip.start(svc)
        queued = strip.want(svc, far, ahead=2)
        assert queued == [s for s in range(far, far + 3) if s < T]
        assert strip.want(svc, far, ahead=2) == []  # asked twice: queued once
        gate.set()
        deadline = time.time() + 120
        while not strip.complete and time.time() < deadline:
            strip.touch()
            time.sleep(0.05)
        assert strip.complete and not strip.errors
        assert rendered[:len(queued)] == queued, f"the wanted steps were not rendered first: {rendered[:5]}"
        assert sorted(rendered) == list(range(T)), "a step was rendered twice or not at all"
        assert strip.want(svc, 0) == []  # everything is in: nothing more to queue
    finally:
        svc.close()
