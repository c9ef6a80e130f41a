"""Offscreen GL contexts for replay, with an explicit life cycle, shared per scene.

Why this exists: `mujoco.Renderer.close()` calls `MjrContext.free()`, i.e.
`mjr_freeContext`, which deletes textures, framebuffers and display lists *by name in
whatever GL context is current*, without making its own context current first. GL object
names are per context (every EGL context numbers its textures from 1), so closing one
renderer while another one's context is current deleted the *other* renderer's objects:
its frames turned to noise, black, or another scene's mesh lists upside down. The render
service hit this every time it evicted its oldest renderer right after opening a new one.

Here a GL context is only ever current while it is used: `render` makes it current,
renders, reads the pixels and releases it; `close` makes it current before `mjr_freeContext`.
A foreign renderer freeing "in the current context" then finds none. A GL context may be
current on one thread at a time, so each thread has its own `ContextPool`, whose offscreen
contexts (an `MjrContext` each) all live in one GL context (`SharedGL`: a fresh GL context
made its first `MjrContext` 0.2-0.25 s slower); a context released from another thread
(garbage collection) goes back to its pool's thread, which frees it later, never while that
thread may be rendering with it.

An offscreen context holds the scene's compiled assets (textures, meshes): 150 MB for a
LIBERO scene, 2-4 s to upload on llvmpipe. Replayers of scenes with the same assets, size and
quality share one, and the pool keeps the last few unused ones, so re-opening a scene skips
the upload. What a context uploads from a model, and the key two models share a context by,
are in replay/render/render_assets.py.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections import OrderedDict, deque
from collections.abc import Hashable

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from replay.render.render_assets import (MODEL_VIS_LOCK, begin_model_edit, restore_textures,  # noqa: E402
                                         shrink_textures)

IDLE_CONTEXTS = 2  # unused contexts a thread keeps for re-opened scenes (each holds its scene's assets)


def _backend():
    """MuJoCo's GL context class for this process (EGL headless; see replayer._ensure_offscreen_gl)."""
    from mujoco.rendering.classic import gl_context

    cls = getattr(gl_context, "GLContext", None)
    if cls is None:
        raise RuntimeError("MuJoCo has no GL backend here (MUJOCO_GL disables it); replay cannot render")
    return cls


def _release_current() -> None:
    """Leaves no context current on this thread (EGL only: the other backends keep theirs)."""
    egl = sys.modules.get("mujoco.egl")
    if egl is not None and egl.EGL_DISPLAY is not None:
        egl.EGL.eglMakeCurrent(egl.EGL_DISPLAY, egl.EGL.EGL_NO_SURFACE, egl.EGL.EGL_NO_SURFACE,
                               egl.EGL.EGL_NO_CONTEXT)


def _make_mjr_context(model: mujoco.MjModel, width: int, height: int, multisample: bool,
                      max_texture_px: int | None = None) -> mujoco.MjrContext:
    """`MjrContext` of a shared model: its offscreen buffer size and samples are read from
    `model.vis` at creation only, so they are set for the call and put back; so are the
    textures, shrunk to `max_texture_px` for the upload (None: uploaded whole)."""
    g, q = model.vis.global_, model.vis.quality
    with MODEL_VIS_LOCK:
        begin_model_edit()
        saved = g.offwidth, g.offheight, q.offsamples
        g.offwidth, g.offheight = max(g.offwidth, width), max(g.offheight, height)
        if not multisample:
            q.offsamples = 0
        shrunk = []
        try:
            shrunk = shrink_textures(model, max_texture_px) if max_texture_px else []
            con = mujoco.MjrContext(model, mujoco.mjtFontScale.mjFONTSCALE_150.value)
        finally:
            restore_textures(model, shrunk)
            g.offwidth, g.offheight, q.offsamples = saved
    return con


