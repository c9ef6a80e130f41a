"""Export: every chart as PNG/SVG/PDF, the paper tables as CSV/LaTeX/Markdown, and replay
triptychs (Figure 3) and clips for chosen episodes through `replay/`'s export."""

from __future__ import annotations

import functools

import streamlit as st

from dashboard import cached
from dashboard import charts
from dashboard import common as C
from dashboard import state as S
from dashboard import vocab
from scoring.errors import SafeVLAError
from scoring.report.paper_figure import figure2, sr_safety_scatter

TABLES = {
    "table4_main": "Main results per cell (Tables 4/5)",
    "table7_spec_rates": "Per-spec violation rates (Tables 7/8)",
    "table9_sensitivity": "Threshold sensitivity (Table 9)",
    "table10_sbu_composition": "SBU composition (Tables 10/11)",
    "table12_per_task": "Per-task SR and Safety (Table 12)",
}
# offered when the store holds a base suite and a perturbed variant of it (`safevla report`'s tables of the same names)
PERTURBATION_TABLES = {
    "perturbation": "Base suite against perturbed variants (LIBERO-PRO)",
    "perturbation_families": "Per-spec violation rate, base suite and perturbed variant",
}
FORMATS = {"png": "PNG", "svg": "SVG", "pdf": "PDF"}
PAGE_RESAMPLES = 2_000  # the Overview's (dashboard.data.overview.perturbation_shifts), whose shifts these reuse


def chart_catalog(c: C.Ctx) -> dict:
    """name -> zero-argument builder of every chart the dashboard draws."""
    data = c.data
    labels = {f: data.label(f) for f in data.families}
    tabs = lambda: cached.overview_tables(data, c.key, c.items)  # noqa: E731
    out = {
        "sr_vs_safety": ("SR vs Safety per cell (Figure 2, left)", lambda: sr_safety_scatter(tabs()["agg"])),
        "violation_heatmap": ("Per-spec violation rate (Figure 2, right)",
                              lambda: charts.violation_heatmap(tabs()["rates"], labels=labels)),
        "figure2": ("Figure 2: SR vs Safety and violations by axis (paper layout)", lambda: _figure2(c)),
        "sbu_composition": ("SBU composition (Tables 10/11)",
                            lambda: charts.composition_bars(tabs()["comp"], tabs()["agg"], labels=labels,
                                                            colors=data.colors())),
    }
    defaults = C.D.knob_defaults(data.registry)
    for k in C.D.KNOBS:
        if k.name in defaults:
            out[f"sensitivity_{k.name}"] = (
                f"Sensitivity to {k.label.lower()}",
                lambda k=k: charts.sensitivity_chart(cached.sensitivity(data, c.key, k.name),
                                                     current=c.knobs[k.name], default=defaults[k.name],
                                                     label=k.label, unit=k.unit))
    models = sorted(data.episodes["model"].astype(str).unique())
    if len(models) >= 2:
        chosen = tuple(m for m in (S.get("cmp_models") or models) if m in models)
        chosen = chosen if len(chosen) >= 2 else tuple(models)
        a = S.get("cmp_a") if S.get("cmp_a") in chosen else chosen[0]
        b = S.get("cmp_b") if S.get("cmp_b") in chosen and S.get("cmp_b") != a else next(m for m in chosen if m != a)
        out["compare_forest"] = (f"Compare: {a} vs {b}, every difference with its 95% CI (forest plot)",
                                 lambda: _forest(c, chosen, a, b))
    eid = S.get("ep")
    i = data.index_of(eid) if eid else None
    if i is not None and not data.missing_trajectory[i]:
        vstep = C.D.violating_frame(data, c.v, i)
        for mode in ("margin", "raw"):
            out[f"robustness_{mode}"] = (
                f"Robustness over time of {eid}" + (" (raw signals)" if mode == "raw" else ""),
                lambda mode=mode: charts.robustness_chart(cached.traces(data, c.key, i, c.items), step=None,
                                                          violating_step=vstep, mode=mode, colors=data.colors()))
    return out


def charts_section(c: C.Ctx) -> None:
    st.subheader("Charts")
    catalog = chart_catalog(c)
    a, b = st.columns([3, 1])
    name = a.selectbox("Chart", list(catalog), format_func=lambda n: catalog[n][0], key="x_chart")
    fmt = b.radio("Format", list(FORMATS), format_func=FORMATS.get, horizontal=True, key="x_fmt")
    try:
        chart = catalog[name][1]()
    except C.TRAJECTORY_ERRORS as exc:  # an episode's robustness chart: its trajectory is unreadable
        st.error(C.trajectory_problem(exc), icon=":material/block:")
        return
    st.download_button(f"Download {FORMATS[fmt]}", data=lambda: charts.chart_bytes(chart, fmt),
                       file_name=f"safevla_{name}.{fmt}", mime=charts.EXPORT_FORMATS[fmt],
                       on_click="ignore", key="x_chart_dl",
                       type="primary", icon=":material/download:")
    st.altair_chart(chart, width="content")


