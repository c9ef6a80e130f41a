"""Compiled scenes kept on disk as MuJoCo binary models (MJB), so a scene compiled once opens fast.

Compiling a LIBERO scene (18 PNG textures to decode, 83 meshes with their convex hulls)
takes 4-8 s on this machine; loading its MJB takes a fraction of that (docs/benchmarks.md).
A dashboard user opening an episode of a scene the server has not compiled yet waited for
the compile every time the server restarted.

The key is a SHA-256 of the resolved XML (every asset an absolute path, see
`replay.scene.assets.resolve_scene`), the model folder, MuJoCo's version and each asset
file's path, size and mtime: another MuJoCo, an edited scene or a replaced texture compiles
anew. An unreadable cache file is removed and the scene compiled again.

Writing a LIBERO scene's MJB takes 1-2 s. A preview open also queues the scene's preview
(replay/render/preview_scene.py: compiled once more with small textures, 76 MB instead of 197 MB;
2-3.5 s with the write) for the same idle time. A process that renders for a user (the
dashboard's render service) calls `write_in_background(idle)`: the writes wait, then run on
a thread of their own at the lowest CPU priority while every live renderer is idle, so
neither the first frame of a new scene nor a scene opened while one is written waits for a
write.

Where: $SAFEVLA_SCENE_CACHE (a folder; "off" disables the cache), else
$XDG_CACHE_HOME/safevla/scenes, else ~/.cache/safevla/scenes. Size: at most
$SAFEVLA_SCENE_CACHE_MB megabytes (default 1024; a LIBERO scene is about 200 MB, its preview
76 MB), the least recently used files removed first. The dashboard's web scenes and poses
(replay/render/web_scene.py, about 15 MB a LIBERO scene) have their own folder and limit,
$SAFEVLA_WEB_CACHE_MB (default 512), trimmed the same way.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import logging
import os
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import mujoco

from replay.scene.assets import ASSET_FILE_ATTRS

DEFAULT_MB = 1024
DEFAULT_WEB_MB = 512
SUFFIX = ".mjb"


def cache_dir() -> Path | None:
    """The cache folder, or None when $SAFEVLA_SCENE_CACHE is "off"."""
    env = os.environ.get("SAFEVLA_SCENE_CACHE", "").strip()
    if env.lower() in ("off", "0", "false", "no"):
        return None
    if env:
        return Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "safevla" / "scenes"


def _megabytes(env: str, default: int) -> int:
    try:
        return int(float(os.environ.get(env, default)) * 2**20)
    except ValueError:
        return default * 2**20


def _limit_bytes() -> int:
    return _megabytes("SAFEVLA_SCENE_CACHE_MB", DEFAULT_MB)


def web_limit_bytes() -> int:
    """The size limit of the dashboard's web scenes and poses ($SAFEVLA_WEB_CACHE_MB, default
    `DEFAULT_WEB_MB`; replay/render/web_scene.py)."""
    return _megabytes("SAFEVLA_WEB_CACHE_MB", DEFAULT_WEB_MB)


def scene_digest(resolved_xml: str, modelfiledir: str) -> str:
    """The cache key of a resolved scene: its text, folder, MuJoCo version and asset files' stats."""
    h = hashlib.sha256()
    for part in (mujoco.__version__, modelfiledir, resolved_xml):
        h.update(part.encode())
        h.update(b"\0")
    try:
        root = ET.fromstring(resolved_xml)
    except ET.ParseError:
        return h.hexdigest()  # MuJoCo reports the error when it compiles
    for el in root.iter():
        for attr in ASSET_FILE_ATTRS.get(el.tag, ()):
            ref = el.get(attr)
            if ref:
                try:
                    st = os.stat(Path(modelfiledir) / ref)
                    h.update(f"{ref}|{st.st_size}|{st.st_mtime_ns}\0".encode())
                except OSError:
                    h.update(f"{ref}|missing\0".encode())
    return h.hexdigest()


_PENDING: list[tuple[mujoco.MjModel | None, Path, Callable[[], mujoco.MjModel | None] | None]] = []
_PENDING_LOCK = threading.Lock()
_DEFER = [False]
_WAKE = threading.Event()  # set when a scene is queued: the background writer looks
_WRITER: dict = {"thread": None, "asks": []}  # the background writer, and the idle() of each live render service
WRITER_NICE = 19  # the background writer's CPU priority (Linux): it takes what nobody else wants
WRITER_POLL_S = 0.25  # while not idle, the background writer looks again this often
_STOPPING = threading.Event()  # the process exits: the background writer starts nothing new
PART_STALE_S = 3600.0  # a half-written file this old was left by a process stopped mid-write