class SharedGL:
    """One GL context that holds the `MjrContext`s of a `ContextPool` (one per asset set, quality
    and frame size), current on one thread at a time.

    On llvmpipe a fresh GL context makes its first `MjrContext` slowly: a LIBERO object scene
    took 0.40-0.47 s in a context of its own each time, 0.17-0.20 s as the second or later in
    one context (docs/benchmarks.md, 2026-11-26, 695fafe). Sharing is safe because every GL object an
    `MjrContext` has (textures, buffers, display lists) is a name it generated in this context,
    and `mjr_freeContext`, run with this context current, deletes only its own names.

    `current()` makes it current under a lock and releases it after, as every use here does:
    a foreign renderer freeing "in the current context" then finds none. An `MjrContext`
    dropped by garbage collection (which may run while this thread holds the lock) is not
    freed there but kept, and freed the next time the context is current (`orphan`)."""

    def __init__(self, width: int, height: int):
        self._gl = _backend()(int(width), int(height))  # the size is unused by EGL: frames go to each MjrContext's own buffer
        self._lock = threading.Lock()
        self._orphans: list[mujoco.MjrContext] = []

    @property
    def closed(self) -> bool:
        return self._gl is None

    @contextlib.contextmanager
    def current(self):
        """This context current on this thread for the block (then none is)."""
        with self._lock:
            if self._gl is None:
                raise RuntimeError("this GL context is closed")
            self._gl.make_current()
            try:
                self._free_orphans()
                yield
            finally:
                _release_current()

    def orphan(self, con: mujoco.MjrContext) -> None:
        """`con` is to be freed, in this context, the next time it is current (takes no lock)."""
        self._orphans.append(con)

    def _free_orphans(self) -> None:
        while self._orphans:
            self._orphans.pop().free()

    def free(self) -> None:
        """Frees the orphaned `MjrContext`s, then the context; idempotent. The other
        `MjrContext`s made in it must be freed before (`ContextPool.close` does)."""
        with self._lock:
            gl, self._gl = self._gl, None
            if gl is None:
                return
            try:
                gl.make_current()
                self._free_orphans()
            finally:
                gl.free()  # ours is current, so it is released before eglDestroyContext
                _release_current()


class OffscreenContext:
    """The `MjrContext` of one compiled scene at one frame size, in a GL context of its own
    or in a pool's `SharedGL` (`gl=`).

    Renders any `MjvScene` built from a model with the same assets. Never left current, so
    any thread may use it, one at a time (`ContextPool` gives each thread its own).
    """

    def __init__(self, model: mujoco.MjModel, *, width: int, height: int, multisample: bool = False,
                 max_texture_px: int | None = None, gl: SharedGL | None = None):
        self.width, self.height = int(width), int(height)
        self._closed = False
        self._own_gl = gl is None
        self._gl = SharedGL(self.width, self.height) if gl is None else gl
        _close_pools_before_egl_terminates()
        self._con = None
        try:
            with self._gl.current():
                self._con = _make_mjr_context(model, self.width, self.height, multisample, max_texture_px)
        except BaseException:
            self.close()
            raise
        self._rect = mujoco.MjrRect(0, 0, self.width, self.height)

    @property
    def closed(self) -> bool:
        return self._closed

    def render(self, scene: mujoco.MjvScene) -> np.ndarray:
        """The (height, width, 3) uint8 image of `scene`, top row first."""
        if self._closed:
            raise RuntimeError("this offscreen context is closed")
        out = np.empty((self.height, self.width, 3), np.uint8)
        with self._gl.current():
            # The bound framebuffer is the GL context's state: the last MjrContext made or used in it set its own.
            mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN.value, self._con)
            mujoco.mjr_render(self._rect, scene, self._con)
            mujoco.mjr_readPixels(out, None, self._rect, self._con)
        return np.ascontiguousarray(out[::-1])  # GL rows run bottom-up

    def close(self) -> None:
        """Frees the scene's GL objects in *its* GL context (and that context, when its own); idempotent."""
        if self._closed:
            return
        self._closed = True
        con, self._con = self._con, None
        try:
            if con is not None and not self._gl.closed:
                with self._gl.current():
                    con.free()  # mjr_freeContext: deletes by name in the current context, ours
        finally:
            if self._own_gl:
                self._gl.free()

    def __del__(self):
        # Unreferenced, so nobody renders with it. Left to the MjrContext's own destructor,
        # mjr_freeContext would run in whichever context this thread has current; and a
        # shared GL context's lock may be held by this very thread (collection runs anywhere),
        # so the MjrContext goes to it, to be freed the next time it is current.
        try:
            if getattr(self, "_closed", True):
                return
            if self._own_gl:
                self.close()
                return
            self._closed = True
            con, self._con = self._con, None
            if con is not None:
                self._gl.orphan(con)
        except Exception:  # noqa: BLE001 - EGL already terminated at exit: nothing left to free
            pass