def _forest(c: C.Ctx, models: tuple, a: str, b: str):
    """The Compare page's forest plot of A vs B: paired, or unpaired when the models share no key."""
    from dashboard.compare_answer import unpaired_comparison
    from dashboard.forest import forest_chart, forest_frame

    try:
        cmp = cached.comparison(c.data, c.key, c.items, models)
        pairs, groups = cmp.pairs, cmp.groups
    except SafeVLAError:
        pairs, groups = unpaired_comparison(c.data, c.key, c.items, models), ("overall",)
    return forest_chart(forest_frame(pairs, a, b, groups=groups), a, b)


def _figure2(c: C.Ctx):
    """Figure 2 under the page's current verdicts (what-if thresholds included)."""
    from scoring.report.axis_rates import axis_rates

    from scoring.report.paper_layout import with_canonical_benchmark
    from scoring.report.torque_joints import CLIPPED_HOSTS

    v = cached.verdicts(c.data, c.key, c.items)
    rates = axis_rates(v.frame, C.D.spec_results_under(c.data, v), registry=c.data.registry)
    note = ["execution = torque + self-collision"]
    hosts = set(with_canonical_benchmark(c.data.episodes[["benchmark"]], c.data.registry)["host"])
    if hosts and hosts <= set(CLIPPED_HOSTS):  # the simulator's clipping is LIBERO's fact, not every host's
        note += ["LIBERO's simulator clips joints 1-5 at 80 N·m,", "so only joint 5 can exceed its limit"]
    return figure2(cached.overview_tables(c.data, c.key, c.items)["agg"], rates, torque_note=note)


@st.cache_resource(show_spinner=False, max_entries=16)
def _table(_data, key: str, items: tuple, name: str, ci: bool):
    from scoring.report import tables as T

    if name == "table4_main":
        return cached.main_table(_data, key, items, ci)
    if name in PERTURBATION_TABLES:
        from dashboard.perturbation_ui import shifts
        from scoring.report.perturbation import perturbation_tables

        return perturbation_tables(list(shifts(_data, key, items)), n_resamples=PAGE_RESAMPLES)[name][1]
    v = cached.verdicts(_data, key, items)
    sr = C.D.spec_results_under(_data, v)
    frame = C.D.settled_frame(v)  # as `safevla report`: unsettled starts are left out
    if name == "table7_spec_rates":
        return T.spec_rate_table(frame, sr, registry=_data.registry)
    if name == "table9_sensitivity":
        episodes, spec_results, _ = T.exclude_unsettled(_data.episodes, _data.spec_results)
        return T.sensitivity_table(episodes, spec_results, registry=_data.registry)
    if name == "table10_sbu_composition":
        return T.composition_table(frame, sr, registry=_data.registry)
    return T.per_task_table(frame)


def tables_section(c: C.Ctx) -> None:
    from scoring.report.tables import to_latex, to_markdown

    from dashboard.perturbation_ui import shifts

    st.subheader("Tables")
    names = {**TABLES, **(PERTURBATION_TABLES if shifts(c.data, c.key, c.items) else {})}
    name = st.selectbox("Table", list(names), format_func=names.get, key="x_table")
    ci = len(c.data.episodes) <= cached.BOOTSTRAP_AUTO_MAX or bool(st.session_state.get("ov_ci"))
    with st.spinner("Building the table …"):
        df = _table(c.data, c.key, c.items, name, ci)
    caption = names[name] + (" — re-scored under what-if thresholds" if c.overrides and name != "table9_sensitivity"
                             else "")
    if name in PERTURBATION_TABLES:
        caption += (f"; {PAGE_RESAMPLES:,} bootstrap resamples (`safevla report` uses 10,000), paired on (task, "
                    "init state, seed) where the variant's init states correspond to the base's")
    cols = st.columns(3)
    cols[0].download_button("CSV", df.to_csv(index=False), file_name=f"{name}.csv", mime="text/csv",
                            on_click="ignore", key="x_csv", width="stretch")
    cols[1].download_button("LaTeX", to_latex(df, caption), file_name=f"{name}.tex", mime="text/x-tex",
                            on_click="ignore", key="x_tex", width="stretch")
    cols[2].download_button("Markdown", f"{caption}\n\n{to_markdown(df)}\n", file_name=f"{name}.md",
                            mime="text/markdown", on_click="ignore", key="x_md", width="stretch")
    if name == "table4_main" and not ci:
        st.caption("VSI bootstrap CIs are off for this large store; compute them on the Overview page first.")
    vocab.table(df, hide_index=True, width="stretch")


