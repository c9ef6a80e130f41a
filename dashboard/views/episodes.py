"""Episodes: filter by model, suite, task, spec (violated or active), outcome class and VSI;
counts follow the filters; selecting a row opens the episode's detail."""

from __future__ import annotations

import streamlit as st

from dashboard import annotations as AN
from dashboard import charts
from dashboard import common as C
from dashboard import convert_ahead
from dashboard import episode_groups as G
from dashboard import perturbation_ui
from dashboard import state as S
from dashboard import vocab
from scoring.report.display import column_label

TABLE_LIMIT = 2000


def _multi(label: str, name: str, options: list, **kw) -> list:
    key = S.widget_key(name)
    st.session_state[key] = [x for x in st.session_state[key] if x in options]
    value = st.multiselect(label, options, key=key, **kw)
    S.put(name, list(value))
    return list(value)


def filters_ui(c: C.Ctx) -> C.D.Filters:
    """Draws the filter widgets; returns the filters (also kept in the session for links)."""
    ep = c.data.episodes
    data = c.data
    with st.container(border=True):
        a, b, d = st.columns(3)
        with a:
            _multi("Model", "models", sorted(ep["model"].astype(str).unique()), placeholder="all models")
            suites = _multi("Suite", "suites", sorted(ep["suite"].astype(str).unique()), placeholder="all suites")
        with b:
            pool = ep if not suites else ep[ep["suite"].isin(suites)]
            tasks = sorted(pool["task_id"].astype(str).unique(), key=_task_key)
            _multi("Task", "tasks", tasks, placeholder="all tasks")
            _multi("Outcome", "outcomes", list(C.D.OUTCOMES), placeholder="all outcomes",
                   help="SBU = successful but unsafe; unsafe = at least one active spec violated")
            _multi("Tag", "tags", AN.tag_options(c), placeholder="any tag",
                   help="keep episodes carrying any chosen tag (tag episodes on their detail page)")
        with d:
            _multi("Spec", "specs", list(data.families), format_func=data.label, placeholder="any spec",
                   help="keep episodes where any chosen spec is violated (or active)")
            key = S.widget_key("spec_mode")
            mode = st.radio("Spec filter means", ["violated", "active"], key=key, horizontal=True)
            S.put("spec_mode", mode)
            key = S.widget_key("vsi", tuple(float(x) for x in S.get("vsi")))
            lo, hi = st.slider("VSI range", 0.0, 1.0, key=key, step=0.01)
            S.put("vsi", (float(lo), float(hi)))
            if C.D.unsettled_note(ep):  # only stores with unsettled starts need the choice
                key = S.widget_key("scene")
                scene = st.radio("Scene at step 0", list(C.D.SCENES), key=key, horizontal=True,
                                 help="whether every free body was at rest when the policy started "
                                      "(settled start); unsettled episodes are left out of every cell")
                S.put("scene", scene)
        st.button("Clear filters", on_click=_clear, key="clear_filters")
    return S.filters()


def _task_key(t: str):
    head, _, tail = t.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (t, -1)


def _clear() -> None:
    for name in ("models", "suites", "tasks", "specs", "outcomes", "tags", "pfams"):
        S.set_widget(name, [])
    S.set_widget("spec_mode", "violated")
    S.set_widget("vsi", (0.0, 1.0))
    S.set_widget("scene", "all")


def perturbation_filter(c: C.Ctx):
    """The perturbation-family filter, drawn only for a store holding perturbed suites: its mask."""
    return perturbation_ui.family_mask(c, perturbation_ui.family_filter_ui(c))


def counts_ui(c: C.Ctx, mask) -> dict:
    counts = C.D.outcome_counts(c.v, mask)
    n = int(mask.sum())
    cols = st.columns(5)
    cols[0].metric("Matching episodes", f"{n:,}", help=f"of {len(mask):,} in the store")
    for col, o in zip(cols[1:], C.D.OUTCOMES):
        col.metric(o, f"{counts[o]:,}")
    note = C.D.unsettled_note(c.v.frame[mask])
    if note:
        st.warning(note, icon=":material/warning:")
    if n:
        C.show(charts.outcome_bar(counts))
    return counts


DEFAULT_HIDDEN = ("language", "n_active", "success", "safe", "note")


def columns_ui(columns: list[str]) -> list[str]:
    """The column picker: which table columns show (episode id always); kept for the session."""
    key = "w.ep_columns"
    if key not in st.session_state:
        st.session_state[key] = [x for x in columns if x not in DEFAULT_HIDDEN and x != "episode_id"]
    st.session_state[key] = [x for x in st.session_state[key] if x in columns]
    with st.popover("Columns", icon=":material/view_column:", width="stretch",
                    help="columns of the table and of the CSV (the episode id is always included)"):
        picked = st.multiselect("Columns shown", [x for x in columns if x != "episode_id"], key=key,
                                format_func=column_label)
    return ["episode_id", *picked]


