"""Episode detail: the episode picker, the header and its red line, a step slider (a chart
click moves it), jump to the violation, the timeline player (robustness over time per active
spec, or raw signals, with the replay drawn in the browser: dashboard/web_timeline.py, or server
frames where WebGL is missing: dashboard/detail_timeline.py), clip playback, the spec
results and why each spec is active or inactive for the task. A session's first run of the page
sends the title and the player alone, and the rest follows the first picture
(`first_picture_alone`)."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import annotations as AN
from dashboard import cached
from dashboard import timeline_spec as TS
from dashboard import common as C
from dashboard import episode_groups as G
from dashboard import state as S
from dashboard import vocab
from dashboard import web_timeline
from dashboard.detail_timeline import TIMELINE_KEY, episode_tag, tables_on_page, timeline_value, value_step
from dashboard.web_files import requests_wait_for_scenes

CHART_KEY = "rob_chart"
PICKER_LIMIT = 400
CLIP_WINDOW = 40
FIRST_PICTURE_WAIT_S = 8.0  # the page drawn whole without the player's first picture after this long
ABOVE_PLAYER_PX = 540  # the picker, the header, the tag editor and the controls (1440 px wide: 530-560)


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


def _choose_episode(c: C.Ctx) -> tuple[str | None, list[str], dict[str, str]]:
    """The episode to show and the picker's list: the filtered episodes (Episodes page
    filters) in their sort order. Returns the chosen episode's id (None: none), the list and
    its labels; draws nothing (`_picker_ui` does)."""
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
    if cur is not None:  # n / p in the player: its neighbour, in this run (no second run for it)
        cur = _follow_player_key(c, options, cur)
    meta = c.v.frame.set_index("episode_id").loc[options, ["outcome", "vsi"]] if options else None
    labels = {} if meta is None else {eid: f"{eid}   ·   {o}   ·   VSI {v:.2f}"
                                      for eid, o, v in zip(meta.index, meta["outcome"], meta["vsi"])}
    return cur, options, labels


def _picker_ui(c: C.Ctx, cur: str | None, options: list[str], labels: dict[str, str], around: dict) -> None:
    """The episode chooser and the previous / next buttons of its list (`around`: `_neighbours`)."""
    key = "w.ep"
    if st.session_state.get(key) != cur:
        st.session_state[key] = cur
    pick, back, ahead = st.columns([12, 1, 1], vertical_alignment="bottom")
    pick.selectbox(f"Episode ({len(options)} of the filtered episodes, Episodes-page order)", options, key=key,
                   format_func=labels.__getitem__, index=None, placeholder="choose an episode", on_change=_episode_changed,
                   args=(c,))
    for col, icon, name in ((back, ":material/chevron_left:", "previous"), (ahead, ":material/chevron_right:", "next")):
        to = around[name]
        col.button("", icon=icon, key=f"ep_{name}", disabled=to is None, on_click=_open_episode, args=(c, to),
                   help=f"the {name} episode in this list ({name[0]} in the player)" + (f": {to}" if to else ""),
                   width="stretch")
    if cur is not None and st.session_state.get("_auto_ep") == cur:
        st.caption(":material/auto_awesome: No episode was chosen, so this is the worst SBU episode of the current "
                   "Episodes filters (highest VSI, ties broken by the deepest violation relative to its threshold).")


def _neighbours(options: list[str], cur: str | None) -> dict[str, str | None]:
    """{"previous": id, "next": id} of `cur`'s neighbours in the picker's list (None at either end)."""
    pos = options.index(cur) if cur in options else None
    return {name: None if pos is None or not 0 <= pos + delta < len(options) else options[pos + delta]
            for name, delta in (("previous", -1), ("next", +1))}


def _follow_player_key(c: C.Ctx, options: list[str], cur: str) -> str:
    """The episode to show: `cur`, or its neighbour when the player's newest value is an
    unhandled n / p (its event "next" / "previous") of `cur`'s player; handled here, before the
    picker is drawn, so the page shows the neighbour in this run."""
    value = st.session_state.get(TIMELINE_KEY)
    if not (isinstance(value, dict) and value.get("event") in ("next", "previous")):
        return cur
    i = c.data.index_of(cur)
    value = timeline_value(value, episode_tag(c, i)) if i is not None else None
    to = None if value is None else _neighbours(options, cur)[value["event"]]
    if to is None:
        return cur
    _open_episode(c, to)
    cached.open_replay(c, to)
    return to


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
    colour = TS.OUTCOME_COLORS.get(str(ep["outcome"]), "#666")
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
            st.download_button("Download MP4", clip, file_name=f"{name}.mp4", mime="video/mp4",
                               on_click="ignore", key="clip_dl")


def controls_ui(vstep: int | None, n_steps: int) -> bool:
    """The step slider, jump to the violation and the raw-signals toggle; whether raw signals are shown."""
    ctl = st.columns([4, 1.3, 1.2])
    with ctl[0]:
        step = st.slider("Step", 0, max(n_steps - 1, 1), key="w.step")
        S.put("step", int(step))
    with ctl[1]:
        st.button("Jump to violation", icon=":material/skip_next:", key="jump", disabled=vstep is None, on_click=_jump,
                  args=(vstep or 0,), help="move to the violating frame (the worst spec's worst step)", width="stretch")
    with ctl[2]:
        raw = st.toggle("Raw signals", key=S.widget_key("raw"),
                        help="show each spec's raw signal with its threshold line")
        S.put("raw", bool(raw))
    return bool(raw)


def first_picture_alone(c: C.Ctx, i: int) -> bool:
    """True on the first run of a browser session (a link, a new tab, a reload) when episode `i`
    is drawn by the player in the browser: that run sends the title and the player only, and
    the rest (the picker, the header, the controls, the sidebar's store chooser and links)
    follows the first picture, on the run its "drawn" starts, in the space kept for it. Each of
    those widgets' code is a chunk of Streamlit's frontend, fetched when its first element
    renders; taken in with the player, they held a link's picture back by ~0.8 s on this
    machine (docs/benchmarks.md, 2026-12-02)."""
    if not S.first_run_of_session():
        return False
    # served by dashboard/server.py (what `safevla dashboard` runs), whose player always says
    # "drawn"; not under `streamlit run dashboard/app.py` (and AppTest), which shows the page whole
    if not requests_wait_for_scenes() or not web_timeline.draws_in_browser(c, i):
        return False
    try:
        cached.episode_record(c.data, i)
    except C.TRAJECTORY_ERRORS:
        return False
    return not cached.traces(c.data, c.key, i, c.items).empty


@st.fragment(run_every=2.0)
def _rest_without_a_picture(since: float) -> None:
    """On a run that sent the player alone: the rest of the page once `FIRST_PICTURE_WAIT_S` have
    passed without the player's "drawn" (a player that never loads would leave the page without
    its picker and header); the run that "drawn" starts does not draw this, which ends its timer."""
    if time.monotonic() - since > FIRST_PICTURE_WAIT_S:
        st.rerun(scope="app")  # no longer the session's first run: drawn whole


def render() -> None:
    c = C.ctx()
    data = c.data
    on_page = tables_on_page()
    # the chosen episode (a link, the picker, ‹ ›, n / p): its scene opens while this script runs
    cached.open_replay(c, S.get("ep"))
    st.title("Episode detail")
    cur, options, labels = _choose_episode(c)
    around = _neighbours(options, cur)
    i = None if cur is None else data.index_of(cur)
    alone = i is not None and first_picture_alone(c, i)
    # the picker, the header and the controls; on a page load's first run, their space only
    above = st.container(height=ABOVE_PLAYER_PX, border=False) if alone else st.container()
    st.session_state[S.FIRST_PICTURE_ALONE] = alone
    if not alone:
        S.sidebar_now()
        with above:
            C.thresholds_banner(c)
            _picker_ui(c, cur, options, labels, around)
    if i is None:
        st.info("No unsafe episode matches the Episodes filters. Choose an episode above, or widen the filters.")
        C.stop()
    # the player's last value (from the last run): n / p open a neighbour, the rest move the step
    value = timeline_value(st.session_state.get(TIMELINE_KEY), episode_tag(c, i))
    if web_timeline.heard_no_webgl(value) or web_timeline.heard_drawn(value):  # no step moves
        value = None  # no WebGL: the server's frames from now on; drawn: the tables follow
    vstep = C.D.violating_frame(data, c.v, i)
    head = above.container()  # the header and the tag editor, drawn after the player: its data leaves first

    def draw_head() -> None:
        with head:
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
    except C.TRAJECTORY_ERRORS as exc:  # missing, refused or unreadable: one line, no traceback
        draw_head()
        st.error(C.trajectory_problem(exc), icon=":material/block:")
        vocab.table(spec_table(c, i), hide_index=True, pinned=("spec",))
        explain(c, i)
        C.stop()

    raw = bool(st.session_state[S.widget_key("raw")])
    if not alone:
        with above:
            raw = controls_ui(vstep, n_steps)

    tr = cached.traces(data, c.key, i, c.items)
    tables_wait = False
    if tr.empty:
        st.info("No active spec has a signal for this episode, so there is nothing to plot.")
        left, right = st.columns([1.35, 1])
        with right:
            replay_panel(c, i, step)
    else:
        tables_wait = web_timeline.timeline_panel(c, i, step=step, vstep=vstep, n_steps=n_steps, raw=bool(raw),
                                                  traces=tr, on_page=on_page)
    if alone and not tables_wait:  # the server's frames drew it, without a second run to follow: one now
        st.rerun()
    if alone:
        _rest_without_a_picture(time.monotonic())
    else:
        draw_head()
        clip_panel(c, i, vstep, n_steps)

    # set here, not at the run's start: a run cut short by a rerun (a newer value from the browser) leaves the
    # browser's tables as they were
    st.session_state["_tables_drawn"] = not tables_wait
    if tables_wait:
        st.caption(":material/hourglass_top: The spec results and why each spec is active follow the first frame.")
        return
    # after the first picture: n / p and ‹ › find their episodes ready
    web_timeline.open_neighbours(c, (around["next"], around["previous"]), "raw" if raw else "margin")
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
