"""Offscreen GL contexts for replay, with an explicit life cycle, shared per scene.

Why this exists (issue 16): `mujoco.Renderer.close()` calls `MjrContext.free()`, i.e.
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
the upload.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import weakref
from collections import OrderedDict, deque
from collections.abc import Hashable

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

IDLE_CONTEXTS = 2  # unused contexts a thread keeps for re-opened scenes (each holds its scene's assets)


def _backend():
    """MuJoCo's GL context class for this process (EGL headless; see render._ensure_offscreen_gl)."""
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


MODEL_VIS_LOCK = threading.Lock()  # held while a shared model's vis settings are changed for a moment
_MODEL_EDITS = [0]  # bumped under MODEL_VIS_LOCK as each such change starts (`model_edits`)


def begin_model_edit() -> None:
    """Called with `MODEL_VIS_LOCK` held, before a shared model is changed for a moment: a
    reader that did not take the lock (the scene cache's writer) sees the count move and
    drops what it read."""
    _MODEL_EDITS[0] += 1


def model_edits() -> int:
    """How many changes of shared models have started; read under `MODEL_VIS_LOCK`, so none is
    under way at that moment. Equal before and after a read of a shared model done without
    the lock: nothing changed it meanwhile."""
    with MODEL_VIS_LOCK:
        return _MODEL_EDITS[0]


# What `mjr_makeContext` copies from a model into the GL objects of a context (MuJoCo's
# src/render/classic/render_context.c): textures, the materials' texture ids and repeats,
# meshes (with the convex hulls' graphs), height fields, skins, and through `vis` and the
# extent the offscreen buffer, shadow map, fog, haze, line width and built-in geom detail.
# Where a mesh or texture was loaded from (`*_pathadr`) and the collision trees (`mesh_bvh*`,
# `mesh_oct*`: numbered across the whole model) are not drawn, so they do not count.
_CONTEXT_ARRAYS = ("tex_", "mat_", "mesh_", "hfield_", "skin_")
_NOT_DRAWN = ("_pathadr", "tex_contenttypeadr", "mesh_bvh", "mesh_oct")
_VIS_PARTS = ("global_", "quality", "headlight", "map", "scale", "rgba")
_TEXTURE_IMAGES = ("tex_adr", "tex_data", "tex_width", "tex_height")  # hashed per texture, as uploaded
_ASSET_KEYS: "weakref.WeakKeyDictionary[mujoco.MjModel, dict]" = weakref.WeakKeyDictionary()


def render_assets_key(model: mujoco.MjModel, max_texture_px: int | None = None) -> str:
    """A 128-bit digest (xxh3) of everything a GL context made from `model` with textures
    shrunk to `max_texture_px` (None: whole) holds (a superset: every texture as uploaded,
    material, mesh, height-field and skin field): two models with one key upload the same
    textures, meshes, planes and settings, so a context made from either renders the
    other's scenes bit for bit (tests/test_offscreen.py). LIBERO writes a scene file per
    episode, and the episodes of a task (of all of libero_spatial) share their assets: their
    replays share one context, where each used to upload its own (0.5-1 s).

    Textures count by their images as uploaded, not by where they lie in `tex_data`: a
    scene's preview model (replay/render/preview_scene.py) and the full model shrunk on
    upload get one key, so which of the two a scene opens with (whether its preview was on
    disk yet) does not split an asset set over two contexts. Computed once per model and
    size (~11 ms for a LIBERO scene's 180 MB, plus the first shrink of its textures)."""
    import xxhash

    with MODEL_VIS_LOCK:  # not while a preview upload has the textures shrunk for a moment
        keys = _ASSET_KEYS.setdefault(model, {})
        key = keys.get(max_texture_px)
        if key is not None:
            return key
        h = xxhash.xxh3_128()
        for name in sorted(a for a in dir(model) if a.startswith(_CONTEXT_ARRAYS) and a not in _TEXTURE_IMAGES
                           and not any(n in a for n in _NOT_DRAWN)):
            value = np.ascontiguousarray(getattr(model, name))
            h.update(f"{name}{value.dtype}{value.shape}".encode())
            h.update(value.view(np.uint8).reshape(-1) if value.size else b"")
        for i in range(model.ntex):
            w, ht, texels = texture_as_uploaded(model, i, max_texture_px)
            h.update(f"texture {i}: {w}x{ht}".encode())
            h.update(np.ascontiguousarray(texels).view(np.uint8).reshape(-1) if texels.size else b"")
        for part in _VIS_PARTS:
            sub = getattr(model.vis, part)
            for name in sorted(a for a in dir(sub) if not a.startswith("_")):
                h.update(f"{part}.{name}={np.asarray(getattr(sub, name)).tobytes().hex()}".encode())
        planes = np.flatnonzero(model.geom_type == mujoco.mjtGeom.mjGEOM_PLANE)
        for value in (np.float64(model.stat.extent), model.geom_size[planes], model.geom_matid[planes]):
            h.update(np.ascontiguousarray(value).tobytes())
        key = keys[max_texture_px] = h.hexdigest()
        return key


