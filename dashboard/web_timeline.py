"""The Episode detail page's timeline with the replay drawn in the browser (WebGL).

The server converts the episode's MuJoCo scene once (`replay.render.web_scene`, cached on
disk per scene and shared by its episodes) and writes the episode's poses; both are files in
the player component's folder (`web/`), which Streamlit serves with the component. The
player fetches them once and draws every step itself: stepping, seeking and playing make no
request. A scene not converted yet does not hold the player back: it is sent once the poses are
made (from the model the conversion compiles first), and its request for the scene is answered
when the conversion has written it (`web_files.CachedWebFiles`, the middleware of
dashboard/server.py; a page served without it waits for its scene first). A browser without
WebGL says so (the player's event "nowebgl"); the session then gets the server's MuJoCo frames
(`dashboard.detail_timeline.timeline_panel`) from then on.
"""

from __future__ import annotations

import streamlit as st

from dashboard import cached
from dashboard import common as C
from dashboard.web_files import RENDERER_KEY, requests_wait_for_scenes, uses_frames, web_files

NOWEBGL = "nowebgl"
DRAWN = "drawn"  # the player's first picture of an episode is drawn: the page's tables may follow
DRAWN_KEY = "_web_drawn"
SCENE_FAILED_KEY = "_web_scene_failed"  # the episode whose web scene could not be made: its frames are shown


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


def draws_in_browser(c: C.Ctx, i: int) -> bool:
    """Whether the player draws episode `i` in the browser (else the server's frames): replays
    work here, this browser has WebGL, and the episode's web scene has not failed to convert."""
    from dashboard import detail_timeline as DT

    return (cached.replay_status()[0] and not uses_frames()
            and st.session_state.get(SCENE_FAILED_KEY) != DT.episode_tag(c, i))


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

    tag = DT.episode_tag(c, i)
    if not draws_in_browser(c, i):
        return DT.timeline_panel(c, i, step=step, vstep=vstep, n_steps=n_steps, raw=raw, traces=traces,
                                 on_page=on_page)
    try:
        rec = cached.replay_record(c.data, i)
        web = web_files(rec, cached.violations(c.data, c.key, i, c.items), wait=not requests_wait_for_scenes())
    except C.D.StoreProblem as exc:  # a refused path: an error, as on every page
        st.error(str(exc), icon=":material/block:")
        return False
    except Exception:  # noqa: BLE001 - no replay state, a scene that cannot load, an episode too long:
        # the frame player says why (or shows the frames MuJoCo can render)
        return DT.timeline_panel(c, i, step=step, vstep=vstep, n_steps=n_steps, raw=raw, traces=traces,
                                 on_page=on_page)
    dt = float(c.v.frame["dt"].iat[i])
    spec = DT.episode_chart(c, i, traces, vstep, "raw" if raw else "margin")
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
    _scene_converted(web["pending"], tag)
    return wait


def _scene_converted(pending, tag: str) -> None:
    """Waits for the web scene's conversion the player was sent beside (its request for the
    scene waits for it too); if it failed, the page is drawn again with the server's frames for
    this episode, which say why."""
    if pending is None:
        return
    try:
        pending.result()
    except Exception:  # noqa: BLE001 - the frame player shows the error MuJoCo or the files give
        st.session_state[SCENE_FAILED_KEY] = tag
        st.rerun()


def open_neighbours(c, eids, mode: str) -> None:
    """Readies the episodes `eids` (the shown episode's neighbours, which n / p and ‹ › open)
    ahead of the user, while the server is quiet (`dashboard.ahead`): their poses where their
    web scene is converted (`web_files.poses_if_converted`) and their robustness traces and
    chart in `mode` ("margin" or "raw", the page's), so that opening one finds them made
    (docs/benchmarks.md, "another episode"). Their web scenes, where not on disk, are converted
    ahead in a process at the lowest CPU priority (`convert_ahead.listed`), which runs on cores
    the player leaves idle, and their poses made once it has ended. Once per list of neighbours
    and session; nobody waits for it."""
    from dashboard import ahead, convert_ahead

    eids = tuple(e for e in eids if e is not None)
    rows = [i for i in map(c.data.index_of, eids) if i is not None and not c.data.missing_trajectory[i]]
    # looks once per server at each list (again if another list was converting)
    convert_ahead.listed(c, eids, then=lambda: [_poses_ahead(c, i) for i in rows])
    if not eids or st.session_state.get("_neighbours_opened") == (c.key, c.items, eids, mode):
        return
    st.session_state["_neighbours_opened"] = (c.key, c.items, eids, mode)
    for i in rows:
        if not uses_frames() and cached.replay_status()[0]:
            ahead.submit(_poses_ahead, c, i)
        ahead.submit(_chart, c, i, mode)


def _poses_ahead(c, i: int) -> None:
    from dashboard.web_files import poses_if_converted

    rec = cached.replay_record(c.data, i)
    if rec.replay is not None:
        poses_if_converted(rec, cached.violations(c.data, c.key, i, c.items))


def _chart(c, i: int, mode: str) -> None:
    """Episode `i`'s robustness traces and its player's chart, as its page asks for them."""
    from dashboard.detail_timeline import episode_chart

    tr = cached.traces(c.data, c.key, i, c.items)
    if not tr.empty:
        episode_chart(c, i, tr, C.D.violating_frame(c.data, c.v, i), mode)
