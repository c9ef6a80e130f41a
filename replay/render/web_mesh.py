"""A mesh's simplification for the browser (replay/render/web_scene.py), and the meshes it
made, kept by their source arrays.

Every LIBERO scene has the robot's meshes (its links, gripper and pedestal): their
simplification was 0.2 s of a scene's 0.4 s web scene (`web_scene.scene_blob`, 2026-11-28). A scene converted after another in the same process (the
next scene a user opens, the server's start-up load, dashboard/convert_ahead.py) finds them here.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np

KEPT_BYTES = 32 * 2**20  # a LIBERO scene's simplified meshes are about 1.5 MB
_KEPT: OrderedDict = OrderedDict()  # source key -> the mesh made from it
_KEPT_SIZE = [0]
_LOCK = threading.Lock()


def source_key(arrays: Sequence[np.ndarray], settings: tuple) -> bytes:
    """A digest of a mesh's source arrays (their bytes, shapes and types) and the settings its
    simplification used."""
    h = hashlib.blake2b(repr(settings).encode(), digest_size=16)
    for a in arrays:
        h.update(repr((a.shape, a.dtype.str)).encode())
        h.update(np.ascontiguousarray(a))
    return h.digest()


def remembered(key: bytes, make: Callable[[], dict]) -> dict:
    """`make()`, or what it gave for `key` before in this process (the last `KEPT_BYTES` of
    arrays). The dict returned is shared: read it, never change it."""
    with _LOCK:
        got = _KEPT.get(key)
        if got is not None:
            _KEPT.move_to_end(key)
            return got
    got = make()
    size = sum(v.nbytes for v in got.values() if isinstance(v, np.ndarray))
    with _LOCK:
        if key not in _KEPT:
            _KEPT[key] = got
            _KEPT_SIZE[0] += size
        while _KEPT_SIZE[0] > KEPT_BYTES and len(_KEPT) > 1:
            _, old = _KEPT.popitem(last=False)
            _KEPT_SIZE[0] -= sum(v.nbytes for v in old.values() if isinstance(v, np.ndarray))
    return got


def cluster(pos: np.ndarray, normals: np.ndarray, uv: np.ndarray | None, tris: np.ndarray, limit: int,
             min_cell: float = 0.0):
    """Vertex clustering: corners in one cell of a grid over the mesh's box (and, with texture
    coordinates, one cell of a 64-per-unit grid of those, so seams stay) become one corner at
    their mean; triangles left with two corners in one cell are dropped. The finest grid with
    cells of at least `min_cell` (model units) and at most `limit` corners is used: 2.5 mm
    cells for a 20 cm object at 80 cells."""
    lo, ext = pos.min(axis=0), np.maximum(np.ptp(pos, axis=0), 1e-12)
    grids = (256, 192, 160, 128, 96, 80, 64, 48, 32, 24, 16, 12, 8, 6, 4)
    for cells in [c for c in grids if ext.max() / c >= min_cell] or grids[-1:]:
        c = np.minimum(((pos - lo) / ext * cells).astype(np.int64), cells - 1)
        key = (c[:, 0] * cells + c[:, 1]) * cells + c[:, 2]
        if uv is not None:
            t = np.floor(uv * 64).astype(np.int64)
            key = key * 1_000_003 + (t[:, 0] % 1009) * 1013 + t[:, 1] % 1013
        uniq, inv = np.unique(key, return_inverse=True)
        if uniq.size <= limit:
            break
    n = uniq.size
    count = np.bincount(inv, minlength=n)[:, None]
    mean = lambda a: np.stack([np.bincount(inv, a[:, k], n) for k in range(a.shape[1])], axis=1)  # noqa: E731
    t = inv[tris]
    keep = (t[:, 0] != t[:, 1]) & (t[:, 1] != t[:, 2]) & (t[:, 0] != t[:, 2])
    return (mean(pos) / count, mean(normals), None if uv is None else mean(uv) / count, t[keep])


def _area(pos: np.ndarray, tris: np.ndarray) -> float:
    return float(np.linalg.norm(np.cross(pos[tris[:, 1]] - pos[tris[:, 0]], pos[tris[:, 2]] - pos[tris[:, 0]]),
                                axis=1).sum() / 2)


def decimate(verts: np.ndarray, faces: np.ndarray, triangle_m2: float):
    """Quadric edge-collapse decimation (fast-simplification) of a mesh welded by position, to
    about a triangle per `triangle_m2` of surface (flat parts get large triangles,
    curved ones small), with area-weighted smooth normals: (pos, normals, triangles), or None
    where that would not cut the triangles by a fifth, or where the result's area is off by over
    3 % or its box by over 1 mm (a mesh the decimation does not handle: clustering takes it)."""
    import fast_simplification

    rows = np.ascontiguousarray(verts, np.float32)  # MuJoCo's own float32 vertices: welded where equal
    _, first, weld = np.unique(rows.view(np.dtype((np.void, 12))).ravel(), return_index=True, return_inverse=True)
    pos, tris = rows[first].astype(np.float64), weld.reshape(-1)[faces]
    tris = tris[(tris[:, 0] != tris[:, 1]) & (tris[:, 1] != tris[:, 2]) & (tris[:, 0] != tris[:, 2])]
    area = _area(pos, tris)
    target = max(64, int(area / triangle_m2))
    if not len(tris) or target > 0.8 * len(tris):
        return None
    out_pos, out_tris = fast_simplification.simplify(pos, tris.astype(np.int32), target_count=target)
    out_pos, out_tris = np.asarray(out_pos, np.float64), np.asarray(out_tris, np.int64)
    if (not len(out_tris) or abs(_area(out_pos, out_tris) / area - 1) > 0.03
            or np.abs(out_pos.min(axis=0) - pos.min(axis=0)).max() > 1e-3
            or np.abs(out_pos.max(axis=0) - pos.max(axis=0)).max() > 1e-3):
        return None
    face_normals = np.cross(out_pos[out_tris[:, 1]] - out_pos[out_tris[:, 0]],
                            out_pos[out_tris[:, 2]] - out_pos[out_tris[:, 0]])  # length: twice the area
    normals = np.stack([np.bincount(out_tris.reshape(-1), np.repeat(face_normals[:, k], 3), len(out_pos))
                        for k in range(3)], axis=1)
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    return out_pos, normals, out_tris
