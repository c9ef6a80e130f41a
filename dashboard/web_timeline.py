"""The Episode detail page's timeline with the replay drawn in the browser (WebGL).

The server converts the episode's MuJoCo scene once (`replay.render.web_scene`, cached on
disk per scene and shared by its episodes) and writes the episode's poses; both are files in
the player component's folder (`web/`), which Streamlit serves with the component. The
player fetches them once and draws every step itself: stepping, seeking and playing make no
request. A browser without WebGL says so (the player's event "nowebgl"); the session then
gets the server's MuJoCo frames (`dashboard.detail_timeline.timeline_panel`) from then on.
"""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import streamlit as st

from dashboard import cached
from dashboard import common as C

RENDERER_KEY = "_player_renderer"  # "frames" once the browser said it has no WebGL
NOWEBGL = "nowebgl"
DRAWN = "drawn"  # the player's first picture of an episode is drawn: the page's tables may follow
DRAWN_KEY = "_web_drawn"
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


def heard_no_webgl(value: dict | None) -> bool:
    """True for the player's value saying the browser has no WebGL; the session uses frames from now on."""
    if isinstance(value, dict) and value.get("event") == NOWEBGL:
        st.session_state[RENDERER_KEY] = "frames"
        return True
    return False


def heard_drawn(value: dict | None) -> bool:
    """True for the player's value saying its first picture of the episode is drawn (the page's
    tables then follow, `timeline_panel`); no step moves."""
    if isinstance(value, dict) and value.get("event") == DRAWN:
        st.session_state[DRAWN_KEY] = str(value.get("episode", "")).rsplit("::mode=", 1)[0]
        return True
    return False


def timeline_panel(c: C.Ctx, i: int, *, step: int, vstep: int | None, n_steps: int, raw: bool, traces,
                   on_page: bool = False) -> bool:
    """The robustness chart and the replay player, drawn in the browser; the server-frame
    player (`detail_timeline.timeline_panel`) where WebGL is missing or the episode has no
    web scene. True when the page's tables wait for the player's first picture: on the run
    that first shows an episode where they are not on the page yet (a page load, a switch from
    another page), as the frame player's do (`detail_timeline.tables_wait_for_frame`); the
    player's value "drawn" (or "nowebgl") reruns the page, which draws them."""
    from dashboard import detail_timeline as DT
    from dashboard import player

    ok, _ = cached.replay_status()
    if not ok or uses_frames():
        return DT.timeline_panel(c, i, step=step, vstep=vstep, n_steps=n_steps, raw=raw, traces=traces,
                                 on_page=on_page)
    try:
        rec = cached.replay_record(c.data, i)
        web = web_files(rec, cached.violations(c.data, c.key, i, c.items))
    except C.D.StoreProblem as exc:  # a refused path: an error, as on every page
        st.error(str(exc), icon=":material/block:")
        return False
    except Exception:  # noqa: BLE001 - no replay state, a scene that cannot load, an episode too long:
        # the frame player says why (or shows the frames MuJoCo can render)
        return DT.timeline_panel(c, i, step=step, vstep=vstep, n_steps=n_steps, raw=raw, traces=traces,
                                 on_page=on_page)
    dt = float(c.v.frame["dt"].iat[i])
    spec = DT.timeline_chart_spec(traces, vstep, "raw" if raw else "margin", tuple(c.data.colors().items()), dt)
    tag = DT.episode_tag(c, i)
    st.session_state["_timeline_tag"] = tag
    seen = st.session_state.get("_timeline_seen")
    answers = seen[1] if isinstance(seen, (tuple, list)) and len(seen) == 2 else None
    player.timeline(episode=f"{tag}{DT.MODE_SEP}{'raw' if raw else 'margin'}", spec=spec, n_steps=n_steps, dt=dt,
                    step=step, violating_step=vstep, frames={}, total=n_steps, violated=player.violated_by_step(traces),
                    key=DT.TIMELINE_KEY, answers=answers, web={"scene": web["scene"], "poses": web["poses"]})
    wait = not on_page and st.session_state.get(DRAWN_KEY) != tag
    st.caption("Drawn in your browser with WebGL from the MuJoCo scene and the recorded poses. Space plays and "
               "pauses, ←/→ step (shift: 10 steps), v jumps to the violating step, n / p open the next / previous "
               "episode of the list above, a click on the chart seeks; the view menu switches between the scene "
               "camera, the wrist camera and a free orbit camera (drag to turn, wheel to zoom) that starts on the "
               "violation.")
    return wait
