"""The files the browser's replay draws: a record's web scene and poses, converted and cached
in the player component's folder, which Streamlit serves with the component.

Below the pages and the caches (`dashboard.cached` queues conversions ahead of a page,
`dashboard.web_timeline` draws the player): it imports neither.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import streamlit as st

RENDERER_KEY = "_player_renderer"  # "frames" once the browser said it has no WebGL
# Where Streamlit serves the files (the component "safevla_timeline" of dashboard/player.py)
PLAYER_PATH = "/component/dashboard.player.safevla_timeline/"
WEB_PATH = f"{PLAYER_PATH}web/"
FOREVER = b"public, max-age=31536000, immutable"
REVALIDATE = b"no-cache"  # the player's code: kept by the browser, asked for again with its ETag
CONVERSION_POLL_S = 0.01  # how often a request for a scene being converted looks again
# one conversion at a time (each holds a scene's model), on a thread of its own, so a page can
# send its player while the scene it draws is converted
_CONVERTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="safevla-web-scene")
_UNDERWAY: dict[str, Future] = {}  # a web scene file's path -> its conversion, queued or running
_UNDERWAY_LOCK = threading.Lock()
_SERVED_HERE = threading.Event()  # set once a CachedWebFiles serves this process's requests
_POSES_LOCK = threading.Lock()  # one episode's poses at a time: a page waits for those a worker is making


def web_dir() -> Path:
    """Where the web scenes and poses live: inside the component's folder, which Streamlit serves."""
    return _web_dir_under(os.environ.get("XDG_CACHE_HOME", ""))


@functools.lru_cache(maxsize=4)
def _web_dir_under(cache_home: str) -> Path:
    """Made once per process and cache folder: `component_dir` writes the component's files
    again each time (a browser reading player.js meanwhile could get it half written)."""
    from dashboard import player

    return player.component_dir(vega=False) / "web"


def scene_name(record) -> str:
    """The web scene's file name: shared by the scene files that differ only in where their
    bodies start (a LIBERO task's initial states), since the poses place every body."""
    from replay.render import web_scene as W
    from replay.render.scene_models import scene_digest_of

    return f"scene-{scene_digest_of(record, placement=False)[:24]}-f{W.FORMAT}"


def _episode_name(scene: str, record, violations) -> str:
    src = Path(record.source) if record.source else None
    stamp = src.stat().st_mtime_ns if src is not None and src.is_file() else None
    marks = [(v.family, v.step, v.value, v.threshold, v.unit, v.op, v.bodies, v.force_sampling) for v in violations]
    what = repr((scene, record.source, stamp, record.episode_id, record.n_steps, marks))
    return "ep-" + hashlib.sha256(what.encode()).hexdigest()[:24]


def web_files(record, violations, folder: Path | None = None, *, wait: bool = True) -> dict:
    """{"scene": url, "poses": url, "converted": bool, "pending": Future | None} of the record's
    web scene and poses, relative to the component; made (and cached) if need be. `converted`:
    the scene was converted for this call. Without `wait`, a scene not on disk yet is left to
    its conversion (`pending`, a Future of `converted`): the poses are made from the model it
    compiles (`scene_models.web_model`) and the player can be sent at once, its request for the
    scene answered when the file is written (`CachedWebFiles`). Errors as for
    `replay.render.scene_models.scene_model`."""
    folder = folder or web_dir()
    scene = scene_name(record)
    pending, converted = _conversion(record, folder, scene), False
    if pending is not None and wait:
        pending, converted = None, pending.result()
    episode = _poses(record, violations, folder, scene)
    return {"scene": f"web/{scene}.bin", "poses": f"web/{episode}.bin", "converted": converted, "pending": pending}


# MuJoCo keeps every compile's decoded assets for the next compile of the same files, up to
# 500 MB by default: a LIBERO scene's textures and meshes are 230 MB, its meshes 107 MB. Capped
# here, the cache holds about the last scene's meshes, which is what the poses of another of its
# initial states compile again (0.3 s instead of 1.1-1.8 s), not every scene's textures.
ASSET_CACHE_BYTES = 160 * 2**20


