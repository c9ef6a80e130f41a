"""A record's compiled MuJoCo scene, compiled once and shared: per MJCF in memory (a few
scenes) and on disk (replay/render/scene_cache.py), with a texture-shrunk preview variant for
the dashboard's first frames, a texture-free variant for the browser's poses, and the cameras
the scene offers.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import mujoco
import numpy as np

from replay.render.render_assets import MODEL_VIS_LOCK
from replay.render.preview_scene import compile_preview, preview_text
from replay.render.scene_cache import build_later, compile_cached, load_cached, scene_digest
from replay.render.violation import RenderError
from replay.scene.assets import SceneAssetError, resolve_scene
from scoring.errors import RecordError
from scoring.records.io import resolve_mjcf
from scoring.records.schema import EpisodeRecord

FREE, FREE_VIOLATION = "free", "free:violation"
AGENT_VIEWS = ("agentview", "robot0_agentview_center")
WRIST_VIEWS = ("robot0_eye_in_hand",)  # robosuite's wrist camera (LIBERO's observation/wrist_image)
_MODEL_CACHE: OrderedDict = OrderedDict()
_MODEL_CACHE_SIZE = 4
_POSE_CACHE: OrderedDict = OrderedDict()
_POSE_CACHE_SIZE = 2  # a LIBERO scene's pose model is about 60 MB
_POSE_LOCK = threading.Lock()  # the page's script and the dashboard's worker threads ask for them


def scene_key(record: EpisodeRecord) -> tuple:
    """What identifies the record's compiled scene: its MJCF file and mtime, or its embedded text.

    Raises RecordError for a record without replay state or a missing MJCF file.
    """
    src = resolve_mjcf(record)
    if record.replay.mjcf_is_xml:
        base = Path(record.source).resolve().parent if record.source else Path.cwd()
        return ("xml", src, str(base))
    path = Path(src)
    if not path.is_file():
        raise RecordError(f"MJCF file not found: {path}", file=record.source, episode=record.episode_id,
                          field="replay.mjcf")
    path = path.resolve()  # episodes in sibling folders name one scene file as ../x and ../../x
    return ("path", str(path), path.stat().st_mtime_ns)


def load_model(record: EpisodeRecord) -> mujoco.MjModel:
    """A fresh copy of the record's compiled model (see `scene_model` for errors)."""
    model = scene_model(record)
    with MODEL_VIS_LOCK:  # not while a context upload has its textures shrunk for a moment
        return copy.copy(model)


def scene_model(record: EpisodeRecord) -> mujoco.MjModel:
    """The record's compiled model, cached per MJCF and shared: read it, never change it
    (a LIBERO scene is 150 MB of textures; a copy per replayer took 0.6 s and that memory).

    Raises RecordError for a record without replay state or a missing MJCF file, and
    RenderError for a missing mesh/texture (naming the file and where it was looked for)
    or an MJCF MuJoCo cannot compile.
    """
    key = scene_key(record)
    model = _MODEL_CACHE.get(key)
    if model is None:
        resolved, base, origin = _resolved_scene(key)
        model = compile_cached(resolved, str(base) + os.sep, lambda: _compile(resolved, base, origin))
        _remember(key, model)
    _MODEL_CACHE.move_to_end(key)
    return model


def scene_digest_of(record: EpisodeRecord, *, placement: bool = True) -> str:
    """The disk-cache key of the record's scene (`scene_cache.scene_digest`: its resolved
    text, folder, MuJoCo's version and its asset files), without compiling it. Without
    `placement`, the bodies' own placements (pos, quat and other orientation attributes of
    `<body>` elements) are left out: LIBERO writes one scene file per initial state of a task,
    differing only there, and what a body holds (geoms, meshes, materials) is the same in all."""
    return _digest(scene_key(record), placement)


_PLACEMENT = re.compile(r'\s(?:pos|quat|euler|axisangle|xyaxes|zaxis)="[^"]*"')


@functools.lru_cache(maxsize=64)
def _digest(key: tuple, placement: bool = True) -> str:
    resolved, base, _ = _resolved_scene(key)
    if not placement:
        resolved = re.sub(r"<body\b[^>]*>", lambda m: _PLACEMENT.sub("", m.group(0)), resolved)
    return scene_digest(resolved, str(base) + os.sep)


