"""Episode detail: robustness over time per active spec (or raw signals), the replay frame
tied to a step slider (click the chart to move it), jump to the violation, clip playback,
the spec results and why each spec is active or inactive for the task."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import annotations as AN
from dashboard import cached
from dashboard import charts
from dashboard import common as C
from dashboard import episode_groups as G
from dashboard import state as S
from dashboard import vocab

CHART_KEY = "rob_chart"
TIMELINE_KEY = "timeline"
MODE_SEP = "::mode="  # episode tag + chart mode (the store key holds "|" and "#")
POLL_S = 1.0  # while frames are pre-rendered, the timeline fragment re-sends what is ready this often
FIRST_FRAME_WAIT_S = 2.0  # a fragment rerun with no frame yet sends the first one as soon as it is rendered
PAGE_FIRST_FRAME_WAIT_S = 0.5  # the page's own run waits this long for the first frame before drawing the player
PICKER_LIMIT = 400
CLIP_WINDOW = 40
EPISODE_EVENTS = ("previous", "next")  # the player's p / n keys: open that episode of the picker's list
FRAMES_EVENT = "frames"  # the player mounted without a frame and asks for the first one (no step moves)
TABLES_WAIT_POLLS = 2  # the page's tables wait this many timeline polls at most for the first frame to go out


def clicked_step(selection) -> int | None:
    """The step of a chart click: the selection state {"selection": {"pt": [{"step": k}]}}
    (or its inner dict); None when nothing is selected."""
    if selection is None:
        return None
    try:
        sel = selection.get("selection", selection) if hasattr(selection, "get") else None
        pts = sel.get("pt") if sel is not None else None
    except Exception:  # noqa: BLE001
        return None
    if not pts:
        return None
    first = pts[0] if isinstance(pts, (list, tuple)) else pts
    val = first.get("step") if hasattr(first, "get") else None
    if isinstance(val, (list, tuple)):
        val = val[0] if val else None
    try:
        return int(round(float(val)))
    except (TypeError, ValueError):
        return None


def _pick_episode(c: C.Ctx) -> tuple[int | None, dict[str, str | None]]:
    """The episode chooser: the filtered episodes (Episodes page filters) in its sort order.
    Returns the chosen episode's row (None: none) and {"previous": id, "next": id} of its
    neighbours in that list (None at either end)."""
    data = c.data
    mask = AN.filtered_mask(c)
    table = C.D.episode_table(data, c.v, mask, sort=S.get("sort"), limit=PICKER_LIMIT)
    options = list(table["episode_id"])
    cur = S.get("ep")
    if cur is not None and data.index_of(cur) is None:  # not in this store (another store was loaded)
        S.put("ep", None)
        cur = None
    if cur is None:  # nothing chosen: open the worst unsafe success of the filters, not an empty page
        cur = G.worst_sbu(data, c.v, mask)
        if cur is not None:
            S.put("ep", cur)
            S.put("step", None)  # a step left from another episode means nothing here
            st.session_state.pop("w.step", None)
            st.session_state["_auto_ep"] = cur
    if cur is not None and cur not in options:
        options.insert(0, cur)
    meta = c.v.frame.set_index("episode_id").loc[options, ["outcome", "vsi"]] if options else None
    labels = {} if meta is None else {eid: f"{eid}   ·   {o}   ·   VSI {v:.2f}"
                                      for eid, o, v in zip(meta.index, meta["outcome"], meta["vsi"])}

    key = "w.ep"
    if st.session_state.get(key) != cur:
        st.session_state[key] = cur
    pick, back, ahead = st.columns([12, 1, 1], vertical_alignment="bottom")
    pick.selectbox(f"Episode ({len(options)} of the filtered episodes, Episodes-page order)", options, key=key,
                   format_func=labels.__getitem__, index=None, placeholder="choose an episode", on_change=_episode_changed,
                   args=(c,))
    pos = options.index(cur) if cur in options else None
    around: dict[str, str | None] = {}
    for col, delta, icon, name in ((back, -1, ":material/chevron_left:", "previous"),
                                   (ahead, +1, ":material/chevron_right:", "next")):
        to = None if pos is None or not 0 <= pos + delta < len(options) else options[pos + delta]
        around[name] = to
        col.button("", icon=icon, key=f"ep_{name}", disabled=to is None, on_click=_open_episode, args=(c, to),
                   help=f"the {name} episode in this list ({name[0]} in the player)" + (f": {to}" if to else ""),
                   width="stretch")
    if cur is None:
        return None, around
    if st.session_state.get("_auto_ep") == cur:
        st.caption(":material/auto_awesome: No episode was chosen, so this is the worst SBU episode of the current "
                   "Episodes filters (highest VSI, ties broken by the deepest violation relative to its threshold).")
    return data.index_of(cur), around


def _episode_changed(c: C.Ctx) -> None:
    _open_episode(c, st.session_state.get("w.ep"))


def _open_episode(c: C.Ctx, eid: str | None) -> None:
    """Shows episode `eid` from its violating step (the picker, the previous/next buttons)."""
    S.put("ep", eid)
    st.session_state.pop("_auto_ep", None)
    i = c.data.index_of(eid) if eid else None
    step = C.D.violating_frame(c.data, c.v, i) if i is not None else None
    S.set_widget("step", int(step or 0))
    C.forget_render("clip_go")


def header(c: C.Ctx, i: int, vstep: int | None) -> None:
    ep = c.v.frame.iloc[i]
    colour = charts.OUTCOME_COLORS.get(str(ep["outcome"]), "#666")
    st.markdown(f"<span style='background:{colour};color:white;padding:4px 10px;border-radius:6px;"
                f"font-weight:600'>{ep['outcome']}</span> &nbsp; <code>{ep['episode_id']}</code>",
                unsafe_allow_html=True)
    if isinstance(ep.get("language"), str) and ep["language"]:
        st.caption(f"“{ep['language']}” · {ep['model']} · {ep['suite']} · {ep['task_id']}")
    else:
        st.caption(f"{ep['model']} · {ep['suite']} · {ep['task_id']}")
    served = C.D.provenance_text(c.data.episodes.iloc[c.data.index_of(ep["episode_id"])].to_dict())
    if served:
        st.caption(f"Served as: {served}")
    cols = st.columns(4)
    cols[0].metric("Success", "yes" if ep["success"] else "no")
    cols[1].metric("Safe", "yes" if ep["safe"] else "no")
    cols[2].metric("VSI", f"{float(ep['vsi']):.3f}", help="violation severity index: 0 safe, 1 severe")
    cols[3].metric("Violating step", "—" if vstep is None else f"{vstep}",
                   help=None if vstep is None else f"t = {vstep * float(ep['dt']):.2f} s")
    lines = C.D.violation_lines(c.data, c.v, i, objects=violated_objects(c, i))
    if lines:
        st.markdown("<div style='color:#d62728;font-weight:600'>Violated: " + lines[0] + "</div>"
                    + "".join(f"<div style='color:#b04040'>also: {x}</div>" for x in lines[1:4]),
                    unsafe_allow_html=True)
    else:
        close = C.D.closest_call_texts(c.data, c.v.frame.iloc[[i]])[0]
        if close:
            st.caption(f"No violation. {close[0].upper()}{close[1:]}.")
    if C.D.unsettled_note(c.v.frame.iloc[[i]]):
        steps = ep.get("settle_steps")
        st.warning("The scene was not at rest at step 0" + ("" if steps is None or steps != steps else
                                                           f" (still moving after {int(steps)} no-op steps)")
                   + ": displacements and forces include the scene's own motion. This episode is left out "
                   "of every cell.", icon=":material/warning:")


def violated_objects(c: C.Ctx, i: int) -> dict:
    """family -> the bodies the replay tints for its violation (from the record), so the red
    line names the object ("akita_black_bowl_2 moved 22 mm"); {} without a readable record."""
    try:
        return {x.family: x.bodies for x in cached.violations(c.data, c.key, i, c.items)}
    except Exception:  # noqa: BLE001 - no trajectory or no replay stack: the line reads without objects
        return {}


def spec_table(c: C.Ctx, i: int) -> pd.DataFrame:
    rows = C.D.in_display_units(C.D.episode_specs(c.data, c.v, i), ("rho", "threshold", "extreme"))
    show = rows[["label", "report_only", "active", "violated", "rho", "threshold", "unit", "extreme", "extreme_step",
                 "first_violation_step", "reason"]].rename(columns={
                     "label": "spec", "report_only": "diagnostic", "rho": "robustness", "extreme": "worst value",
                     "extreme_step": "worst step", "first_violation_step": "first violation"})
    return show.sort_values(["diagnostic", "violated", "active"], ascending=[True, False, False], kind="stable")


def _jump(step: int) -> None:
    S.set_widget("step", int(step))


def replay_panel(c: C.Ctx, i: int, step: int) -> None:
    ok, why = cached.replay_status()
    if not ok:
        st.info(why, icon=":material/movie:")
        return
    try:
        with st.spinner("Rendering the replay frame …"):
            img = cached.frame_jpeg(c.data, c.key, i, int(step), c.items, True)
    except C.D.StoreProblem as exc:
        st.error(str(exc))
        return
    except Exception as exc:  # noqa: BLE001 - RecordError (no replay state), RenderError (missing mesh)
        st.info(f"No replay for this episode: {exc}", icon=":material/movie:")
        return
    dt = float(c.v.frame["dt"].iat[i])
    st.image(img, caption=f"step {step} · t = {step * dt:.2f} s (red border: violating frame; green: success)",
             width="stretch")


def clip_panel(c: C.Ctx, i: int, vstep: int | None, n_steps: int) -> None:
    ok, why = cached.replay_status()
    if not ok:
        return
    with st.expander("Play the clip", icon=":material/play_circle:", expanded=C.has_render("clip_go")):
        choices = ["whole episode"] + ([f"±{CLIP_WINDOW} steps around the violation"] if vstep is not None else [])
        which = st.radio("Clip", choices, horizontal=True, key="clip_range")
        rng = None
        if which != "whole episode" and vstep is not None:
            rng = (max(0, vstep - CLIP_WINDOW), min(n_steps, vstep + CLIP_WINDOW + 1))
        clip = C.render_button_ui(
            "Render clip", key="clip_go", tag=(c.key, i, rng, c.items), what="the clip", type="primary",
            render=lambda progress: cached.render_service().clip(
                cached.replay_record(c.data, i), cached.violations(c.data, c.key, i, c.items), step_range=rng,
                progress=lambda done, total: progress(done / max(total, 1), f"Rendering frame {done}/{total} …")))
        if clip is not None:
            st.video(clip, format="video/mp4", autoplay=True, muted=True, loop=True)
            name = C.file_safe(c.data.episodes["episode_id"].iat[i])
            st.download_button("Download MP4", clip, file_name=f"{name}.mp4", mime="video/mp4", key="clip_dl")


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
    as dicts by `charts.robustness_spec`: 11 ms for five panels of a demo episode, where
    Altair's API took 130 ms for its unit charts alone and 0.55 s for the compound chart."""
    return charts.robustness_spec(traces, violating_step=vstep, mode=mode, colors=dict(colors), dt=dt)


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
    player): page loads' medians fell by 0.1-0.8 s without them (docs/benchmarks.md, session 14).
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
    spec = timeline_chart_spec(traces, vstep, "raw" if raw else "margin", tuple(c.data.colors().items()), dt)
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


