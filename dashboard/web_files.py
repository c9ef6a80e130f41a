"""The files the browser's replay draws: a record's web scene and poses, converted and cached
in the player component's folder, which Streamlit serves with the component.

Below the pages and the caches (`dashboard.cached` queues conversions ahead of a page,
`dashboard.web_timeline` draws the player): it imports neither.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import streamlit as st

RENDERER_KEY = "_player_renderer"  # "frames" once the browser said it has no WebGL
_CONVERT_LOCK = threading.Lock()  # one conversion at a time: each holds a scene's model (200 MB for LIBERO)


def web_dir() -> Path:
    """Where the web scenes and poses live: inside the component's folder, which Streamlit serves."""
    from dashboard import player

    return player.component_dir() / "web"


def _episode_name(scene: str, record, violations) -> str:
    src = Path(record.source) if record.source else None
    stamp = src.stat().st_mtime_ns if src is not None and src.is_file() else None
    marks = [(v.family, v.step, v.value, v.threshold, v.unit, v.op, v.bodies, v.force_sampling) for v in violations]
    what = repr((scene, record.source, stamp, record.episode_id, record.n_steps, marks))
    return "ep-" + hashlib.sha256(what.encode()).hexdigest()[:24]


def web_files(record, violations, folder: Path | None = None) -> dict:
    """{"scene": url, "poses": url, "converted": bool} of the record's web scene and poses,
    relative to the component; made (and cached) if need be. `converted`: the scene was
    converted by this call. The web scene is shared by the scene files that differ only in
    where their bodies start (a LIBERO task's initial states): the poses place every body.
    Errors as for `replay.render.scene_models.scene_model`."""
    from replay.render import web_scene as W
    from replay.render.scene_models import scene_digest_of, scene_model_once

    from replay.render.scene_models import scene_key

    folder = folder or web_dir()
    scene = f"scene-{scene_digest_of(record, placement=False)[:24]}-f{W.FORMAT}"
    episode = _episode_name(scene, record, violations)
    key = scene_key(record)
    loaded = [False]

    def the_model():
        if _LAST_MODEL.get("key") != key:
            _LAST_MODEL.clear()  # the one model kept goes before the next one loads
            _give_back_memory()
            _LAST_MODEL.update(key=key, model=scene_model_once(record))
            loaded[0] = True
        return _LAST_MODEL["model"]

    with _CONVERT_LOCK:
        _, converted = W.cached_file(folder, scene, lambda: W.scene_blob(the_model()))
        W.cached_file(folder, episode, lambda: W.episode_blob(the_model(), record, violations))
        if loaded[0]:
            _give_back_memory()  # what the conversion freed; the model itself stays for the scene's next episode
    return {"scene": f"web/{scene}.bin", "poses": f"web/{episode}.bin", "converted": converted}


# The last scene file's compiled model, for the poses of its next episode: loading a LIBERO
# scene's model took 2.7 s of a second episode's 2.75 s at load 11 (2026-11-27); one is kept
# (about 200 MB), the server's only replay memory besides what a conversion uses for a moment.
_LAST_MODEL: dict = {}


def _give_back_memory() -> None:
    """Returns the heap a conversion freed to the system (glibc keeps it otherwise): a LIBERO
    scene's model and its conversion's arrays are 0.6 GB at their peak, of which the server
    kept 0.7 GB resident after four conversions, 0.43 GB after this (2026-11-27)."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to give back this way
        pass


def prepare_scene(record, folder: Path | None = None) -> bool:
    """Converts the record's web scene ahead of its page (a link, a row click); True if it
    had to. Errors are left to the page, which says what is wrong."""
    from replay.render import web_scene as W
    from replay.render.scene_models import scene_digest_of, scene_model_once

    try:
        scene = f"scene-{scene_digest_of(record, placement=False)[:24]}-f{W.FORMAT}"
        with _CONVERT_LOCK:
            made = W.cached_file(folder or web_dir(), scene, lambda: W.scene_blob(scene_model_once(record)))[1]
            if made:
                _give_back_memory()
            return made
    except Exception:  # noqa: BLE001 - the page shows the error when it opens the episode
        return False


def uses_frames() -> bool:
    """True once this session's browser said it has no WebGL: the server's frames then."""
    return st.session_state.get(RENDERER_KEY) == "frames"