def _cap_asset_cache() -> None:
    import mujoco

    cache = mujoco.mj_getCache()
    if mujoco.mj_getCacheCapacity(cache) > ASSET_CACHE_BYTES:
        mujoco.mj_setCacheCapacity(cache, ASSET_CACHE_BYTES)


def _convert(record, folder: Path, scene: str) -> bool:
    """Makes the web scene `scene` unless it is on disk (`_conversion`), waiting for it; whether
    it had to."""
    pending = _conversion(record, folder, scene)
    return False if pending is None else pending.result()


def _conversion(record, folder: Path, scene: str) -> Future | None:
    """None when the web scene `scene` is on disk (marked recently used); else its conversion on
    the converter thread, the one under way or one queued now (a Future of whether it wrote
    the file: not when another process had meanwhile)."""
    path = folder / f"{scene}.bin"
    try:
        os.utime(path)
        return None
    except OSError:
        pass
    from replay.render.scene_models import web_model_ahead

    with _UNDERWAY_LOCK:
        pending = _UNDERWAY.get(str(path))
        queued = pending is None
        if queued:  # announced at once: the page's poses, asked for next, wait for its model
            pending = _UNDERWAY[str(path)] = _CONVERTER.submit(_convert_now, record, folder, scene,
                                                               web_model_ahead(record))
    if queued:
        pending.add_done_callback(lambda done: _forget(str(path), done))
    return pending


def _forget(path: str, done: Future) -> None:
    with _UNDERWAY_LOCK:
        if _UNDERWAY.get(path) is done:
            del _UNDERWAY[path]


def converting(path: Path) -> bool:
    """Whether the web scene file `path` is being converted (or queued for it)."""
    with _UNDERWAY_LOCK:
        return str(path) in _UNDERWAY


def _convert_now(record, folder: Path, scene: str, withdraw) -> bool:
    """Makes the web scene `scene` (on the converter thread). The scene's model with its
    textures is needed only here, once per scene (`scene_models.web_model`): compiled, it is
    kept as the record's pose model, for its poses next, and written to the compiled-scene
    cache only once the server is quiet (`_pose_model_to_disk`: a LIBERO scene's 116 MB in
    0.15-0.36 s, kept off a first page's way).
    `withdraw`: takes back the model's announcement if it was not compiled after all."""
    from replay.render import web_scene as W
    from replay.render.scene_models import web_model

    _cap_asset_cache()
    try:
        made = W.cached_file(folder, scene, lambda: W.scene_blob(web_model(record, W.WEB_TEXTURE_PX)))[1]
    finally:
        withdraw()
    if made:
        _give_back_memory()
        from dashboard import ahead

        ahead.submit(_pose_model_to_disk, record)
    return made


def _pose_model_to_disk(record) -> None:
    """The converted scene's model, kept as its pose model, written to the compiled-scene cache
    once the server is quiet (`dashboard.ahead`), if still kept: a restarted server then loads it
    for another episode's poses (0.21 s for a LIBERO scene) instead of compiling one."""
    from replay.render.scene_models import pose_model_to_disk

    pose_model_to_disk(record, kept_only=True)


def _poses(record, violations, folder: Path, scene: str, *, wait: bool = True) -> str:
    """The name of the episode's poses file, made unless on disk, from the scene's texture-free
    model (`scene_models.pose_model`: the same poses and marks as the full model's). Without
    `wait`, made beside whatever a page is making (work ahead of the user: a page never waits
    behind it)."""
    from replay.render import web_scene as W
    from replay.render.scene_models import pose_model, pose_model_in_memory

    episode = _episode_name(scene, record, violations)
    _cap_asset_cache()
    with _POSES_LOCK if wait else contextlib.nullcontext():
        # a scene being converted brings the pose model and gives its memory back itself: a
        # collection here would hold the GIL (0.05 s) while the conversion ends, on a first picture's way
        loads = not pose_model_in_memory(record) and not converting(folder / f"{scene}.bin")
        made = W.cached_file(folder, episode, lambda: W.episode_blob(pose_model(record), record, violations))[1]
        if made and loads:
            _give_back_memory()
    return episode


