"""Replay frames, clips and triptychs for the dashboard, through `replay/`: the exports, and
the detail page's player where the browser has no WebGL (else the browser draws the replay
itself, dashboard/web_timeline.py).

MuJoCo's EGL context belongs to the thread that made it, while Streamlit runs every
rerun on a new thread. So all rendering happens on one long-lived worker thread
(`RenderService`), which keeps the last few `Replayer`s open; pages submit work and wait
(frames) or poll for progress (clips, triptychs).

`replay` is optional: without MuJoCo (or while `replay/` is missing) `available()` says
why, and the pages show an `st.info` instead of frames.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import itertools
import os
import queue
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path

import numpy as np

from dashboard.frame_batch import PLAYER_WINDOW, FrameBatch, data_url, violation_first_order  # noqa: F401 - the player's API

os.environ.setdefault("MUJOCO_GL", "egl")

FRAME_SIZE = (480, 360)
CLIP_SIZE = (400, 300)
PAGE_TEXTURES = "preview"  # the pages' frames: textures shrunk to the frame size for the upload (docs/replay.md)
WRITE_QUIET_S = 1.5  # compiled scenes go to the disk cache only after the render thread was idle this long
MAX_OPEN = 3  # replayers kept open (their scenes' models and GL contexts are shared, see replay/render/offscreen.py)


def available() -> tuple[bool, str]:
    """(True, "") when replay rendering can work here, else (False, why)."""
    import importlib

    try:
        for name in ("replay.render.replayer", "replay.render.highlight", "replay.render.export"):
            importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - ImportError, EGL/GL errors at import
        return False, f"replay rendering is unavailable ({type(exc).__name__}: {exc}); install the replay extra: " \
                      "pip install 'safevla-bench[replay]'"
    return True, ""


def build_violations(record, rows: Sequence[dict], *, force_sampling: str = "peak"):
    """`replay.render.highlight.Violation`s for the violated spec rows of one episode (worst first):
    `replay.render.cli.violations_from_rows`, with the bodies best effort (a frame without tinted
    bodies beats no frame). `rows`: the store's spec rows, rho under the current thresholds;
    `force_sampling`: the option the store scored the episode under (`D.scored_option`)."""
    from replay.render.cli import violations_from_rows

    return violations_from_rows(record, rows, force_sampling=force_sampling, best_effort_bodies=True)


OPEN_SWITCH_INTERVAL_S = 0.0005  # Python's GIL switch interval while a scene opens (default 5 ms)


@contextlib.contextmanager
def _quick_gil_handover():
    """Opening a scene releases the GIL many times (Pillow's texture shrink, numpy copies);
    each time, beside a page's script running Python, it waited up to the switch interval
    to get it back: a LIBERO scene's texture shrink took 0.63-0.73 s instead of 0.18 s. With
    0.5 ms during the open, 0.22-0.25 s (docs/benchmarks.md)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, OPEN_SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


USER, PLAYER = 0, 5  # render-queue priorities: what a page waits for goes first
WANTED = PLAYER - 1  # a step a player's user moved to (`FrameBatch.want`): before the rest of its batch

class RenderService:
    """One rendering thread, a priority queue of jobs, and a few open `Replayer`s (LRU).

    Pages wait on USER jobs; a player's pre-rendered frames (`frames`) run between them, each
    step its own job. It serves the exports (clips, triptychs, the Compare page's pair) and the
    detail page's frames where the browser has no WebGL (dashboard/web_timeline.py).
    """

    def __init__(self, max_open: int = MAX_OPEN, *, textures: str = PAGE_TEXTURES):
        self.textures = textures  # the pages' frames and prewarm: "preview" textures, quicker to open (docs/replay.md)
        self._q: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._open: OrderedDict = OrderedDict()
        self._max_open = max_open
        self._closing = False
        self._open_registered = False
        self._running = False  # a job runs on the render thread
        self._idle_since = time.monotonic()
        self._writer_asks = available()[0]
        if self._writer_asks:  # compiled scenes go to the disk cache beside the renders, while no frame is wanted
            from replay.render.scene_cache import write_in_background
            write_in_background(self.idle)
        self._thread = threading.Thread(target=self._loop, name="safevla-render", daemon=True)
        self._thread.start()
        # EGL work still running while the interpreter finalises crashes the process: at exit,
        # drop what is queued, let the running job finish and close the renderers.
        atexit.register(self.close)

    def _loop(self) -> None:
        while True:
            _, _, job = self._q.get()
            if job is None:
                for rp in self._open.values():
                    try:
                        rp.close()
                    except Exception:  # noqa: BLE001 - EGL may already be torn down at exit
                        pass
                self._open.clear()
                return
            fn, args, kwargs, fut = job
            if not fut.set_running_or_notify_cancel():
                continue
            self._running = True
            result = error = None
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting page
                error = exc
            self._running = False  # before the waiter hears: it may ask `idle()` at once
            self._idle_since = time.monotonic()
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)
            result = error = None  # the loop keeps no frame or traceback alive until the next job

    def idle(self) -> bool:
        """No job ran or waited on the render thread for `WRITE_QUIET_S` (what the scene
        cache's background writer asks before each scene). The quiet time keeps the writes
        out of a page load: between a linked scene's open and the page's first frame request
        the thread idles 0.3-0.7 s (docs/benchmarks.md, 2026-11-27, f2b93ae)."""
        return (not self._running and self._q.empty()
                and time.monotonic() - self._idle_since >= WRITE_QUIET_S)

    # -- runs on the render thread ------------------------------------------------
    def _replayer(self, key: str, record, size: tuple[int, int], *, camera: str | None = None,
                  textures: str = "full"):
        """The open replayer of (key, size, camera, textures), opened if need be. Full
        textures unless asked: callers that export (the pair clip) get full quality."""
        from replay.render.replayer import Replayer

        k = (key, size, camera, textures)
        rp = self._open.get(k)
        if rp is None:
            with _quick_gil_handover():
                rp = Replayer(record, width=size[0], height=size[1], camera=camera, textures=textures)
            if not self._open_registered:
                # registered after MuJoCo's EGL set-up, so (atexit runs last-in first-out) the
                # renderers close before EGL terminates
                atexit.register(self.close)
                self._open_registered = True
            self._open[k] = rp
            while len(self._open) > self._max_open:
                _, old = self._open.popitem(last=False)
                old.close()
        self._open.move_to_end(k)
        return rp

    def _frame(self, key, record, step, violations, size, highlight, camera=None):
        rp = self._replayer(key, record, size, camera=camera, textures=self.textures)
        step = int(min(max(step, 0), rp.n_steps - 1))
        return rp.frame(step, violation=violations, highlight=highlight)

    def _batch_frame(self, batch: FrameBatch, key, record, step, violations, size, highlight, camera,
                     encode, jpeg_quality) -> None:
        if batch.skips(step):
            return
        try:
            img = self._frame(key, record, step, violations, size, highlight, camera)
        except Exception as exc:  # noqa: BLE001 - one bad step never sinks the batch
            batch.fail(step, f"{type(exc).__name__}: {exc}")
            return
        if encode == "jpeg":
            batch.put(step, jpeg(img, jpeg_quality))
        elif encode == "data-url":
            batch.put(step, data_url(jpeg(img, jpeg_quality)))
        else:
            batch.put(step, img)

    # -- called from script threads -------------------------------------------------
    def submit(self, fn: Callable, *args, priority: int = USER, **kwargs) -> Future:
        fut: Future = Future()
        if self._closing:
            fut.cancel()
            return fut
        self._q.put((priority, next(self._seq), (fn, args, kwargs, fut)))
        return fut

    def frame(self, key: str, record, step: int, violations=(), *, size=FRAME_SIZE, highlight: bool = True,
              camera: str | None = None, timeout: float = 120.0) -> np.ndarray:
        """The (H, W, 3) uint8 frame of `step`, with `violations` highlighted.

        `camera`: a camera name of the record's scene (`cameras(record)`: e.g. "agentview",
        the wrist's "robot0_eye_in_hand"), "free", "free:violation", or None for the agent
        view. An unknown name raises `replay.render.highlight.RenderError` listing the valid ones.
        """
        return self.submit(self._frame, key, record, step, violations, tuple(size), highlight,
                           camera).result(timeout)

    def frames(self, key: str, record, steps: Sequence[int] | None = None, violations=(), *,
               camera: str | None = None, size=FRAME_SIZE, highlight: bool = True, order: str = "violation-first",
               focus: int | None = None, window: int | None = PLAYER_WINDOW, encode: str | None = "jpeg",
               jpeg_quality: int = 85, idle_stop_s: float | None = None, max_errors: int | None = None) -> FrameBatch:
        """Pre-renders many steps of one episode in the background; returns a `FrameBatch` at once.

        For a player: poll `batch.ready` ({step: JPEG bytes}) and show what is there.
        - `steps`: the steps wanted (None: every step of the episode); out-of-range steps
          are clamped, as `frame` does.
        - `order`: "violation-first" renders `focus` (default: the first of `violations`,
          the worst) first, then alternating outwards within `window` steps, then the rest
          from step 0 (`violation_first_order`); "in-order" renders ascending.
        - `camera`, `size`, `highlight`, `violations`: as for `frame`. Frames equal `frame`'s.
        - `encode`: "jpeg" (bytes, `jpeg_quality`), "data-url" (a `data:` URL of that JPEG, what
          a browser player shows) or None (uint8 arrays).
        - `idle_stop_s`: the batch stops when nobody `touch()`ed it for that long (a page
          polling it was left); `max_errors`: it stops after more failed steps than that.
        Raises `RecordError` at once for a record without replay state; a step that cannot
        be rendered (e.g. an unknown camera) lands in `batch.errors` as a one-line message.
        Each step is its own job at a priority between a page's frame and background
        warm-up: a `frame()` call (the slider) overtakes the batch, and so do the steps of
        `batch.want(step)`; `batch.cancel()` drops what is left. The episode's replayer
        (scene, GL context) is reused for every step.
        """
        if order not in ("violation-first", "in-order"):
            raise ValueError(f"order: expected 'violation-first' or 'in-order', got {order!r}")
        if encode not in ("jpeg", "data-url", None):
            raise ValueError(f"encode: expected 'jpeg', 'data-url' or None, got {encode!r}")
        if record.replay is None:  # the same one-line error the page's frame() gives, at once
            from scoring.records.io import resolve_mjcf
            resolve_mjcf(record)
        n = int(record.replay.qpos.shape[0])
        wanted = range(n) if steps is None else [min(max(int(s), 0), max(n - 1, 0)) for s in steps]
        if focus is None and violations and order == "violation-first":
            focus = violations[0].step

        def render_job(step: int, priority: int) -> None:
            self.submit(self._batch_frame, batch, key, record, step, violations, tuple(size), highlight, camera,
                        encode, jpeg_quality, priority=priority)

        batch = FrameBatch(violation_first_order(wanted, focus if order == "violation-first" else None,
                                                 window=window),
                           idle_stop_s=idle_stop_s, max_errors=max_errors,
                           requeue=lambda step, wanted: render_job(step, WANTED if wanted else PLAYER))
        for step in batch.order:
            render_job(step, PLAYER)
        return batch

    def cameras(self, record, *, timeout: float = 120.0) -> tuple[str, ...]:
        """The record's camera names, agent and wrist views first (`replay.render.replayer.cameras`)."""
        from replay.render.replayer import cameras

        return self.submit(cameras, record).result(timeout)

    def prewarm(self, key: str, record, size=FRAME_SIZE, *, priority: int = USER) -> Future:
        """Opens the record's agent-view replayer (scene, GL context) on the render thread, so
        the first server frame of that episode is quick: for a session whose browser has no
        WebGL, when it chooses an episode (`dashboard.cached.open_replay`)."""
        return self.submit(self._replayer, key, record, tuple(size), textures=self.textures, priority=priority)

    def clip(self, record, violations, *, size=CLIP_SIZE, fps: float = 20, step_range=None,
             progress: Callable[[int, int], None] | None = None) -> bytes:
        """The episode as MP4 bytes (`replay.render.export.export_clip`), reporting progress from the
        calling thread while the render thread works."""
        from replay.render.export import export_clip

        with tempfile.TemporaryDirectory(prefix="safevla-clip-") as tmp:
            out = Path(tmp) / "clip.mp4"
            self._run_with_progress(lambda cb: export_clip(record, out, violations=violations, fps=fps, size=size,
                                                           step_range=step_range, progress=cb), progress)
            return out.read_bytes()

    def triptych(self, items, *, fmt: str = "png", size=(480, 360),
                 progress: Callable[[int, int], None] | None = None) -> bytes:
        """Figure 3 triptych bytes (`replay.render.export.export_triptych`) as PNG, PDF or SVG."""
        from replay.render.export import export_triptych

        with tempfile.TemporaryDirectory(prefix="safevla-fig-") as tmp:
            out = Path(tmp) / f"triptych.{fmt}"
            self._run_with_progress(lambda cb: export_triptych(items, out, size=size, progress=cb), progress)
            return out.read_bytes()

    def _run_with_progress(self, job: Callable, progress) -> None:
        q: queue.Queue = queue.Queue()
        fut = self.submit(job, lambda done, total: q.put((done, total)))
        while True:
            try:
                done, total = q.get(timeout=0.1)
                if progress is not None:
                    progress(done, total)
            except queue.Empty:
                if fut.done():
                    break
        fut.result()
        while not q.empty():
            done, total = q.get_nowait()
            if progress is not None:
                progress(done, total)

    def close(self, timeout: float = 60.0) -> None:
        """Cancels queued jobs, waits for the running one, closes the renderers, stops the thread."""
        if self._closing:
            return
        self._closing = True
        if self._writer_asks:  # a closed service is idle forever: the writer stops asking it
            from replay.render.scene_cache import stop_asking
            stop_asking(self.idle)
        while True:
            try:
                _, _, job = self._q.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job[3].cancel()
        self._q.put((USER - 100, -1, None))
        self._thread.join(timeout=timeout)


def jpeg(img: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