def preview_texture_px(width: int, height: int) -> int:
    """The largest texture side a "preview" context uploads for frames of this size: the
    next power of two at or above the frame's longer side (at least 256). A texture can fill
    at most about the whole frame, so more texels than that are never seen at once."""
    side = max(int(width), int(height), 256)
    return 1 << (side - 1).bit_length()


_SHRUNK: OrderedDict = OrderedDict()  # (texel digest, shape, max_px) -> the shrunk texels: `shrunk_texels`
_SHRUNK_LIMIT_BYTES = 96 * 2**20
_SHRUNK_LOCK = threading.Lock()


def shrunk_texels(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """`pixels` (faces, h, w, channels) box-downscaled (Pillow) to `size` (w, h) a face, flat.

    Kept by content (an xxh3-128 digest of the texels): scenes of different asset sets share
    most textures (a libero_object task has 13 of its 14 in the next task's scene), and
    shrinking them again cost 0.12-0.15 s of a new asset set's open on an idle machine."""
    import xxhash
    from PIL import Image

    key = (xxhash.xxh3_128_hexdigest(np.ascontiguousarray(pixels)), pixels.shape, size)
    with _SHRUNK_LOCK:
        small = _SHRUNK.get(key)
        if small is not None:
            _SHRUNK.move_to_end(key)
            return small
    c = pixels.shape[-1]
    small = np.concatenate([np.asarray(Image.fromarray(f[..., 0] if c == 1 else f).resize(
        size, Image.Resampling.BOX)).reshape(-1) for f in pixels])
    small.flags.writeable = False
    with _SHRUNK_LOCK:
        _SHRUNK[key] = small
        total = sum(v.nbytes for v in _SHRUNK.values())
        while total > _SHRUNK_LIMIT_BYTES and len(_SHRUNK) > 1:
            total -= _SHRUNK.popitem(last=False)[1].nbytes
    return small


def texture_as_uploaded(model: mujoco.MjModel, i: int, max_px: int | None) -> tuple[int, int, np.ndarray]:
    """(width, height, texels) of texture `i` as a context made with `max_texture_px=max_px`
    uploads it: box-downscaled (Pillow, `shrunk_texels`) when its image (a cube or skybox
    face, when its 6 faces are stacked) is larger than `max_px` a side, else its own texels
    (a view of `tex_data`). Reads the model, changes nothing."""
    w, h, c, adr = (int(model.tex_width[i]), int(model.tex_height[i]), int(model.tex_nchannel[i]),
                    int(model.tex_adr[i]))
    texels = model.tex_data[adr: adr + w * h * c]
    faces = 6 if model.tex_type[i] != mujoco.mjtTexture.mjTEXTURE_2D and h == 6 * w else 1
    fh = h // faces
    if not max_px or max(w, fh) <= max_px or c not in (1, 3, 4):
        return w, h, texels
    scale = max_px / max(w, fh)
    sw, sh = max(1, round(w * scale)), max(1, round(fh * scale))
    return sw, faces * sh, shrunk_texels(texels.reshape(faces, fh, w, c), (sw, sh))


def shrink_textures(model: mujoco.MjModel, max_px: int) -> list:
    """Writes, in place, each texture larger than `max_px` a side as uploaded
    (`texture_as_uploaded`) at the start of its own slot of `tex_data`. Returns what
    `restore_textures` needs to put the model back."""
    saved = []
    for i in range(model.ntex):
        w, h, adr = int(model.tex_width[i]), int(model.tex_height[i]), int(model.tex_adr[i])
        sw, sh, small = texture_as_uploaded(model, i, max_px)
        if (sw, sh) == (w, h):
            continue
        saved.append((i, w, h, adr, model.tex_data[adr: adr + small.size].copy()))
        model.tex_data[adr: adr + small.size] = small
        model.tex_width[i], model.tex_height[i] = sw, sh
    return saved


def restore_textures(model: mujoco.MjModel, saved: list) -> None:
    for i, w, h, adr, head in saved:
        model.tex_data[adr: adr + head.size] = head
        model.tex_width[i], model.tex_height[i] = w, h


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
    one context (docs/benchmarks.md, session 16). Sharing is safe because every GL object an
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