def _give_back_memory() -> None:
    """Returns the heap a conversion freed to the system (glibc keeps it otherwise): a LIBERO
    scene's model and its conversion's arrays are 0.6 GB at their peak, of which the server
    kept 0.7 GB resident after four conversions, 0.43 GB after this (2026-11-27). What they
    free goes by reference counts, not the cycle collector: a full `gc.collect()` here held the
    GIL 0.1-0.5 s, the page's run and the frontend's files waiting on it, and gave back nothing
    more (docs/benchmarks.md, 2026-12-01). `malloc_trim` lets the GIL go (ctypes)."""
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        pass


def prepare_scene(record, folder: Path | None = None) -> bool:
    """Converts the record's web scene ahead of its page (a link, a row click); True if it
    had to. Errors are left to the page, which says what is wrong."""
    try:
        return _convert(record, folder or web_dir(), scene_name(record))
    except Exception:  # noqa: BLE001 - the page shows the error when it opens the episode
        return False


def load_scene_assets(record, folder: Path | None = None) -> None:
    """Loads the meshes and textures a conversion of the record's scene reads
    (`scene_models.load_assets`) and simplifies its meshes (`web_mesh.remembered`), for the
    first conversion in this process to find those its scene shares: the server's start has it
    done ahead with a scene of its store (`link_open.warm_server`). That scene's web scene is
    written if not on disk. Memory as after a conversion: MuJoCo's asset cache capped, the
    model's heap given back."""
    from replay.render import web_scene as W
    from replay.render.scene_models import load_assets

    _cap_asset_cache()
    model = load_assets(record, W.WEB_TEXTURE_PX)
    if model is None:  # compiled in this process before: its assets are loaded
        return
    blob = W.scene_blob(model)  # made whether or not the file is on disk: its meshes are what is kept
    del model
    W.cached_file(folder or web_dir(), scene_name(record), lambda: blob)
    _give_back_memory()


def prepare_poses(record, violations, folder: Path | None = None) -> bool:
    """Makes the episode's poses ahead of its page (after `prepare_scene`, on the same worker),
    for the violations its page will mark; whether it succeeded. Errors are left to the page."""
    try:
        folder = folder or web_dir()
        _poses(record, violations, folder, scene_name(record))
        return True
    except Exception:  # noqa: BLE001 - the page shows the error when it opens the episode
        return False


def poses_if_converted(record, violations, folder: Path | None = None) -> bool:
    """Makes the episode's poses when its web scene is on disk already, not waiting behind a
    page's poses nor holding a page back (`dashboard.ahead`); whether it made or found them. A
    scene's conversion (2-4 s of both cores for a LIBERO scene) is not done ahead: it would
    slow the browser's drawing of the episode the user watches."""
    folder = folder or web_dir()
    scene = scene_name(record)
    if not (folder / f"{scene}.bin").is_file():
        return False
    _poses(record, violations, folder, scene, wait=False)
    return True


def requests_wait_for_scenes() -> bool:
    """Whether this process serves the web files through `CachedWebFiles` (dashboard/server.py,
    what `safevla dashboard` runs), which holds a request for a scene being converted. Under
    `streamlit run dashboard/app.py` nothing does: a page then waits for its scene before it
    sends the player, whose request would otherwise find no file."""
    return _SERVED_HERE.is_set()


def uses_frames() -> bool:
    """True once this session's browser said it has no WebGL: the server's frames then."""
    return st.session_state.get(RENDERER_KEY) == "frames"


