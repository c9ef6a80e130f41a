"""What an offscreen GL context uploads from a compiled model, and when two models upload the same.

`mjr_makeContext` copies a model's textures, materials, meshes, height fields, skins and drawn
`vis` settings into GL objects. `render_assets_key` digests all of it, so the offscreen contexts
of replay/render/offscreen.py are shared by scenes with one key. A "preview" context uploads
textures box-downscaled to the frame size (`preview_texture_px`, `texture_as_uploaded`,
`shrink_textures`), which the preview scene files (replay/render/preview_scene.py) store.

Compiled models are shared read-only between replayers; the few places that change one for a
moment (the offscreen buffer size, textures shrunk for an upload) do it under `MODEL_VIS_LOCK`,
and `model_edits` lets a reader that takes no lock (the scene cache's writer) see that one ran.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

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
    sw, sh = shrunk_size(w, fh, max_px)
    return sw, faces * sh, shrunk_texels(texels.reshape(faces, fh, w, c), (sw, sh))


def shrunk_size(width: int, height: int, max_px: int) -> tuple[int, int]:
    """The size an image is box-downscaled to at most `max_px` a side (itself when it fits)."""
    if max(width, height) <= max_px:
        return width, height
    scale = max_px / max(width, height)
    return max(1, round(width * scale)), max(1, round(height * scale))


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