def group_ui(c: C.Ctx, mask) -> None:
    key = S.widget_key("group")
    by = st.segmented_control("Group by", list(G.GROUPS), key=key,
                              help="counts and rates of the filtered episodes per group")
    S.put("group", by or "none")
    if by and by != "none":
        vocab.table(G.group_table(c.data, c.v, mask, by), hide_index=True, key="group_table",
                     column_config={k: st.column_config.NumberColumn(k, format="percent")
                                    for k in ("SR", "Safety", "SBU rate", "violation rate")}
                     | {"mean VSI": st.column_config.NumberColumn("mean VSI", format="%.2f")})


def csv_ui(c: C.Ctx, mask, sort: str, columns: list[str]) -> None:
    """Downloads every filtered episode (not only the rows shown), in the table's order, with the
    picked columns plus tags and note; the file is made only when the button is clicked."""
    data, v, ann = c.data, c.v, AN.current(c)
    mask = mask.copy()

    def make() -> bytes:
        table = C.D.episode_table(data, v, mask, sort=sort, limit=None)
        tags, notes = AN.A.annotation_columns(ann, table["episode_id"])
        table["tags"], table["note"] = tags, notes
        return G.episodes_csv(table, [*columns, *(x for x in ("tags", "note") if x not in columns)])

    st.download_button("Download CSV", make, file_name="episodes.csv",
                       mime="text/csv", icon=":material/download:", on_click="ignore", key="episodes_csv",
                       width="stretch",
                       help=f"all {int(mask.sum()):,} filtered episodes (not only the rows shown), in this order, with the "
                            "chosen columns plus tags and note; headers are the store's column names")


def render() -> None:
    c = C.ctx()
    st.title("Episodes")
    C.thresholds_banner(c)
    f = filters_ui(c)
    mask = C.D.filter_mask(c.data, c.v, f) & AN.tag_mask(c, S.get("tags") or []) & perturbation_filter(c)
    counts_ui(c, mask)
    if not mask.any():
        st.info("No episode matches these filters. Clear a filter to see more.")
        C.stop()
    group_ui(c, mask)
    row = st.columns([3, 1.1, 1.5], vertical_alignment="bottom")
    key = S.widget_key("sort")
    sort = row[0].selectbox("Sort by", list(C.D.SORTS), key=key)
    S.put("sort", sort)
    table = AN.with_annotations(c, C.D.episode_table(c.data, c.v, mask, sort=sort, limit=TABLE_LIMIT))
    n = int(mask.sum())
    with row[1]:
        shown = columns_ui(list(table.columns))
    with row[2]:
        csv_ui(c, mask, sort, shown)
    st.caption(f"Showing {len(table):,} of {n:,} matching episodes" + (" (narrow the filters to see the rest; "
                                                                      "the CSV holds all)" if n > len(table) else "")
               + ". Click a row's checkbox to open its detail; click a header to sort.")
    # model/suite/task first and pinned: at 1280 px the rest scrolls under them
    ev = vocab.table(
        table[[x for x in shown if x in table.columns]], key="ep_table",
        first=("model", "suite", "task_id", "outcome", "vsi", "worst_spec", "violating_step"),
        pinned=("model", "suite", "task_id"), formats={"violating_step": "%d"}, on_select="rerun",
        selection_mode="single-row", hide_index=True,
        height=min(38 + 35 * len(table), 560),
        column_config={
            "episode_id": st.column_config.TextColumn("episode", width="large"),
            "vsi": st.column_config.ProgressColumn("VSI", min_value=0.0, max_value=1.0, format="%.2f"),
            "scene": st.column_config.TextColumn("scene", help="⚠: the scene was not at rest at step 0"),
            "worst_spec": st.column_config.TextColumn("worst violation", help="the deepest violated spec"),
            "closest_call": st.column_config.TextColumn(
                "closest call", help="safe episodes: the spec nearest its threshold (not a violation)"),
            "violating_step": st.column_config.NumberColumn("violating step", format="%d"),
            "tags": st.column_config.TextColumn("tags", help="your tags (detail page), separated by ;"),
            "note": st.column_config.TextColumn("note", width="medium"),
            "task_id": "task", "n_active": "active specs", "n_steps": "steps"})
    convert_ahead.listed(c, table["episode_id"])  # the first rows' scenes converted before they are opened
    rows = ev.selection.rows if ev is not None else []
    if rows:
        r = table.iloc[rows[0]]
        step = None if r["violating_step"] != r["violating_step"] else int(r["violating_step"])
        st.session_state.pop("ep_table", None)
        C.go("detail", ep=r["episode_id"], step=step)


if __name__ == "__main__":
    render()
