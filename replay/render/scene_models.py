"""A record's compiled MuJoCo scene, compiled once and shared: per MJCF in memory (a few
scenes) and on disk (replay/render/scene_cache.py), with a texture-shrunk preview variant for
the dashboard's first frames, a texture-free variant for the browser's poses, and the cameras
the scene offers.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import mujoco
import numpy as np

from replay.render.render_assets import MODEL_VIS_LOCK, shrunk_size
from replay.render.preview_scene import compile_preview, preview_text
from replay.render.scene_cache import build_later, compile_cached, load_cached, scene_digest, store_unless_cached
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
_WEB_COMPILES: dict = {}  # scene key -> its web model on its way (`_WebCompile`), under _POSE_LOCK


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
    decoded by Pillow and shrunk as an upload to `max_px` shrinks it
    (`render_assets.texture_as_uploaded`: the same texels), on two threads while MuJoCo
    compiles the rest (`_compile_shrunk`). Not stored; errors as for `scene_model`. A model
    compiled here is also kept as the record's pose model (`pose_model`): the same bodies,
    geoms, meshes and cameras, so the same poses and marks, and a second compile of the
    scene's meshes beside this one is spared."""
    key = scene_key(record)
    model = _MODEL_CACHE.get(key)
    if model is None:
        resolved, base, origin = _resolved_scene(key)
        model = load_cached(resolved, str(base) + os.sep)
    if model is not None:
        _settle_announced(key, model)
        return model
    with _POSE_LOCK:
        entry = _WEB_COMPILES.get(key)
        if entry is None or not entry.started:  # none, or one announced (`web_model_ahead`): this call compiles it
            entry = _WEB_COMPILES.setdefault(key, _WebCompile())
            entry.started, mine = True, True
        else:
            mine = False
    if not mine:
        return entry.future.result()
    try:
        model = _compile_shrunk(resolved, base, origin, int(max_px))
    except BaseException as exc:
        with _POSE_LOCK:
            _WEB_COMPILES.pop(key, None)
        entry.future.set_exception(exc)
        raise
    with _POSE_LOCK:
        _WEB_COMPILES.pop(key, None)
        _keep_pose_model(key, model)
    entry.future.set_result(model)
    return model


class _WebCompile:
    """A web model on its way: `future` gives it (None when it was not compiled after all),
    `started` once a `web_model` call compiles it."""

    def __init__(self):
        self.future, self.started = Future(), False


def web_model_ahead(record: EpisodeRecord) -> Callable[[], None]:
    """Announces a `web_model(record)` queued on another thread: a `pose_model(record)` asked
    for meanwhile waits for it instead of compiling the scene a second time beside it. Returns
    the call that withdraws the announcement, for a conversion that ends without that call (its
    file found on disk, an error before it); it does nothing once the compile has begun."""
    key = scene_key(record)
    with _POSE_LOCK:
        entry = _WEB_COMPILES.setdefault(key, _WebCompile())

    return functools.partial(_settle_announced, key, None, entry)


def _settle_announced(key: tuple, model: mujoco.MjModel | None, entry: _WebCompile | None = None) -> None:
    """Ends an announced web model that is not compiled after all: whoever waits for it gets
    `model` (one `web_model` found in memory or on disk; None: withdrawn). Only `entry`, when
    given, and never a compile under way."""
    with _POSE_LOCK:
        announced = _WEB_COMPILES.get(key)
        if announced is None or announced.started or (entry is not None and announced is not entry):
            return
        del _WEB_COMPILES[key]
    announced.future.set_result(model)


def _decoded_shrunk(path: str, max_px: int) -> tuple[int, int, bytes]:
    """(width, height, RGB texels) of the PNG at `path` as MuJoCo decodes it (rows top first,
    three channels) and `texture_as_uploaded` shrinks it; decoded once per file and size
    (replay/render/texture_cache.py)."""
    from replay.render.texture_cache import shrunk

    return shrunk(path, max_px, _decode_shrink)


