"""A player's pre-rendered frames: the order they are rendered in (violation first) and the
batch a player polls while `dashboard.replay_bridge.RenderService.frames` fills it."""

from __future__ import annotations

import threading
from collections.abc import Sequence

PLAYER_WINDOW = 20  # steps each side of the violation pre-rendered first (1 s at LIBERO's 20 Hz)


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


class FrameBatch:
    """Frames of one episode being pre-rendered on the render thread, for a player to poll.

    `order`: the steps in render order. `ready`: {step: JPEG bytes} (or the (H, W, 3) uint8
    array with `encode=None`), filled as each frame completes; read it from any thread
    (`dict(batch.ready)` for a snapshot). `done`/`total`: progress. `complete`: every step
    rendered (or failed). `errors`: {step: message} of steps that could not be rendered.
    `wait(timeout)`: block until complete; `cancel()`: drop the steps not yet rendered (e.g.
    the user left the episode) so they stop taking the render thread.
    """

    def __init__(self, order: Sequence[int]):
        self.order = list(order)
        self.ready: dict[int, object] = {}
        self.errors: dict[int, str] = {}
        self.cancelled = False
        self._finished = threading.Event()
        self._left = len(self.order)
        self._lock = threading.Lock()
        if not self.order:
            self._finished.set()

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

    def cancel(self) -> None:
        self.cancelled = True
        self._finished.set()

    def _one_finished(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left <= 0:
                self._finished.set()