def scene_model_once(record: EpisodeRecord, *, store: bool = True) -> mujoco.MjModel:
    """The record's compiled model, as `scene_model` gives it, but not kept in memory when
    it was not already: for a one-off use (a web scene's conversion), so the process does
    not hold a LIBERO scene's 200 MB after it. Without `store`, a scene compiled here is not
    written to the disk cache either (1-2 s for a LIBERO scene, which a one-off use need not
    wait for); one already there is read."""
    key = scene_key(record)
    model = _MODEL_CACHE.get(key)
    if model is not None:
        return model
    resolved, base, origin = _resolved_scene(key)
    return compile_cached(resolved, str(base) + os.sep, lambda: _compile(resolved, base, origin), store=store)


def web_model(record: EpisodeRecord, max_px: int) -> mujoco.MjModel:
    """The record's scene as a one-off conversion to `max_px` textures needs it: the compiled
    model from memory or the disk cache when there, else compiled with each 2-D PNG texture
    decoded by Pillow beside the others and shrunk as an upload to `max_px` shrinks it
    (`render_assets.texture_as_uploaded`: the same texels), not decoded whole by MuJoCo one
    after another (1.2 s of a LIBERO scene's 2 s compile). Not kept, not stored; errors as
    for `scene_model`."""
    key = scene_key(record)
    model = _MODEL_CACHE.get(key)
    if model is not None:
        return model
    resolved, base, origin = _resolved_scene(key)
    return load_cached(resolved, str(base) + os.sep) or _compile(resolved, base, origin, textures_px=int(max_px))


def _decoded_shrunk(path: str, max_px: int) -> tuple[int, int, bytes]:
    """(width, height, RGB texels) of the PNG at `path` as MuJoCo decodes it (rows top first,
    three channels) and `texture_as_uploaded` shrinks it; decoded once per file and size
    (replay/render/texture_cache.py)."""
    from replay.render.texture_cache import shrunk

    return shrunk(path, max_px, _decode_shrink)


def _decode_shrink(path: str, max_px: int) -> tuple[int, int, bytes]:
    from PIL import Image

    from replay.render.render_assets import shrunk_texels

    with Image.open(path) as im:
        img = np.asarray(im.convert("RGB"))
    h, w = img.shape[:2]
    if max(w, h) <= max_px:
        return w, h, img.tobytes()
    scale = max_px / max(w, h)
    sw, sh = max(1, round(w * scale)), max(1, round(h * scale))
    return sw, sh, shrunk_texels(img.reshape(1, h, w, 3), (sw, sh)).tobytes()


def _shrink_textures_in(spec: mujoco.MjSpec, base: Path, max_px: int) -> None:
    """Gives `spec`'s plain 2-D PNG textures (three channels, no flip) as shrunk data
    (`_decoded_shrunk`, on two threads: Pillow decodes without the GIL); the rest stays
    MuJoCo's to load."""
    from concurrent.futures import ThreadPoolExecutor

    plain = [t for t in spec.textures if t.file.lower().endswith(".png") and not t.content_type
             and int(t.type) == int(mujoco.mjtTexture.mjTEXTURE_2D) and t.nchannel == 3 and not (t.hflip or t.vflip)
             and int(t.builtin) == int(mujoco.mjtBuiltin.mjBUILTIN_NONE)]
    paths = [t.file if os.path.isabs(t.file) else str(base / t.file) for t in plain]
    if not all(os.path.isfile(p) for p in paths):
        return  # MuJoCo says which file is missing
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="safevla-texture") as pool:
        for t, (w, h, data) in zip(plain, pool.map(lambda p: _decoded_shrunk(p, max_px), paths)):
            t.file = ""
            t.width, t.height = w, h
            t.data = data


def pose_model_in_memory(record: EpisodeRecord) -> bool:
    """Whether `pose_model(record)` is kept in memory (no load or compile)."""
    with _POSE_LOCK:
        return scene_key(record) in _POSE_CACHE


def pose_model(record: EpisodeRecord) -> mujoco.MjModel:
    """The record's scene compiled with every texture a one-texel flat colour: the same bodies,
    joints, geoms, meshes, materials and cameras as `scene_model` (so the same kinematics,
    contacts and highlights) without the images, which only a renderer reads. For an episode's
    poses and violation marks (replay/render/web_scene.py): a LIBERO scene's is 60 MB and
    compiles in a third of the time, against 200 MB. The last few are kept in memory, and
    all on disk (replay/render/scene_cache.py); errors as for `scene_model`."""
    key = scene_key(record)
    with _POSE_LOCK:
        model = _POSE_CACHE.get(key)
        if model is not None:
            _POSE_CACHE.move_to_end(key)
            return model
    resolved, base, origin = _resolved_scene(key)
    model = compile_cached(f"{resolved}\n<!-- safevla textures flat -->", str(base) + os.sep,
                           lambda: _compile(resolved, base, origin, flat_textures=True))
    with _POSE_LOCK:
        _POSE_CACHE[key] = model
        while len(_POSE_CACHE) > _POSE_CACHE_SIZE:
            _POSE_CACHE.popitem(last=False)
    return model