def _decode_shrink(path: str, max_px: int) -> tuple[int, int, bytes]:
    """What `shrunk_texels` makes of the decoded image (a Pillow box filter), without its
    copies: an RGB image is shrunk as decoded (converting or viewing a 4096-px image as an
    array took 0.13 s, a third of its decoding)."""
    from PIL import Image

    with Image.open(path) as im:
        rgb = im if im.mode == "RGB" else im.convert("RGB")
        size = shrunk_size(*rgb.size, max_px)
        if size != rgb.size:
            rgb = rgb.resize(size, Image.Resampling.BOX)
        return *rgb.size, rgb.tobytes()


def _plain_pngs(spec: mujoco.MjSpec, base: Path) -> list[tuple[int, str]]:
    """(index, path) of `spec`'s plain 2-D PNG textures (a file, three channels, no flip), the
    ones Pillow may decode for MuJoCo; none when a file is missing (MuJoCo then says which)."""
    plain = [(k, t.file if os.path.isabs(t.file) else str(base / t.file)) for k, t in enumerate(spec.textures)
             if t.file.lower().endswith(".png") and not t.content_type
             and int(t.type) == int(mujoco.mjtTexture.mjTEXTURE_2D) and t.nchannel == 3 and not (t.hflip or t.vflip)
             and int(t.builtin) == int(mujoco.mjtBuiltin.mjBUILTIN_NONE) and t.name]
    return plain if all(os.path.isfile(p) for _, p in plain) else []


def _compile_shrunk(resolved: str, base: Path, origin: str, max_px: int) -> mujoco.MjModel:
    """The scene compiled with its plain PNG textures (`_plain_pngs`) shrunk to `max_px`
    (`_decoded_shrunk`). They are decoded on two threads (Pillow decodes without the GIL) while
    MuJoCo compiles with blank texels of their shrunk size (read from the files' headers), then
    written into the model: a LIBERO scene's 0.7 s of decoding and 0.8 s of compiling overlap.
    The rest stays MuJoCo's to load."""
    from PIL import Image

    spec = _parse(resolved, base, origin)
    plain = _plain_pngs(spec, base)
    sizes = []
    for k, path in plain:
        try:
            with Image.open(path) as im:
                sizes.append(shrunk_size(*im.size, max_px))
        except (OSError, ValueError) as exc:  # not an image Pillow reads (UnidentifiedImageError is an OSError)
            raise RenderError(f"cannot read the texture {path} ({origin}): {exc}") from None
        t = spec.textures[k]
        t.file = ""
        t.width, t.height = sizes[-1]
        t.data = bytes(3 * sizes[-1][0] * sizes[-1][1])
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="safevla-texture") as pool:
        decoded = {path: pool.submit(_decoded_shrunk, path, max_px) for path in dict.fromkeys(p for _, p in plain)}
        try:
            model = _compiled(spec, base, origin)
        except BaseException:
            for f in decoded.values():
                f.cancel()
            raise
        for (k, path), size in zip(plain, sizes):
            try:
                w, h, texels = decoded[path].result()
            except (OSError, ValueError) as exc:  # a damaged file whose header read
                raise RenderError(f"cannot decode the texture {path} ({origin}): {exc}") from None
            if (w, h) != size:
                raise RenderError(f"texture {path} decoded as {w}x{h}, its header says {size[0]}x{size[1]} ({origin})")
            model.tex_data[model.tex_adr[k]:model.tex_adr[k] + len(texels)] = np.frombuffer(texels, np.uint8)
    return model


