"""The Episode detail page's timeline: the robustness chart and the replay player in one
browser component (dashboard/player.py), its frames pre-rendered in the background and sent
by a polling fragment, the view (scene or wrist camera), and the values the player sends
back (seek, pause, key steps, n / p, the ask for a first frame), each handled once.

The page's tables wait for the player's first frame on the run that first shows an episode
(`tables_wait_for_frame`): drawn with the player, they held it back.
"""

from __future__ import annotations

import functools
from pathlib import Path

import streamlit as st

from dashboard import cached
from dashboard import timeline_spec as TS
from dashboard import common as C

TIMELINE_KEY = "timeline"
MODE_SEP = "::mode="  # episode tag + chart mode (the store key holds "|" and "#")
POLL_S = 1.0  # while frames are pre-rendered, the timeline fragment re-sends what is ready this often
FIRST_FRAME_WAIT_S = 2.0  # a fragment rerun with no frame yet sends the first one as soon as it is rendered
PAGE_FIRST_FRAME_WAIT_S = 0.5  # the page's own run waits this long for the first frame before drawing the player
EPISODE_EVENTS = ("previous", "next")  # the player's p / n keys: open that episode of the picker's list
FRAMES_EVENT = "frames"  # the player mounted without a frame and asks for the first one (no step moves)
TABLES_WAIT_POLLS = 2  # the page's tables wait this many timeline polls at most for the first frame to go out


def episode_tag(c: C.Ctx, i: int) -> str:
    """What the timeline's frames and chart belong to: store, episode and thresholds."""
    return f"{c.key}#{i}#{abs(hash(c.items)) % 10**8}"


def unhandled(value, tag: str) -> bool:
    """True for a timeline value ({step, seq, event, episode}) of the episode `tag` that no
    run has handled yet (each value is handled once, by its seq)."""
    return (isinstance(value, dict) and str(value.get("episode", "")).rsplit(MODE_SEP, 1)[0] == tag
            and st.session_state.get("_timeline_seen") != (value.get("episode"), value.get("seq")))


def timeline_value(value, tag: str) -> dict | None:
    """The timeline value if `unhandled`, now marked handled; else None."""
    if not unhandled(value, tag):
        return None
    st.session_state["_timeline_seen"] = (value.get("episode"), value.get("seq"))
    return value


def _asked_for_frames(tag: str) -> bool:
    """True when the player's newest value asks for its first frame (`FRAMES_EVENT`); the
    value is then handled here, in the timeline's own rerun, and never reruns the page."""
    value = st.session_state.get(TIMELINE_KEY)
    if not (unhandled(value, tag) and value.get("event") == FRAMES_EVENT):
        return False
    timeline_value(value, tag)
    return True


def reruns_page(value, tag: str) -> bool:
    """True when a timeline fragment's run must hand the player's value to a page run: an
    unhandled seek, pause, key step or n / p. An ask for the first frame (`FRAMES_EVENT`) that
    arrived while the run was past `_asked_for_frames` is left to the fragment's next run,
    which answers it without a page run."""
    return unhandled(value, tag) and value.get("event") != FRAMES_EVENT


def value_step(value: dict | None) -> int | None:
    """The step a timeline value moves to (a seek, pause or key step), else None."""
    if value is None or value.get("event") in (*EPISODE_EVENTS, FRAMES_EVENT):
        return None
    try:
        return int(value["step"])
    except (KeyError, TypeError, ValueError):
        return None


@st.cache_resource(show_spinner=False, max_entries=4)
def frame_strip(_data, key: str, i: int, items: tuple, vstep: int | None, n_steps: int, camera: str | None = None):
    """The episode's frames from `camera` (None: the scene's agent view), pre-rendered in the
    background, violating step first (a `FrameBatch` of `data:` URLs)."""
    from dashboard import player
    from dashboard.replay_bridge import FRAME_SIZE

    rec = cached.replay_record(_data, i)
    return player.frames(cached.render_service(), f"{key}#{i}", rec, cached.violations(_data, key, i, items),
                         min(n_steps, rec.n_steps), vstep, size=FRAME_SIZE, camera=camera)


def _wrist_camera(text: str) -> str | None:
    """The first wrist camera (`replay.render.replayer.WRIST_VIEWS`) an MJCF text names, else None."""
    from replay.render.replayer import WRIST_VIEWS

    return next((name for name in WRIST_VIEWS if f'name="{name}"' in text), None)