def render() -> None:
    c = C.ctx()
    data = c.data
    on_page = tables_on_page()
    # the chosen episode (a link, the picker, ‹ ›, n / p): its scene opens while this script runs
    cached.open_replay(c, S.get("ep"))
    st.title("Episode detail")
    C.thresholds_banner(c)
    i, around = _pick_episode(c)
    if i is None:
        st.info("No unsafe episode matches the Episodes filters. Choose an episode above, or widen the filters.")
        C.stop()
    # the player's last value (from the last run): n / p open a neighbour, the rest move the step
    value = timeline_value(st.session_state.get(TIMELINE_KEY), episode_tag(c, i))
    if value is not None and around.get(value.get("event")) is not None:
        _open_episode(c, around[value["event"]])
        st.rerun()
    vstep = C.D.violating_frame(data, c.v, i)
    header(c, i, vstep)
    AN.editor_ui(c, str(data.episodes["episode_id"].iat[i]))
    n_steps = int(c.v.frame["n_steps"].iat[i])

    # a seek, pause or key step in the timeline player moves the slider
    seek = value_step(value)
    if seek is not None:
        S.set_widget("step", int(np.clip(seek, 0, n_steps - 1)))
    # a click on a server-drawn chart (selection state from the last run) moves the slider
    click = clicked_step(st.session_state.get(CHART_KEY))
    if click is not None and click != st.session_state.get("_last_click"):
        S.set_widget("step", int(np.clip(click, 0, n_steps - 1)))
    st.session_state["_last_click"] = click
    step = st.session_state.get("w.step")  # the slider's value (moved by the user last run)
    if step is None:
        step = S.get("step")
    if step is None:
        step = vstep if vstep is not None else 0
    step = int(np.clip(step, 0, n_steps - 1))
    if st.session_state.get("w.step") != step:
        st.session_state["w.step"] = step
    S.put("step", step)

    try:
        cached.episode_record(data, i)
    except C.D.StoreProblem as exc:
        st.error(f"**Missing trajectory.** {exc}", icon=":material/block:")
        vocab.table(spec_table(c, i), hide_index=True, pinned=("spec",))
        explain(c, i)
        C.stop()

    ctl = st.columns([4, 1.3, 1.2])
    with ctl[0]:
        step = st.slider("Step", 0, max(n_steps - 1, 1), key="w.step")
        S.put("step", int(step))
    with ctl[1]:
        st.button("Jump to violation", icon=":material/skip_next:", key="jump", disabled=vstep is None, on_click=_jump, args=(vstep or 0,),
                  help="move to the violating frame (the worst spec's worst step)", width="stretch")
    with ctl[2]:
        key = S.widget_key("raw")
        raw = st.toggle("Raw signals", key=key, help="show each spec's raw signal with its threshold line")
        S.put("raw", bool(raw))

    tr = cached.traces(data, c.key, i, c.items)
    tables_wait = False
    if tr.empty:
        st.info("No active spec has a signal for this episode, so there is nothing to plot.")
        left, right = st.columns([1.35, 1])
        with right:
            replay_panel(c, i, step)
    else:
        tables_wait = timeline_panel(c, i, step=step, vstep=vstep, n_steps=n_steps, raw=bool(raw), traces=tr,
                                     on_page=on_page)
    clip_panel(c, i, vstep, n_steps)

    # set here, not at the run's start: a run cut short by a rerun (n / p) leaves the browser's tables as they were
    st.session_state["_tables_drawn"] = not tables_wait
    if tables_wait:
        st.caption(":material/hourglass_top: The spec results and why each spec is active follow the first frame.")
        return
    st.subheader("Spec results")
    vocab.table(spec_table(c, i), hide_index=True, pinned=("spec",),
                formats={"robustness": "%.4g", "worst value": "%.4g", "worst step": "%d", "first violation": "%d"},
                column_config={"robustness": st.column_config.NumberColumn(format="%.4g"),
                               "worst value": st.column_config.NumberColumn(format="%.4g")})
    explain(c, i)


def explain(c: C.Ctx, i: int) -> None:
    st.subheader("Why each spec is active or inactive")
    table = C.D.applicability_table(c.data, i)
    if table.attrs.get("note"):
        st.warning(table.attrs["note"])
    vocab.table(table, hide_index=True, pinned=("spec",),
                column_config={"tag sources": st.column_config.TextColumn(width="large"),
                               "reason": st.column_config.TextColumn(width="large")})


if __name__ == "__main__":
    render()