class CachedWebFiles:
    """ASGI middleware (dashboard/server.py): the player's files as a browser should get them.
    Streamlit's component route still serves them all, with its own path checks.

    The web scenes and poses: their names change with their content (`scene_name`,
    `_episode_name`), so they are cached for good (a new tab reads them from the browser's
    cache, 0.15 s earlier for a LIBERO scene), and sent as they are, not gzipped on every
    request (a scene is mostly PNG textures and vertex arrays: 4.6 MB gzipped to 3.7 MB in 0.1 s
    of the server's time). A request for a web scene being converted is answered once it is
    written (a page sends its player while the scene converts, `web_files(wait=False)`), or not
    found if its conversion failed.

    The player's own HTML and JavaScript (three.js, the vega bundle): sent as they are too, as
    Streamlit sends its own frontend's bundles (gzip at level 9 on every request was 0.14 s of
    the server's CPU per page, 3 MB to 0.7 MB, while the browser loads the page on the same
    cores), with an ETag of their content: the route gives them no validator, so a browser
    fetched them whole for every page; now it asks, and gets "not modified" (`_revalidated`)."""

    def __init__(self, app):
        self.app = app
        _SERVED_HERE.set()

    async def __call__(self, scope, receive, send):
        import asyncio

        path = scope.get("path", "") if scope["type"] == "http" else ""
        if PLAYER_PATH in path and WEB_PATH not in path and scope.get("method") == "GET":
            await _revalidated(self.app, scope, receive, send)
            return
        if WEB_PATH not in path or not path.endswith(".bin"):
            await self.app(scope, receive, send)
            return
        if _UNDERWAY:  # (the page that queued it made web_dir(), so this finds it made)
            converted = web_dir() / path.rsplit("/", 1)[-1]  # only looked up among the conversions under way
            while converting(converted) and not converted.is_file():  # written whole (a rename): served at once
                await asyncio.sleep(CONVERSION_POLL_S)
        scope = {**scope, "headers": without_headers(scope.get("headers", []), b"accept-encoding")}

        async def send_cached(message):
            if message["type"] == "http.response.start" and message.get("status") == 200:
                message = {**message, "headers": [*without_headers(message.get("headers", []), b"cache-control"),
                                                  (b"cache-control", FOREVER)]}
            await send(message)

        await self.app(scope, receive, send_cached)


async def _revalidated(app, scope, receive, send) -> None:
    """`app`'s answer to a request for one of the player's files, not gzipped, with an ETag (a
    digest of its content) and "no-cache"; "304 Not Modified" with no body when the request's
    If-None-Match names that ETag. Any answer but a 200 is passed on as it came."""
    headers = scope.get("headers", [])
    asked = b",".join(v for k, v in headers if k.lower() == b"if-none-match")
    scope = {**scope, "headers": without_headers(headers, b"accept-encoding", b"if-none-match")}
    start: dict = {}
    body: list[bytes] = []

    async def hold(message):
        if message["type"] == "http.response.start":
            start.update(message)
        elif message["type"] == "http.response.body":
            body.append(message.get("body", b""))
            if not message.get("more_body") and start:
                await _answer(send, start, b"".join(body), asked)
        else:
            await send(message)

    await app(scope, receive, hold)


async def _answer(send, start: dict, content: bytes, asked: bytes) -> None:
    if start.get("status") != 200:
        await send(start)
        await send({"type": "http.response.body", "body": content})
        return
    etag = b'"%s"' % hashlib.blake2b(content, digest_size=16).hexdigest().encode()
    kept = without_headers(start.get("headers", []), b"cache-control", b"etag")
    if etag in (t.strip().removeprefix(b"W/") for t in asked.split(b",")):
        await send({"type": "http.response.start", "status": 304,
                    "headers": [(b"etag", etag), (b"cache-control", REVALIDATE)]})
        await send({"type": "http.response.body", "body": b""})
        return
    await send({**start, "headers": [*kept, (b"etag", etag), (b"cache-control", REVALIDATE)]})
    await send({"type": "http.response.body", "body": content})


def without_headers(headers, *names: bytes) -> list:
    """ASGI `headers` ((name, value) pairs) without those named `names` (lower case)."""
    return [(k, v) for k, v in headers if k.lower() not in names]