@functools.lru_cache(maxsize=64)
def _wrist_camera_in_file(path: str, mtime_ns: int) -> str | None:
    """`_wrist_camera` of a scene file, read once per (path, mtime): not on every rerun."""
    return _wrist_camera(Path(path).read_text(encoding="utf-8", errors="replace"))


def camera_ui(c: C.Ctx, i: int) -> str | None:
    """The view the player shows: the scene's agent view, or the wrist camera where the
    record's scene names one (LIBERO's robot0_eye_in_hand). None = the agent view. The scene
    text is searched, not compiled, so the page does not wait for the scene; a camera defined
    only in an included file is not offered."""
    from scoring.records.io import resolve_mjcf

    try:
        rec = cached.replay_record(c.data, i)  # confined: the MJCF file lies in the store or its archive
        src = resolve_mjcf(rec)
        wrist = _wrist_camera(src) if rec.replay.mjcf_is_xml else _wrist_camera_in_file(
            src, Path(src).stat().st_mtime_ns)
    except Exception:  # noqa: BLE001 - no replay state or a refused path: the panel says why below
        return None
    if wrist is None:
        return None
    view = st.segmented_control("View", ["scene", "wrist"], default="scene", key="w.camera",
                                help=f"the scene camera, or the robot's wrist camera ({wrist})")
    return wrist if view == "wrist" else None


@st.cache_data(show_spinner=False, max_entries=32)
def timeline_chart_spec(traces, vstep: int | None, mode: str, colors: tuple, dt: float) -> dict:
    """The player's chart as a Vega-Lite dict, without a current step: the player sets its
    `cursor` variable itself. Built once per episode, thresholds and mode, not on every step, and
    as dicts by `TS.robustness_spec`: 11 ms for five panels of a demo episode, where
    Altair's API took 130 ms for its unit charts alone and 0.55 s for the compound chart."""
    return TS.robustness_spec(traces, violating_step=vstep, mode=mode, colors=dict(colors), dt=dt)


def episode_chart(c: C.Ctx, i: int, traces, vstep: int | None, mode: str) -> dict:
    """Episode `i`'s player chart (`timeline_chart_spec`) in `mode` ("margin" or "raw"), with the
    store's spec colours and the episode's step length: what its page asks for, and what is
    made for it ahead (`web_timeline.open_neighbours`)."""
    return timeline_chart_spec(traces, vstep, mode, tuple(c.data.colors().items()), float(c.v.frame["dt"].iat[i]))


def tables_on_page() -> bool:
    """True when the session's last page run was this page's and drew its tables, so they are
    in the browser already (an episode picked in the page, ‹ ›, n / p: the run updates them in
    place); False on a page load or a switch from another page."""
    last = st.session_state.get("_timings") or [(None, 0.0)]
    return last[-1][0] == "detail" and bool(st.session_state.get("_tables_drawn"))


def tables_wait_for_frame(tag: str, polling: bool, on_page: bool = False) -> bool:
    """True on the page run that first shows episode `tag` while its frames are pre-rendered,
    unless the tables are on the page already (`tables_on_page`): its tables (spec results,
    why each spec is active) wait for the player's first frame. Created with the player, they
    held it back (the browser fetches, parses and lays out the data grid while it loads the
    player): page loads' medians fell by 0.1-0.8 s without them (docs/benchmarks.md, 2026-11-26, ad37e16).
    The timeline fragment reruns the page once the frame is out (`TABLES_WAIT_POLLS`); any other
    page run draws them."""
    first = st.session_state.get("_tables_shown") != tag
    st.session_state["_tables_shown"] = tag
    if polling and first and not on_page:
        st.session_state["_tables_wait"] = tag
        return True
    st.session_state.pop("_tables_wait", None)
    return False