def preview_scene_model(record: EpisodeRecord, max_px: int) -> mujoco.MjModel | None:
    """The record's scene with textures shrunk to `max_px` (replay/render/preview_scene.py), from
    memory or the disk cache (the scene itself when no texture is larger); None if not built yet (then it is queued for a render
    service's idle time, and the caller shrinks the full model's textures on upload)."""
    key = (scene_key(record), "preview", int(max_px))
    model = _MODEL_CACHE.get(key)
    if model is None:
        resolved, base, _ = _resolved_scene(key[0])
        text, folder = preview_text(resolved, max_px), str(base) + os.sep
        model = load_cached(text, folder)
        if model is None:
            full = scene_model(record)
            faces = np.where(full.tex_height == 6 * full.tex_width, full.tex_width, full.tex_height)
            if full.ntex == 0 or max(full.tex_width.max(), faces.max()) <= max_px:
                return full  # nothing to shrink: the scene itself
            build_later(text, folder, lambda: compile_preview(resolved, folder, full, max_px))
            return None
        _remember(key, model)
    _MODEL_CACHE.move_to_end(key)
    return model


def visible_groups(model: mujoco.MjModel) -> set[int]:
    """The geom groups a replay draws: all but group 0 (collision meshes) when the model keeps
    its visual geoms in group 1 or above (robosuite, LIBERO), else all."""
    return set(range(1, 6)) if (model.geom_group >= 1).any() else set(range(6))


def replay_option(model: mujoco.MjModel, groups: Sequence[int] | None = None) -> mujoco.MjvOption:
    """The `MjvOption` a replay draws with: `groups` (None: `visible_groups`) on, the rest off."""
    opt = mujoco.MjvOption()
    shown = visible_groups(model) if groups is None else set(int(g) for g in groups)
    for g in range(6):
        opt.geomgroup[g] = int(g in shown)
    return opt


def _resolved_scene(key: tuple) -> tuple[str, Path, str]:
    kind, src, _ = key
    path = Path(src) if kind == "path" else None
    text, base = (path.read_text(), path.parent) if path else (src, Path(key[2]))
    origin = str(path) if path else "embedded MJCF"
    try:
        return resolve_scene(text, base=base, origin=origin), base, origin
    except SceneAssetError as exc:
        raise RenderError(str(exc)) from None


def _remember(key, model: mujoco.MjModel) -> None:
    _MODEL_CACHE[key] = model
    while len(_MODEL_CACHE) > _MODEL_CACHE_SIZE:
        _MODEL_CACHE.popitem(last=False)


def cameras(record: EpisodeRecord) -> tuple[str, ...]:
    """The camera names a replay of `record` can use: its scene's cameras, the agent and wrist
    views first, then the free cameras "free" and "free:violation". Compiles (or loads) the
    scene, opens no GL context; errors as for `scene_model`."""
    m = scene_model(record)
    names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, i) or str(i) for i in range(m.ncam)]
    first = [c for c in (*AGENT_VIEWS, *WRIST_VIEWS) if c in names]
    return (*first, *(c for c in names if c not in first), FREE, FREE_VIOLATION)


def _compile(resolved: str, base: Path, origin: str, *, flat_textures: bool = False,
             textures_px: int | None = None) -> mujoco.MjModel:
    try:
        spec = mujoco.MjSpec.from_string(resolved)
    except (ValueError, mujoco.FatalError) as exc:
        raise RenderError(f"cannot load the MJCF ({origin}): {exc}") from None
    spec.modelfiledir = str(base) + os.sep
    if flat_textures:  # decoding the images is most of a LIBERO scene's compile
        for t in spec.textures:
            t.file, t.content_type, t.cubefiles = "", "", [""] * 6
            t.builtin = mujoco.mjtBuiltin.mjBUILTIN_FLAT
            t.width = t.height = 1
            t.gridsize, t.hflip, t.vflip = [1, 1], False, False
    elif textures_px:
        _shrink_textures_in(spec, base, textures_px)
    try:
        return spec.compile()
    except (ValueError, mujoco.FatalError) as exc:
        raise RenderError(f"cannot load the MJCF ({origin}, assets looked up from {base}): {exc}") from None
