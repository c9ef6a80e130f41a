"""Overview: the main table (Tables 4/5), SR vs Safety (Figure 2 left), per-spec violation
rates (Figure 2 right), SBU composition (Tables 10/11) and the worst unsafe successes."""

from __future__ import annotations

import streamlit as st

from dashboard import cached
from dashboard import common as C
from dashboard import convert_ahead
from dashboard import perturbation_ui
from dashboard import vocab


def kpis(c: C.Ctx) -> None:
    agg = C.D.cell_aggregates(c.v, by=())
    a = agg.iloc[0]
    cols = st.columns(6)
    cols[0].metric("Episodes", f"{int(a['n']):,}")
    cols[1].metric("Success rate", C.pct(a["sr"]))
    cols[2].metric("Safety", C.pct(a["safety"]))
    # a short label: six metrics share 1280 px, and a long one is cut to "SBU (successful b…"
    cols[3].metric("SBU", C.pct(a["sbu"]), help="successful but unsafe: the benchmark's success check passed and at "
                                                "least one safety spec was violated")
    cols[4].metric("P[unsafe | success]", C.pct(a["p_unsafe_given_success"]))
    cols[5].metric("VSI", f"{a['vsi']:.3f}", help="mean violation severity index")
    note = C.D.unsettled_note(c.v.frame)
    if note:
        st.caption(note)


def worst_sbu(c: C.Ctx, top) -> None:
    st.subheader("Worst successful-but-unsafe episodes")
    if top.empty:
        st.info("No successful-but-unsafe episodes under the current thresholds.")
        return
    st.caption("Succeeded by the benchmark's own check, yet violated a safety spec. VSI ties (it saturates at 1) "
               "go to the deeper violation, and each model × suite × task gives at most two rows before any "
               "gives more. Select a row to open it.")
    show = top[[c for c in ("model", "suite", "task_id", "vsi", "worst_spec", "violating_step", "scene", "language",
                            "episode_id") if c in top]]
    ev = vocab.table(show, key="ov_top", on_select="rerun", selection_mode="single-row", hide_index=True,
                     width="stretch", pinned=("model", "suite", "task_id"), formats={"violating_step": "%d"},
                     column_config={"vsi": st.column_config.ProgressColumn("VSI", min_value=0.0, max_value=1.0,
                                                                           format="%.2f"),
                                    "violating_step": st.column_config.NumberColumn("violating step", format="%d")})
    rows = ev.selection.rows if ev is not None else []
    if rows:
        r = show.iloc[rows[0]]
        step = None if r["violating_step"] != r["violating_step"] else int(r["violating_step"])
        st.session_state.pop("ov_top", None)
        C.go("detail", ep=r["episode_id"], step=step)


@st.fragment
def main_table(c: C.Ctx) -> None:
    """The main table, and on big stores the button that adds VSI bootstrap CIs to it. A
    fragment: the click reruns the table alone, not the page's charts and tables around it."""
    data = c.data
    big = len(data.episodes) > cached.BOOTSTRAP_AUTO_MAX
    want_ci = st.session_state.get("ov_ci", not big)
    if big and not want_ci:
        st.caption(f"VSI bootstrap CIs (10,000 resamples) are computed on demand for stores over "
                   f"{cached.BOOTSTRAP_AUTO_MAX:,} episodes; proportions carry Wilson 95% CIs.")
        if st.button("Compute VSI bootstrap CIs", key="ov_ci_btn"):
            st.session_state["ov_ci"] = True
            want_ci = True
    with st.spinner("Bootstrapping VSI confidence intervals …" if want_ci else "Building the table …"):
        table = cached.main_table(data, c.key, c.items, bool(want_ci))
    vocab.table(table, hide_index=True, pinned=("model", "suite"))


def render() -> None:
    c = C.ctx()
    data = c.data
    st.title("Overview")
    st.caption(f"Run store `{data.path}` · registry {str(data.manifest.get('registry_hash'))[:12]}"
               + (" · synthetic" if data.synthetic else ""))
    C.thresholds_banner(c)
    kpis(c)
    tabs = cached.overview_tables(data, c.key, c.items)
    worst_sbu(c, tabs["top"])
    convert_ahead.listed(c, tabs["top"].get("episode_id", ()))  # the rows opened first find their scenes converted

    st.subheader("Main results per model × suite")
    st.caption("The paper's main table (Tables 4/5): rates in %, Wilson 95% intervals; VSI with bootstrap intervals.")
    main_table(c)
    perturbation_ui.deltas_ui(c)

    figures = cached.overview_charts(data, c.key, c.items)
    left, right = st.columns(2)
    with left:
        C.show(figures["scatter"])
    with right:
        C.show(figures["heatmap"])

    st.subheader("Which specs make successes unsafe")
    st.caption("SBU composition (the paper's Tables 10/11): the share of each cell's unsafe successes per violated spec.")
    comp = tabs["comp"]
    if comp.empty:
        st.info("No successful-but-unsafe episodes, so nothing to decompose.")
    else:
        C.show(figures["composition"])
        if st.toggle("Show the composition table", key="ov_comp_table"):
            vocab.table(cached.composition_table(data, c.key, c.items), hide_index=True, width="stretch")


if __name__ == "__main__":
    render()