class ContextPool:
    """The offscreen contexts of one thread: shared by key while used, the last few kept when not;
    all made in one `SharedGL`, made with the first and freed when the pool holds none."""

    def __init__(self, idle: int = IDLE_CONTEXTS):
        self.thread = threading.get_ident()
        self.idle_limit = idle
        self._gl: SharedGL | None = None
        self._used: dict[Hashable, tuple[OffscreenContext, int]] = {}
        self._idle: OrderedDict[Hashable, OffscreenContext] = OrderedDict()
        self._returned: deque = deque()  # keys released from other threads, handled here later

    def acquire(self, key: Hashable, model: mujoco.MjModel, *, width: int, height: int,
                multisample: bool = False, max_texture_px: int | None = None) -> OffscreenContext:
        """The context for `key` (scene, quality, textures) at this size: shared, reused or made from `model`."""
        self._drain()
        k = (key, int(width), int(height))
        if k in self._used:
            ctx, n = self._used[k]
            self._used[k] = (ctx, n + 1)
            return ctx
        ctx = self._idle.pop(k, None)
        if ctx is None:
            if self._gl is None or self._gl.closed:
                self._gl = SharedGL(width, height)
            ctx = OffscreenContext(model, width=width, height=height, multisample=multisample,
                                   max_texture_px=max_texture_px, gl=self._gl)
        self._used[k] = (ctx, 1)
        return ctx

    def release(self, key: Hashable, *, width: int, height: int) -> None:
        """One user of the context is done with it. From another thread, the owner does the work later."""
        k = (key, int(width), int(height))
        if threading.get_ident() != self.thread:
            self._returned.append(k)
            return
        self._drain()
        self._release(k)

    def _release(self, k) -> None:
        if k not in self._used:  # the pool was shut down (at exit)
            return
        ctx, n = self._used.pop(k)
        if n > 1:
            self._used[k] = (ctx, n - 1)
            return
        self._idle[k] = ctx
        while len(self._idle) > self.idle_limit:
            self._idle.popitem(last=False)[1].close()

    def _drain(self) -> None:
        while self._returned:
            self._release(self._returned.popleft())

    @property
    def n_open(self) -> int:
        """Offscreen contexts (`MjrContext`s) this thread holds open (used and idle)."""
        return len(self._used) + len(self._idle)

    def close(self, *, in_use: bool = False) -> None:
        """Closes the unused contexts (with `in_use`, the used ones too: at exit), and the GL
        context once none is left in it."""
        self._drain()
        while self._idle:
            self._idle.popitem(last=False)[1].close()
        if in_use:
            for ctx, _ in self._used.values():
                ctx.close()
            self._used.clear()
        if not self._used and self._gl is not None:
            self._gl.free()
            self._gl = None


_POOLS: dict[int, ContextPool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for_this_thread() -> ContextPool:
    with _POOLS_LOCK:
        t = threading.get_ident()
        pool = _POOLS.get(t)
        if pool is None:
            pool = _POOLS[t] = ContextPool()
        return pool


def _close_pools_before_egl_terminates() -> None:
    """mujoco.egl terminates its display in an atexit hook registered when the first context
    is made, and other libraries (robosuite) register their own later. Hooks run last-in
    first-out, so ours is registered again with every new context: it runs before theirs."""
    atexit.unregister(_close_at_exit)
    atexit.register(_close_at_exit)


def _close_at_exit() -> None:
    try:
        close_contexts(in_use=True)
    except Exception:  # noqa: BLE001 - EGL already gone: the process is ending anyway
        pass


def close_contexts(*, in_use: bool = False) -> None:
    """Closes every thread's unused contexts; with `in_use`, all of them (at exit, once no
    thread renders: EGL's display is terminated next, and contexts freed after that fail)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
    for pool in pools:
        pool.close(in_use=in_use)