def defer_saves(on: bool = True) -> None:
    """From now on, newly compiled scenes are written by `save_pending()`, not at once."""
    _DEFER[0] = bool(on)


def _queue(entry) -> None:
    with _PENDING_LOCK:
        _PENDING.append(entry)
    _WAKE.set()


def save_pending(stop: Callable[[], bool] | None = None) -> int:
    """Writes the compiled scenes waiting for the cache; returns how many.

    The models may be shared by then: a renderer uploading one changes its vis settings and
    textures for a moment (under `render_assets.MODEL_VIS_LOCK`, counted by
    `render_assets.model_edits`). The write takes no lock and holds no GIL (`mj_saveModel`,
    0.5-0.7 s for a LIBERO scene): a file written while such a change started is dropped and
    the scene left for the next call, so an open never waits for a write, and nothing
    half-changed is kept.

    `stop()` is asked before each scene: when it says True (a frame is wanted, say), the
    rest waits for the next call."""
    from replay.render.render_assets import model_edits

    n = 0
    while True:
        with _PENDING_LOCK:
            if not _PENDING or (stop is not None and stop()):
                return n
            model, path, build = _PENDING.pop(0)
        if build is not None:  # a preview scene: compiled here, when nobody waits for a frame
            if path.is_file():
                continue
            try:
                model = build()
            except Exception:  # noqa: BLE001 - best effort: previews then keep shrinking on upload
                model = None
            if model is None:
                continue
            _store(model, path)  # a model of its own: nobody changes it
        else:
            edits = model_edits()
            if not _store(model, path, unchanged=lambda: model_edits() == edits):
                with _PENDING_LOCK:  # changed while written (a renderer opened): at the next call
                    _PENDING.append((model, path, None))
                return n
        n += 1


def write_in_background(idle: Callable[[], bool]) -> threading.Thread:
    """Defers saves (`defer_saves`) and writes them on a daemon thread of their own, one scene
    at a time while `idle()` says True (a render service: no frame queued or rendering), at
    the lowest CPU priority on Linux (`WRITER_NICE`, inherited by the threads MuJoCo's
    compiler starts). What a write costs (a LIBERO scene: 0.5-0.7 s; a preview scene's build and
    write, replay/render/preview_scene.py) then runs beside the renders instead of before them: a
    scene a user opens while one is written no longer waits for it (docs/benchmarks.md,
    2026-11-27, f2b93ae).

    One writer per process: it asks every `idle` registered and not yet withdrawn
    (`stop_asking`, when a render service closes) and writes only when all say True; with
    none registered it waits."""
    defer_saves()
    with _PENDING_LOCK:
        if idle not in _WRITER["asks"]:
            _WRITER["asks"].append(idle)
        thread = _WRITER["thread"]
        if thread is None or not thread.is_alive():
            thread = _WRITER["thread"] = threading.Thread(target=_write_loop, name="safevla-scene-write", daemon=True)
            thread.start()
            atexit.register(_stop_writer)
    _WAKE.set()
    return thread


def stop_asking(idle: Callable[[], bool]) -> None:
    """The background writer no longer asks `idle` (its render service closed)."""
    with _PENDING_LOCK:
        if idle in _WRITER["asks"]:
            _WRITER["asks"].remove(idle)


def _writer_may_write() -> bool:
    asks = tuple(_WRITER["asks"])  # no lock: asked by `save_pending` while it holds _PENDING_LOCK
    return bool(asks) and all(idle() for idle in asks)


def _stop_writer() -> None:
    """At the process's exit (atexit): the background writer starts nothing new and ends once
    the write under way has. Not sooner: a daemon thread in `mj_saveModel` (which gives
    Python's GIL up) when the interpreter finalizes is ended as it takes the GIL back, and
    crashes the process (dashboard/ahead.py, `_end_at_exit`)."""
    _STOPPING.set()
    _WAKE.set()
    thread = _WRITER["thread"]
    if thread is not None:
        thread.join()


def pending() -> int:
    """How many scenes wait to be written."""
    with _PENDING_LOCK:
        return len(_PENDING)


