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
dashboard's render service) calls `defer_saves()`, and then `save_pending()` when no
frame is waiting, so the first frame of a new scene does not wait for the write.

Where: $SAFEVLA_SCENE_CACHE (a folder; "off" disables the cache), else
$XDG_CACHE_HOME/safevla/scenes, else ~/.cache/safevla/scenes. Size: at most
$SAFEVLA_SCENE_CACHE_MB megabytes (default 4096; a LIBERO scene is about 200 MB), the least
recently used files removed first.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import mujoco

from replay.scene.assets import ASSET_FILE_ATTRS

DEFAULT_MB = 4096
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


def _limit_bytes() -> int:
    try:
        return int(float(os.environ.get("SAFEVLA_SCENE_CACHE_MB", DEFAULT_MB)) * 2**20)
    except ValueError:
        return DEFAULT_MB * 2**20


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


def defer_saves(on: bool = True) -> None:
    """From now on, newly compiled scenes are written by `save_pending()`, not at once."""
    _DEFER[0] = bool(on)


def save_pending(stop: Callable[[], bool] | None = None) -> int:
    """Writes the compiled scenes waiting for the cache; returns how many. The models may be
    shared by then, so the write holds the lock under which their vis settings change.

    `stop()` is asked before each scene: when it says True (a frame is wanted, say), the
    rest waits for the next call, so a frame waits for one scene's write or preview build at
    most (1-2 s for a LIBERO scene), not for all of them."""
    from replay.render.offscreen import MODEL_VIS_LOCK

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
            _store(model, path)
        else:
            with MODEL_VIS_LOCK:
                _store(model, path)
        n += 1


def _path_for(resolved_xml: str, modelfiledir: str) -> Path | None:
    folder = cache_dir()
    return None if folder is None else folder / (scene_digest(resolved_xml, modelfiledir) + SUFFIX)


def load_cached(resolved_xml: str, modelfiledir: str) -> mujoco.MjModel | None:
    """The cached model of this scene text, or None (not cached, unreadable, cache off)."""
    path = _path_for(resolved_xml, modelfiledir)
    if path is None or not path.is_file():
        return None
    try:
        model = mujoco.MjModel.from_binary_path(str(path))
        os.utime(path)
        return model
    except (ValueError, OSError, mujoco.FatalError):
        path.unlink(missing_ok=True)
        return None


def build_later(resolved_xml: str, modelfiledir: str, build: Callable[[], mujoco.MjModel | None]) -> None:
    """Queues `build()` (None: nothing to store) for `save_pending()` to compile and store
    under this scene text. Only while saves are deferred (a render service): a process that
    renders in the foreground would pay the compile on its user's time."""
    path = _path_for(resolved_xml, modelfiledir)
    if path is None or not _DEFER[0] or path.is_file():
        return
    with _PENDING_LOCK:
        if all(p != path for _, p, _ in _PENDING):
            _PENDING.append((None, path, build))


def compile_cached(resolved_xml: str, modelfiledir: str, compile_fn: Callable[[], mujoco.MjModel]) -> mujoco.MjModel:
    """The scene's model from the disk cache, else `compile_fn()` (then stored for next time).

    Errors of `compile_fn` pass through; a cache that cannot be read or written is skipped.
    """
    folder = cache_dir()
    if folder is None:
        return compile_fn()
    path = folder / (scene_digest(resolved_xml, modelfiledir) + SUFFIX)
    if path.is_file():
        try:
            model = mujoco.MjModel.from_binary_path(str(path))
            os.utime(path)  # recently used: evicted last
            return model
        except (ValueError, OSError, mujoco.FatalError):
            path.unlink(missing_ok=True)  # truncated or from an incompatible build: compile anew
    model = compile_fn()
    if _DEFER[0]:
        with _PENDING_LOCK:
            _PENDING.append((model, path, None))
    else:
        _store(model, path)
    return model


def _store(model: mujoco.MjModel, path: Path) -> None:
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
        os.close(fd)
        mujoco.mj_saveModel(model, tmp, None)
        os.replace(tmp, path)  # readers never see half a file
        tmp = None
        _evict(path.parent, keep=path)
    except (OSError, ValueError, mujoco.FatalError):
        pass  # a read-only or full disk costs the next open a compile, nothing else
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def _evict(folder: Path, *, keep: Path) -> None:
    files = sorted((p for p in folder.glob("*" + SUFFIX) if p != keep), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files) + keep.stat().st_size
    limit = _limit_bytes()
    for p in files:
        if total <= limit:
            break
        total -= p.stat().st_size
        p.unlink(missing_ok=True)