def timeline_panel(c: C.Ctx, i: int, *, step: int, vstep: int | None, n_steps: int, raw: bool, traces,
                   on_page: bool = False) -> bool:
    """The robustness chart and the replay player in one browser component (dashboard/player.py).
    True when the page's tables wait for the player's first frame (`tables_wait_for_frame`)."""
    from dashboard import player

    strip, why = None, None
    ok, why = cached.replay_status()
    if ok:
        try:
            strip = frame_strip(c.data, c.key, i, c.items, vstep, n_steps, camera_ui(c, i))
        except C.D.StoreProblem as exc:  # a refused path: an error, as on every page
            st.error(str(exc), icon=":material/block:")
        except Exception as exc:  # noqa: BLE001 - RecordError (no replay state), RenderError
            why = f"No replay for this episode: {exc}"
    if strip is not None:
        strip.resume()  # frames nobody polled for IDLE_STOP_S stopped rendering: the user is back
    if strip is not None and not strip.complete:
        strip.want(step)  # the page's step (deep link, slider, the player's seek) next
    dt = float(c.v.frame["dt"].iat[i])
    spec = episode_chart(c, i, traces, vstep, "raw" if raw else "margin")
    tag = episode_tag(c, i)
    st.session_state["_timeline_tag"] = tag  # for tests and debugging: what the player's values must carry
    violated = player.violated_by_step(traces)
    polling = strip is not None and not strip.complete
    seen = st.session_state.get("_timeline_seen")  # (episode, seq) of the player's last value handled
    answers = seen[1] if isinstance(seen, (tuple, list)) and len(seen) == 2 else None
    runs = [0]  # calls of draw(): the first is in the page's run, the rest are the fragment's reruns
    frame_out = [False]  # a call of draw() has sent the player a frame
    tables_wait = tables_wait_for_frame(tag, polling, on_page)

    def draw() -> None:
        runs[0] += 1
        if (runs[0] > 1 and st.session_state.get("_tables_wait") == tag
                and (frame_out[0] or runs[0] > TABLES_WAIT_POLLS)):
            # A frame went out in an earlier run (or none came in time): the page's run draws the
            # tables now. Not in the run that sends the frame: a page run that starts drops what
            # the session has not yet sent (Streamlit's AppSession clears its queue), that frame too.
            st.session_state.pop("_tables_wait", None)
            st.rerun()
        if strip is not None:
            strip.touch()
            if runs[0] == 1 and not strip.wait_first(0):
                # A frame due within moments (the scene is open or opening) is sent with the page
                # instead of at the fragment's first poll, POLL_S after the page reaches the browser.
                strip.wait_first(PAGE_FIRST_FRAME_WAIT_S)
            asked = runs[0] > 1 and _asked_for_frames(tag)
            if (runs[0] == 2 or asked) and not strip.wait_first(0):
                # The page and the player's iframe are out, and the player asked for its first
                # frame as it mounted (or this is the first poll): send the frame the moment it
                # is rendered, not at the next poll. Only these runs wait, so a render thread
                # busy elsewhere (or a scene that fails slowly) holds the page back by
                # FIRST_FRAME_WAIT_S at most, once or twice per episode.
                strip.wait_first(FIRST_FRAME_WAIT_S)
        frames = strip.snapshot() if strip is not None else {}
        value = player.timeline(episode=f"{tag}{MODE_SEP}{'raw' if raw else 'margin'}", spec=spec, n_steps=n_steps, dt=dt,
                                step=step, violating_step=vstep, frames=frames,
                                total=strip.total if strip is not None else 0, violated=violated,
                                key=TIMELINE_KEY, answers=answers, prerendering=polling)
        frame_out[0] = frame_out[0] or bool(frames)
        if strip is not None and strip.errors and not frames:
            step0, why0 = next(iter(strip.errors.items()))
            st.info(f"No replay for this episode: step {step0}: {why0}", icon=":material/movie:")
        if not polling:
            return
        if strip.complete:
            st.rerun()  # every frame is in: draw once more, outside the polling fragment
        if reruns_page(value, tag):
            st.rerun()  # a seek, pause or n / p in the player: the page's run handles it

    # While frames are pre-rendered, a fragment re-sends what is ready every POLL_S; after
    # that the player is drawn in the page itself, so its values rerun the page directly.
    (st.fragment(run_every=POLL_S)(draw) if polling else draw)()
    if why:
        st.info(why, icon=":material/movie:")
    st.caption("Space plays and pauses, ←/→ step (shift: 10 steps), v jumps to the violating step, n / p open the "
               "next / previous episode of the list above, a click on the chart seeks; frames around the violating "
               "step are rendered first. The green rule is the current step, the red dashed rule the violating step.")
    return tables_wait