def _write_loop() -> None:
    if sys.platform.startswith("linux"):  # PRIO_PROCESS with a thread id is a thread's own nice on Linux only
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WRITER_NICE)
        except OSError:
            pass
    while not _STOPPING.is_set():
        _WAKE.wait()
        _WAKE.clear()
        while pending() and not _STOPPING.is_set():
            try:  # returns with scenes left when the renderer is busy (or one changed while written)
                save_pending(stop=lambda: _STOPPING.is_set() or not _writer_may_write())
            except Exception:  # noqa: BLE001 - a write that fails costs the next open a compile, nothing else
                logging.getLogger(__name__).debug("writing a compiled scene failed", exc_info=True)
            if pending():
                time.sleep(WRITER_POLL_S)


def _path_for(resolved_xml: str, modelfiledir: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / (scene_digest(resolved_xml, modelfiledir) + SUFFIX)


def load_cached(resolved_xml: str, modelfiledir: str) -> mujoco.MjModel | None:
    """The cached model of this scene text, or None (not cached, unreadable, cache off)."""
    path = _path_for(resolved_xml, modelfiledir)
    return None if path is None else _load(path)


def _load(path: Path) -> mujoco.MjModel | None:
    """The model stored at `path`, marked recently used (evicted last); None if there is none,
    or it is truncated or from an incompatible build (then removed, to be compiled anew)."""
    if not path.is_file():
        return None
    try:
        model = mujoco.MjModel.from_binary_path(str(path))
        os.utime(path)
        return model
    except (ValueError, OSError, mujoco.FatalError):
        path.unlink(missing_ok=True)
        return None


def store_unless_cached(resolved_xml: str, modelfiledir: str, build: Callable[[], mujoco.MjModel]) -> None:
    """Writes `build()` under this scene text before returning, even where saves are deferred
    (`defer_saves`), for another process to load; where it is cached already it is only marked
    recently used, not loaded. Nothing with the cache off; a disk error keeps nothing."""
    path = _path_for(resolved_xml, modelfiledir)
    if path is None:
        return
    if path.is_file():
        with contextlib.suppress(OSError):
            os.utime(path)
        return
    _store(build(), path)


def build_later(resolved_xml: str, modelfiledir: str, build: Callable[[], mujoco.MjModel | None]) -> None:
    """Queues `build()` (None: nothing to store) for `save_pending()` to compile and store
    under this scene text. Only while saves are deferred (a render service): a process that
    renders in the foreground would pay the compile on its user's time."""
    path = _path_for(resolved_xml, modelfiledir)
    if path is None or not _DEFER[0] or path.is_file():
        return
    with _PENDING_LOCK:
        if any(p == path for _, p, _ in _PENDING):
            return
        _PENDING.append((None, path, build))
    _WAKE.set()


def compile_cached(resolved_xml: str, modelfiledir: str, compile_fn: Callable[[], mujoco.MjModel], *,
                   store: bool = True) -> mujoco.MjModel:
    """The scene's model from the disk cache, else `compile_fn()` (then stored for next time,
    unless `store` is False).

    Errors of `compile_fn` pass through; a cache that cannot be read or written is skipped.
    """
    path = _path_for(resolved_xml, modelfiledir)
    if path is None:
        return compile_fn()
    model = _load(path)
    if model is not None:
        return model
    model = compile_fn()
    if not store:
        return model
    if _DEFER[0]:
        _queue((model, path, None))
    else:
        _store(model, path)
    return model


def _store(model: mujoco.MjModel, path: Path, *, unchanged: Callable[[], bool] | None = None) -> bool:
    """Writes `model` to `path` whole or not at all. False (nothing kept) when `unchanged()`,
    asked after the write, says the model changed meanwhile; a disk error keeps nothing either
    and costs the next open a compile, nothing else."""
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
        os.close(fd)
        mujoco.mj_saveModel(model, tmp, None)
        if unchanged is not None and not unchanged():
            return False
        os.replace(tmp, path)  # readers never see half a file
        tmp = None
        evict(path.parent, _limit_bytes(), keep=path)
    except (OSError, ValueError, mujoco.FatalError):
        pass
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return True


def evict(folder: Path, limit: int, *, keep: Path, suffix: str = SUFFIX) -> None:
    """Removes the least recently used `suffix` files of `folder` (never `keep`) until they
    hold at most `limit` bytes, and half-written files left by a stopped process."""
    for part in folder.glob("*.part"):  # left by a process stopped mid-write (the writer's own are newer)
        try:
            if time.time() - part.stat().st_mtime > PART_STALE_S:
                part.unlink()
        except OSError:
            pass
    files = sorted((p for p in folder.glob("*" + suffix) if p != keep), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files) + keep.stat().st_size
    for p in files:
        if total <= limit:
            break
        total -= p.stat().st_size
        p.unlink(missing_ok=True)