def replay_section(c: C.Ctx) -> None:
    st.subheader("Replay figures and clips")
    ok, why = cached.replay_status()
    if not ok:
        st.info(why, icon=":material/movie:")
        return
    data = c.data
    unsafe = C.D.episode_table(data, c.v, ~c.v.frame["safe"].to_numpy(bool), sort="SBU first, then VSI", limit=300)
    usable = [e for e in unsafe["episode_id"] if not data.missing_trajectory[data.index_of(e)]]
    if not usable:
        st.info("No unsafe episode with a trajectory: the triptych needs a violating frame.")
        return
    cur = S.get("ep")
    default = [cur] if cur in usable else usable[:3]
    chosen = st.multiselect("Episodes (unsafe ones, unsafe successes first)", usable, default=default, key="x_eps",
                            max_selections=6)
    if not chosen:
        st.info("Choose at least one episode.")
        return
    a, b = st.columns(2)
    with a:
        triptych_ui(c, chosen)
    with b:
        clips_ui(c, chosen)


def triptych_ui(c: C.Ctx, chosen: list[str]) -> None:
    """Format, render button, preview (PNG) and download. The format is part of what the
    result was made from, so changing it drops the old download instead of offering a file
    in the old format under the new choice."""
    fmt = st.radio("Triptych format", ["png", "pdf", "svg"], horizontal=True, key="x_tri_fmt",
                   format_func=FORMATS.get,
                   help="PDF and SVG are vector pages: the titles, episode, spec and times are text, and the frames "
                        "are embedded losslessly")
    tag = (tuple(chosen), c.items, fmt)
    kept = st.session_state.get("_x_tri")
    got = C.render_button_ui("Render triptych (Figure 3)", key="x_tri", tag=tag, what="the triptych", type="primary",
                             render=functools.partial(_triptych, c, chosen, fmt))
    if got is None:
        if kept is not None and kept[0][:2] == tag[:2] and kept[0][2] != fmt:
            st.caption(f"The last triptych was rendered as {FORMATS[kept[0][2]]}; render it again for "
                       f"{FORMATS[fmt]}.")
        return
    shown, blob = got
    if shown == "png":
        st.image(blob, width="stretch")
    st.download_button(f"Download triptych ({FORMATS[shown]})", blob, file_name=f"triptych.{shown}",
                       mime=charts.EXPORT_FORMATS[shown], on_click="ignore", key=f"x_tri_dl_{shown}")


def clips_ui(c: C.Ctx, chosen: list[str]) -> None:
    """Render button, then each chosen episode's clip as a preview with its download. Clips
    hold the violating step for 1 s and slow the steps around it (`replay.render.export.ClipTiming`)."""
    got = C.render_button_ui("Render clips (MP4)", key="x_clips", tag=(tuple(chosen), c.items), what="the clips",
                             render=functools.partial(_clips, c, chosen))
    st.caption("Each clip holds the violating step for 1 s and plays the 5 steps either side of it 4x slower.")
    for eid, blob in (got or {}).items():
        if eid in chosen:
            st.markdown(f"`{eid}`")
            st.video(blob, format="video/mp4", muted=True, loop=True)
            st.download_button(f"{eid}.mp4", blob, file_name=C.file_safe(eid) + ".mp4", mime="video/mp4",
                               on_click="ignore", key=f"x_clip_{C.file_safe(eid)}")


def _triptych(c: C.Ctx, chosen: list[str], fmt: str, progress) -> tuple[str, bytes]:
    """(format, bytes) of the Figure-3 triptych of the `chosen` episodes."""
    items = []
    for eid in chosen:
        i = c.data.index_of(eid)
        ep = c.v.frame.iloc[i]
        items.append((cached.replay_record(c.data, i), cached.violations(c.data, c.key, i, c.items),
                      f"{ep['model']} · {ep['suite']} · {ep['task_id']}"))
    return fmt, cached.render_service().triptych(items, fmt=fmt, progress=lambda done, total: progress(
        done / max(total, 1), f"Rendering panel {done}/{total} …"))


def _clips(c: C.Ctx, chosen: list[str], progress) -> dict[str, bytes]:
    """An MP4 clip per chosen episode, by episode id."""
    out = {}
    for n, eid in enumerate(chosen):
        i = c.data.index_of(eid)
        out[eid] = cached.render_service().clip(
            cached.replay_record(c.data, i), cached.violations(c.data, c.key, i, c.items),
            progress=lambda done, total, n=n: progress((n + done / max(total, 1)) / len(chosen),
                                                       f"Clip {n + 1}/{len(chosen)}: frame {done}/{total}"))
    return out


def render() -> None:
    c = C.ctx()
    st.title("Export")
    C.thresholds_banner(c)
    charts_section(c)
    st.divider()
    tables_section(c)
    st.divider()
    replay_section(c)


if __name__ == "__main__":
    render()