def load_assets(record: EpisodeRecord, max_px: int) -> mujoco.MjModel | None:
    """Loads what a conversion of the record's scene to `max_px` textures reads from files and
    returns the model it compiled, kept nowhere: MuJoCo keeps the meshes in its asset cache
    (`mujoco.mj_getCache`), for any later compile that names the same files, and the texture
    cache the shrunk PNGs. Every LIBERO scene has the robot's meshes and most the same few large
    textures: a scene's first web model in a process took 1.9-2.3 s against 0.9-1.5 s after
    another scene's assets were loaded (2026-11-28, a loaded machine). None, loading nothing,
    when a model of the scene is in memory: this process compiled it."""
    key = scene_key(record)
    if key in _MODEL_CACHE or pose_model_in_memory(record):
        return None
    resolved, base, origin = _resolved_scene(key)
    return _compile_shrunk(resolved, base, origin, int(max_px))


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
        coming = _WEB_COMPILES.get(key)
    if coming is not None:  # a web scene's model on its way: the same poses, no second compile
        with contextlib.suppress(Exception):  # that compile failed: this one says why
            model = coming.future.result()
        if model is not None:
            return model
    model = compile_cached(*_pose_cache_entry(key))
    with _POSE_LOCK:
        _keep_pose_model(key, model)
    return model


def _pose_cache_entry(key: tuple) -> tuple[str, str, Callable[[], mujoco.MjModel]]:
    """The scene text and model folder under which scene `key`'s pose model is cached on disk,
    and its texture-free compile."""
    resolved, base, origin = _resolved_scene(key)
    return (f"{resolved}\n<!-- safevla textures flat -->", str(base) + os.sep,
            lambda: _compile(resolved, base, origin, flat_textures=True))


def pose_model_to_disk(record: EpisodeRecord, *, kept_only: bool = False) -> None:
    """Puts the record's pose model in the disk cache unless it is there, for a process that
    prepares scenes ahead of another (dashboard/convert_ahead.py): that one then loads it (a
    LIBERO scene's in 0.21 s) instead of compiling it (1.6 s). The model stored is the one kept
    in memory as the pose model, after a web scene's conversion its web model (the same
    bodies, joints, geoms and meshes, its textures shrunk: the same poses and marks,
    tests/test_web_poses.py), else the texture-free compile. Written before it returns, even
    where saves are deferred; one already there is not loaded; keeps nothing in memory. With
    `kept_only`, nothing unless the pose model is in memory."""
    key = scene_key(record)
    with _POSE_LOCK:
        kept = _POSE_CACHE.get(key)
    if kept is None and kept_only:
        return
    text, folder, compile_flat = _pose_cache_entry(key)
    store_unless_cached(text, folder, compile_flat if kept is None else (lambda: kept))


def _keep_pose_model(key: tuple, model: mujoco.MjModel) -> None:
    """Keeps `model` as the pose model of scene `key`; with `_POSE_LOCK` held."""
    _POSE_CACHE[key] = model
    _POSE_CACHE.move_to_end(key)
    while len(_POSE_CACHE) > _POSE_CACHE_SIZE:
        _POSE_CACHE.popitem(last=False)


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


def _parse(resolved: str, base: Path, origin: str) -> mujoco.MjSpec:
    try:
        spec = mujoco.MjSpec.from_string(resolved)
    except (ValueError, mujoco.FatalError) as exc:
        raise RenderError(f"cannot load the MJCF ({origin}): {exc}") from None
    spec.modelfiledir = str(base) + os.sep
    return spec


def _compiled(spec: mujoco.MjSpec, base: Path, origin: str) -> mujoco.MjModel:
    try:
        return spec.compile()
    except (ValueError, mujoco.FatalError) as exc:
        raise RenderError(f"cannot load the MJCF ({origin}, assets looked up from {base}): {exc}") from None


def _compile(resolved: str, base: Path, origin: str, *, flat_textures: bool = False) -> mujoco.MjModel:
    spec = _parse(resolved, base, origin)
    if flat_textures:  # decoding the images is most of a LIBERO scene's compile
        for t in spec.textures:
            t.file, t.content_type, t.cubefiles = "", "", [""] * 6
            t.builtin = mujoco.mjtBuiltin.mjBUILTIN_FLAT
            t.width = t.height = 1
            t.gridsize, t.hflip, t.vflip = [1, 1], False, False
    return _compiled(spec, base, origin)
