"""A player's pre-rendered frames: the order they are rendered in (violation first) and the
batch a player polls while `dashboard.replay_bridge.RenderService.frames` fills it.

One mechanism for every player: the detail page's timeline (`dashboard/views/detail.py`)
and any script that wants an episode's frames in the background use the same batch."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable, Sequence

PLAYER_WINDOW = 20  # steps each side of the violation pre-rendered first (1 s at LIBERO's 20 Hz)
WANT_AHEAD = 10  # steps after a wanted one rendered with it: playback from there runs forward


def violation_first_order(steps: Sequence[int], focus: int | None, *, window: int | None = PLAYER_WINDOW) -> list[int]:
    """`steps` (duplicates dropped) in the order a player wants them: `focus`, then alternating
    outwards (focus+1, focus-1, focus+2, ...) while within `window` steps (None: all), then
    the rest from the first step on. Without a focus: ascending."""
    uniq = sorted({int(s) for s in steps})
    if focus is None:
        return uniq
    f = int(focus)

    def outwards(s: int) -> tuple[int, int]:
        return abs(s - f), 0 if s >= f else 1

    near = sorted((s for s in uniq if window is None or abs(s - f) <= window), key=outwards)
    taken = set(near)
    return near + [s for s in uniq if s not in taken]


def data_url(jpeg_bytes: bytes) -> str:
    """A JPEG as a `data:` URL, what a browser `<img>` shows without another request."""
    return "data:image/jpeg;base64," + base64.b64encode(jpeg_bytes).decode()


class FrameBatch:
    """Frames of one episode being pre-rendered on the render thread, for a player to poll.

    - `order`: the steps in render order. `ready`: {step: frame}, filled as each frame
      completes (JPEG bytes, a `data:` URL with encode="data-url", or the (H, W, 3) uint8
      array with encode=None); `snapshot()` copies it from any thread.
    - `done`/`total`: progress. `complete`: every step rendered or failed, or cancelled.
      `errors`: {step: message} of steps that could not be rendered.
    - `wait(timeout)` blocks until complete, `wait_first(timeout)` until the first frame (or
      the first failure, or the end); `cancel()` drops the steps not yet rendered
      (the user left the episode) so they stop taking the render thread. So does a batch
      with `idle_stop_s` that nobody `touch()`ed for that long, and one with more than
      `max_errors` failed steps.
    - `want(step)` renders that step and the few after it next, before the rest of the order
      (a seek far from the violation does not wait behind every step nearer to it).
    - `resume()` queues again the steps an idle stop left (the user came back to the page).
    - A step is rendered once, however many jobs name it. `first_frame_s` and `done_s`:
      seconds from the batch's start to its first frame and to its last.
    """

    def __init__(self, order: Sequence[int], *, idle_stop_s: float | None = None, max_errors: int | None = None,
                 requeue: Callable[[int, bool], None] | None = None):
        self.order = list(order)
        self.ready: dict[int, object] = {}
        self.errors: dict[int, str] = {}
        self.cancelled = False
        self.stopped_idle = False
        self.idle_stop_s, self.max_errors = idle_stop_s, max_errors
        self.started_at = time.monotonic()
        self.first_frame_s: float | None = None
        self.done_s: float | None = None
        self._requeue = requeue  # queues one more job for a step (wanted: ahead of the order), RenderService
        self._steps = set(self.order)
        self._wanted: set[int] = set()
        self._touched = time.monotonic()
        self._finished = threading.Event()
        self._first = threading.Event()  # something to show: a frame, an error, or the end
        self._lock = threading.Lock()
        if not self.order:
            self._finish()

    @property
    def total(self) -> int:
        return len(self.order)

    @property
    def done(self) -> int:
        return len(self.ready) + len(self.errors)

    @property
    def complete(self) -> bool:
        return self._finished.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        return self._finished.wait(timeout)

    def wait_first(self, timeout: float | None = None) -> bool:
        """Blocks until the batch has a frame, a failed step or is complete; True if it has."""
        return self._first.wait(timeout)

    def cancel(self) -> None:
        self.cancelled = True
        self._finish()

    def _finish(self) -> None:
        self._finished.set()
        self._first.set()

    def touch(self) -> None:
        """A player still looks at this batch (see `idle_stop_s`)."""
        self._touched = time.monotonic()

    def snapshot(self) -> dict[int, object]:
        with self._lock:
            return dict(self.ready)

    def want(self, step: int, *, ahead: int = WANT_AHEAD) -> list[int]:
        """Renders `step` and the `ahead` steps after it next; returns the steps queued (none
        that are rendered, failed or already wanted, and none of a finished batch)."""
        if self._requeue is None or self.complete:
            return []
        with self._lock:
            todo = [k for k in range(int(step), int(step) + ahead + 1)
                    if k in self._steps and k not in self.ready and k not in self.errors and k not in self._wanted]
            self._wanted.update(todo)
        for k in todo:
            self._requeue(k, True)
        return todo

    def resume(self) -> bool:
        """Queues again, in order, the steps an idle stop left unrendered; True if it did."""
        if self._requeue is None or not self.stopped_idle:
            return False
        with self._lock:
            self.stopped_idle = self.cancelled = False
            self._wanted.clear()
            self._touched = time.monotonic()
            self._finished.clear()
            todo = [k for k in self.order if k not in self.ready and k not in self.errors]
        for k in todo:
            self._requeue(k, False)
        self._check_finished()
        return True

    # -- render thread
    def skips(self, step: int) -> bool:
        """True when the job of `step` has nothing to do: the batch was cancelled or left idle
        (then it is cancelled now), or the step is rendered or failed already."""
        if not self.cancelled and self.idle_stop_s is not None and time.monotonic() - self._touched > self.idle_stop_s:
            self.stopped_idle = True
            self.cancel()
        return self.cancelled or step in self.ready or step in self.errors

    def put(self, step: int, frame: object) -> None:
        with self._lock:
            self.ready[int(step)] = frame
            if self.first_frame_s is None:
                self.first_frame_s = time.monotonic() - self.started_at
        self._first.set()
        self._check_finished()

    def fail(self, step: int, message: str) -> None:
        with self._lock:
            self.errors[int(step)] = message
        self._first.set()
        if self.max_errors is not None and len(self.errors) > self.max_errors:
            self.cancel()
        self._check_finished()

    def _check_finished(self) -> None:
        if self.done >= self.total and not self._finished.is_set():
            self.done_s = time.monotonic() - self.started_at
            self._finish()
