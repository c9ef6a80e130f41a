"""The playable episode timeline: a Streamlit custom component (`dashboard/player_static/`,
plain HTML/JS) that draws the robustness chart with vega-embed and plays pre-rendered
replay frames in the browser, cursor and frame in sync, keys on the parent page.

Frames come from the render thread (`RenderService`), the violating step's neighbourhood
first (`prerender_order`), into a `FrameStrip` the page polls; the player starts on the
frames it has while the rest fill in. The vega/vega-lite/vega-embed JavaScript comes from
vl-convert's bundle (no CDN): it is written once next to a copy of the component's files.
"""

from __future__ import annotations

import base64
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

STATIC = Path(__file__).with_name("player_static")
PRERENDER = 5  # render-queue priority: after the frame a page waits for (0), before prewarming (10)
WANTED = PRERENDER - 1  # a step the user moved to (seek, deep link, slider) goes before the pre-render order
WANT_AHEAD = 10  # steps after a wanted one rendered with it: playback from there runs forward
FRAME_QUALITY = 80
IDLE_STOP_S = 30.0  # a strip nobody polled for this long stops rendering (its page was left)


def prerender_order(n_steps: int, violating_step: int | None) -> list[int]:
    """Every step once, nearest to the violating step first (ties: the later step first,
    so playback from the violation can start), else in order from step 0."""
    steps = np.arange(int(n_steps))
    if violating_step is None or n_steps <= 0:
        return steps.tolist()
    v = int(min(max(violating_step, 0), n_steps - 1))
    return sorted(steps.tolist(), key=lambda s: (abs(s - v), s < v))


class FrameStrip:
    """One episode's frames as JPEG data URLs, filled in the background by the render thread.

    `start` queues one job per step in `order` at PRERENDER priority, so a frame a page
    waits for still goes first; `want(step)` puts a step the user moved to (and the few after
    it) before the rest of that order. Jobs of a strip nobody polls (`touch`) for
    IDLE_STOP_S, or that was `cancel`led, return without rendering; a step is rendered once
    however many jobs name it.
    """

    def __init__(self, *, key: str, record, violations, n_steps: int, order: Sequence[int],
                 size: tuple[int, int], quality: int = FRAME_QUALITY, camera: str | None = None):
        self.key, self.record, self.violations, self.camera = key, record, violations, camera
        self.n_steps, self.order, self.size, self.quality = int(n_steps), list(order), tuple(size), quality
        self.frames: dict[int, str] = {}
        self.errors: list[str] = []
        self.started_at: float | None = None
        self.first_frame_s: float | None = None
        self.done_s: float | None = None
        self._lock = threading.Lock()
        self._wanted: set[int] = set()
        self._failed: set[int] = set()
        self._cancelled = False
        self._touched = time.monotonic()

    # -- page side
    def start(self, service) -> FrameStrip:
        if self.started_at is None:
            self.started_at = time.monotonic()
            for step in self.order:
                service.submit(self._render_one, service, step, priority=PRERENDER)
        return self

    def want(self, service, step: int, *, ahead: int = WANT_AHEAD) -> list[int]:
        """Render `step` and the `ahead` steps after it next, before the rest of the
        violation-first order: a seek, deep link or slider move to a step far from the
        violation does not wait behind every step nearer to it. Returns the steps queued
        (none that are rendered, failed or already wanted)."""
        if self.started_at is None or self._cancelled:
            return []
        steps = set(self.order)
        with self._lock:
            todo = [k for k in range(int(step), int(step) + ahead + 1)
                    if k in steps and k not in self.frames and k not in self._failed and k not in self._wanted]
            self._wanted.update(todo)
        for k in todo:
            service.submit(self._render_one, service, k, priority=WANTED)
        return todo

    def touch(self) -> None:
        self._touched = time.monotonic()

    def cancel(self) -> None:
        self._cancelled = True

    @property
    def complete(self) -> bool:
        return len(self.frames) + len(self.errors) >= len(self.order) or bool(self.errors and self._cancelled)

    def snapshot(self) -> dict[int, str]:
        with self._lock:
            return dict(self.frames)

    # -- render thread
    def _render_one(self, service, step: int) -> None:
        if (self._cancelled or time.monotonic() - self._touched > IDLE_STOP_S or step in self.frames
                or step in self._failed):
            return
        from dashboard.replay_bridge import jpeg
        try:
            # the service's own frame routine, called on its thread (service.frame would wait on itself)
            img = service._frame(self.key, self.record, step, self.violations, self.size, True, camera=self.camera)
        except Exception as exc:  # noqa: BLE001 - shown on the page; later steps still try
            self._failed.add(step)
            self.errors.append(f"step {step}: {exc}")
            if len(self.errors) > 3:
                self._cancelled = True
            return
        url = "data:image/jpeg;base64," + base64.b64encode(jpeg(img, quality=self.quality)).decode()
        with self._lock:
            self.frames[int(step)] = url
            if self.first_frame_s is None:
                self.first_frame_s = time.monotonic() - self.started_at
            if len(self.frames) == len(self.order):
                self.done_s = time.monotonic() - self.started_at


def component_dir(cache: Path | None = None) -> Path:
    """A folder holding the component's files and vl-convert's vega bundle (written once per
    vl-convert version: the bundle is ~0.9 MB and takes ~2 s to make)."""
    import vl_convert

    base = cache or Path.home() / ".cache" / "safevla" / "player"
    out = base / f"vl-convert-{vl_convert.__version__}"
    bundle = out / "vega-bundle.js"
    out.mkdir(parents=True, exist_ok=True)
    for f in STATIC.iterdir():  # refreshed every start: edits to the component show up at once
        if f.is_file():
            shutil.copyfile(f, out / f.name)
    if not bundle.exists():
        tmp = out / f".vega-bundle.{threading.get_ident()}.tmp"
        tmp.write_text(vl_convert.javascript_bundle(), encoding="utf-8")
        tmp.replace(bundle)
    return out


_COMPONENT = None
_COMPONENT_LOCK = threading.Lock()


def _component():
    global _COMPONENT
    with _COMPONENT_LOCK:
        if _COMPONENT is None:
            import streamlit.components.v1 as components

            _COMPONENT = components.declare_component("safevla_timeline", path=str(component_dir()))
        return _COMPONENT


def violated_by_step(traces) -> dict[str, str]:
    """{step: "spec, spec"} for the steps where an active spec is violated."""
    if traces is None or traces.empty:
        return {}
    bad = traces[traces["violated"].astype(bool)]
    return {str(int(k)): ", ".join(sorted(set(g["spec"]))) for k, g in bad.groupby("step")}


def timeline(*, episode: str, spec: Mapping, n_steps: int, dt: float, step: int, violating_step: int | None,
             frames: Mapping[int, str], total: int, violated: Mapping[str, str], key: str,
             answers: str | None = None, height: int | None = None):
    """Draws the timeline; returns its last value ({step, seq, event, episode}) or None.

    `answers` is the seq of the player's last value this run handled (None: none yet). The
    player moves to `step` only when this run had seen its newest value: a run that had not
    seen it started before that value arrived, and its step is older than the player's."""
    return _component()(episode=episode, spec=dict(spec), n_steps=int(n_steps), dt=float(dt), step=int(step),
                        answers=None if answers is None else str(answers),
                        vstep=None if violating_step is None else int(violating_step),
                        frames={str(k): v for k, v in frames.items()}, total=int(total), violated=dict(violated),
                        key=key, default=None, height=height)
