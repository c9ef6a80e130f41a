"""Texture files decoded and shrunk once, kept by file: in memory and in the compiled-scene
cache folder (replay/render/scene_cache.py, `textures/`).

A web scene's conversion decodes each of the scene's PNG textures and shrinks it to the web's
size (`scene_models.web_model`): 1.3 s of a LIBERO scene's 2.8 s conversion, most of it a few
4096-px images. LIBERO's scenes share them: the demo's 61 scene files use 27 texture files 890
times (the scanned bowl's 12.8 MB PNG in 97 of them), so a scene converted after another one
mostly finds its textures here. A file is known by its real path, size and modification time.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

FORMAT = 1  # bump when what is kept changes: files of another format are not read
IN_MEMORY = 64  # textures kept in memory (256 px RGB: 0.2 MB each)
DISK_BYTES = 64 * 2**20  # the folder's size limit (least recently used removed first)
_KEPT: OrderedDict = OrderedDict()
_LOCK = threading.Lock()

Texels = tuple[int, int, bytes]  # width, height, RGB texels (rows top first)


def _key(path: str, max_px: int) -> tuple:
    st = os.stat(path)
    return os.path.realpath(path), st.st_size, st.st_mtime_ns, int(max_px), FORMAT


def _file(key: tuple) -> Path | None:
    from replay.render.scene_cache import cache_dir

    folder = cache_dir()
    return None if folder is None else folder / "textures" / f"{hashlib.sha256(repr(key).encode()).hexdigest()[:32]}.npy"


def _remember(key: tuple, got: Texels) -> Texels:
    with _LOCK:
        _KEPT[key] = got
        _KEPT.move_to_end(key)
        while len(_KEPT) > IN_MEMORY:
            _KEPT.popitem(last=False)
    return got


def shrunk(path: str, max_px: int, decode: Callable[[str, int], Texels]) -> Texels:
    """`decode(path, max_px)`, from memory or disk when this file was decoded before at this
    size; stored for the next scene otherwise. A cache file that cannot be read is decoded
    anew; one that cannot be written is skipped."""
    key = _key(path, max_px)
    with _LOCK:
        got = _KEPT.get(key)
        if got is not None:
            _KEPT.move_to_end(key)
            return got
    file = _file(key)
    if file is not None and file.is_file():
        try:
            arr = np.load(file, allow_pickle=False)
            os.utime(file)
            return _remember(key, (int(arr.shape[1]), int(arr.shape[0]), arr.tobytes()))
        except (OSError, ValueError, IndexError):
            pass
    w, h, data = decode(path, max_px)
    got = _remember(key, (w, h, data))
    if file is not None:
        _store(file, np.frombuffer(data, np.uint8).reshape(h, w, -1))
    return got


def _store(file: Path, arr: np.ndarray) -> None:
    import io

    from replay.render.scene_cache import evict
    from scoring.records.io import atomic_write_bytes

    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    try:
        atomic_write_bytes(file, buf.getvalue())
        evict(file.parent, DISK_BYTES, keep=file, suffix=".npy")
    except OSError:  # a full or read-only disk: the next scene decodes it again
        pass
