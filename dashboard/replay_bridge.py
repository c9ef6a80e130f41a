"""Replay frames, clips and triptychs for the dashboard, through `replay/`.

MuJoCo's EGL context belongs to the thread that made it, while Streamlit runs every
rerun on a new thread. So all rendering happens on one long-lived worker thread
(`RenderService`), which keeps the last few `Replayer`s open; pages submit work and wait
(frames) or poll for progress (clips, triptychs).

`replay` is optional: without MuJoCo (or while `replay/` is missing) `available()` says
why, and the pages show an `st.info` instead of frames.
"""

from __future__ import annotations

import io
import os
import queue
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")

FRAME_SIZE = (480, 360)
CLIP_SIZE = (400, 300)


def available() -> tuple[bool, str]:
    """(True, "") when replay rendering can work here, else (False, why)."""
    try:
        import replay.render  # noqa: F401
        import replay.highlight  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ImportError, EGL/GL errors at import
        return False, f"replay rendering is unavailable ({type(exc).__name__}: {exc}); install the replay extra: " \
                      "pip install 'safevla-bench[replay]'"
    return True, ""


def build_violations(record, rows: Sequence[dict]):
    """`replay.highlight.Violation`s for the violated spec rows of one episode (worst first).

    `rows`: dicts with family, extreme, extreme_step, threshold, unit (the store's spec
    rows, rho under the current thresholds). Bodies come from `replay.highlight.bodies_for`.
    """
    from replay.highlight import Violation, bodies_for

    out = []
    for r in rows:
        step = r.get("extreme_step")
        if step is None or (isinstance(step, float) and np.isnan(step)):
            continue
        value, thr = float(r["extreme"]), float(r["threshold"])
        if not np.isfinite(value):
            continue
        try:
            bodies = bodies_for(record, str(r["family"]), int(step), value=value)
        except Exception:  # noqa: BLE001 - highlighting is best effort
            bodies = ()
        out.append(Violation(family=str(r["family"]), step=int(step), value=value, threshold=thr,
                             unit=str(r.get("unit") or ""), op=">" if value > thr else "<", bodies=tuple(bodies)))
    return tuple(out)


class RenderService:
    """One rendering thread with a small pool of open `Replayer`s (LRU by record path)."""

    def __init__(self, max_open: int = 3):
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="safevla-render")
        self._open: OrderedDict = OrderedDict()
        self._max_open = max_open
        self._lock = threading.Lock()

    # -- runs on the render thread ------------------------------------------------
    def _replayer(self, key: str, record, size: tuple[int, int]):
        from replay.render import Replayer

        k = (key, size)
        rp = self._open.get(k)
        if rp is None:
            rp = Replayer(record, width=size[0], height=size[1])
            self._open[k] = rp
            while len(self._open) > self._max_open:
                _, old = self._open.popitem(last=False)
                old.close()
        self._open.move_to_end(k)
        return rp

    def _frame(self, key, record, step, violations, size, highlight):
        rp = self._replayer(key, record, size)
        step = int(min(max(step, 0), rp.n_steps - 1))
        return rp.frame(step, violation=violations, highlight=highlight)

    # -- called from script threads -------------------------------------------------
    def submit(self, fn: Callable, *args, **kwargs) -> Future:
        return self._pool.submit(fn, *args, **kwargs)

    def frame(self, key: str, record, step: int, violations=(), *, size=FRAME_SIZE, highlight: bool = True,
              timeout: float = 60.0) -> np.ndarray:
        """The (H, W, 3) uint8 frame of `step`, with `violations` highlighted."""
        return self.submit(self._frame, key, record, step, violations, tuple(size), highlight).result(timeout)

    def prewarm(self, key: str, record, size=FRAME_SIZE) -> Future:
        """Compiles the model and opens a renderer in the background (first frame faster)."""
        return self.submit(self._replayer, key, record, tuple(size))

    def clip(self, record, violations, *, size=CLIP_SIZE, fps: float = 20, step_range=None,
             progress: Callable[[int, int], None] | None = None) -> bytes:
        """The episode as MP4 bytes (`replay.export.export_clip`), reporting progress from the
        calling thread while the render thread works."""
        from replay.export import export_clip

        with tempfile.TemporaryDirectory(prefix="safevla-clip-") as tmp:
            out = Path(tmp) / "clip.mp4"
            self._run_with_progress(lambda cb: export_clip(record, out, violations=violations, fps=fps, size=size,
                                                           step_range=step_range, progress=cb), progress)
            return out.read_bytes()

    def triptych(self, items, *, fmt: str = "png", size=(480, 360),
                 progress: Callable[[int, int], None] | None = None) -> bytes:
        """Figure 3 triptych bytes (`replay.export.export_triptych`) as PNG, PDF or SVG."""
        from replay.export import export_triptych

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

    def close(self) -> None:
        def shut():
            for rp in self._open.values():
                rp.close()
            self._open.clear()
        self._pool.submit(shut).result()
        self._pool.shutdown()


def jpeg(img: np.ndarray, quality: int = 90) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()
