"""Compare: the answer first (the Safety verdict of the chosen pair A/B in one sentence, the
other metrics' under it, a forest plot of every difference, then the methods;
`dashboard.compare_answer`), then the paired comparison of models on the same (suite, task,
init state, seed) keys (`scoring.stats.compare`), its tables filtered to the chosen pair: the
pair's 2x2 table of paired outcomes with exact McNemar, the tiers ranking, Kendall's tau
between the SR and Safety rankings with the rank flip, the unpaired keys; the discordant
episodes of a pair (A safe and B unsafe, or the reverse) and a side-by-side replay of both
episodes on one key, synced by one step slider, exportable as one PNG figure or one MP4
clip. Models that share no key get an unpaired comparison (`scoring.stats.compare_unpaired`),
labelled as such, instead of a dead end.

Link: /compare?models=A,B,C&a=A&b=B&metric=safety&key=SUITE/TASK/INIT/SEED&cstep=40
(`models` only when not all; `metric` only when not safety).
"""

from __future__ import annotations

import streamlit as st

from dashboard import cached
from dashboard import timeline_spec as TS
from dashboard import common as C
from dashboard import pair_media
from dashboard import perturbation_ui
from dashboard import state as S
from dashboard import vocab
from dashboard.compare_answer import answer_first, answer_ui, is_pair, methods_ui, unpaired_ui
from scoring.errors import SafeVLAError

PAGE = "compare"
TABLE_KEY = "cmp_table"
# link parameter -> canonical state name
LINK = {"models": "cmp_models", "a": "cmp_a", "b": "cmp_b", "metric": "cmp_metric", "key": "cmp_key",
        "cstep": "cmp_step"}


# ----------------------------------------------------------------------------- link

def _all_models(c: C.Ctx) -> list[str]:
    return sorted(c.data.episodes["model"].astype(str).unique())


def load_link(c: C.Ctx) -> None:
    """Once per session and store: the pair, metric, key and step from the link
    (validated against the store; the key against the pair's discordant keys later)."""
    marker = f"_cmp_url_loaded:{c.key}"
    if st.session_state.get(marker):
        return
    st.session_state[marker] = True
    qp = st.query_params
    known = set(_all_models(c))
    problems = []

    def first(name):
        vals = qp.get_all(name)
        return vals[0] if vals else None

    models = [x for v in qp.get_all("models") for x in v.split(",") if x]
    if models:
        bad = [m for m in models if m not in known]
        if bad:
            problems.append(f"models: ignored unknown model(s) {', '.join(bad)}")
        good = list(dict.fromkeys(m for m in models if m in known))
        if len(good) >= 2:
            S.put("cmp_models", good)
    for name in ("a", "b"):
        m = first(name)
        if m is not None:
            if m in known:
                S.put(LINK[name], m)
            else:
                problems.append(f"{name}: no model {m!r} in this store")
    metric = first("metric")
    if metric is not None:
        if metric in C.D.COMPARE_METRICS:
            S.put("cmp_metric", metric)
        else:
            problems.append(f"metric: expected one of {', '.join(C.D.COMPARE_METRICS)}, got {metric!r}")
    key = first("key")
    if key is not None:
        S.put("cmp_key", key)
        st.session_state["_cmp_link_key"] = key  # checked once the discordant keys are known
    step = first("cstep")
    if step is not None:
        try:
            S.put("cmp_step", max(0, int(step)))
        except ValueError:
            problems.append(f"cstep: expected an integer, got {step!r}")
    for name in LINK.values():
        st.session_state.pop(f"w.{name}", None)
    for p in problems:
        st.toast(f"Link: {p}", icon=":material/warning:")


def link_params(all_models: list[str]) -> dict:
    """The page's link parameters from the canonical state (only what differs from defaults)."""
    out = {}
    models = S.get("cmp_models") or []
    if models and list(models) != list(all_models):
        out["models"] = ",".join(models)
    for name in ("a", "b", "key"):
        v = S.get(LINK[name])
        if v:
            out[name] = str(v)
    if S.get("cmp_metric") not in (None, "safety"):
        out["metric"] = S.get("cmp_metric")
    if S.get("cmp_key") and S.get("cmp_step") is not None:
        out["cstep"] = str(int(S.get("cmp_step")))
    return out


def _stop(c: C.Ctx) -> None:
    """`common.stop` with this page's link parameters."""
    st.session_state[f"_params:{PAGE}"] = link_params(_all_models(c))
    C.sync_url(c.page, c.data, store_param=c.store_param)
    st.session_state["_switching"] = True
    st.stop()


# ----------------------------------------------------------------------------- widgets

def _select(label: str, name: str, options: list, default, **kw):
    """A selectbox on canonical state `name` (reset to `default` when its value left the options)."""
    key = f"w.{name}"
    cur = S.get(name)
    if cur not in options:
        cur = default
        S.put(name, cur)
    if st.session_state.get(key) not in options or key not in st.session_state:
        st.session_state[key] = cur
    value = st.selectbox(label, options, key=key, **kw)
    S.put(name, value)
    return value


def models_ui(c: C.Ctx) -> tuple[tuple[str, ...], str, str, str]:
    """Models (>= 2, default all), the pair A/B and the metric of the discordant list."""
    all_models = _all_models(c)
    with st.container(border=True):
        # the models on a row of their own, the pair and metric under them: in one row of four,
        # model names and the third chip were cut off at 1280 px
        key = "w.cmp_models"
        cur = [m for m in (S.get("cmp_models") or all_models) if m in all_models]
        if key not in st.session_state:
            st.session_state[key] = cur
        st.session_state[key] = [m for m in st.session_state[key] if m in all_models]
        models = st.multiselect("Models", all_models, key=key, placeholder="choose at least two models",
                                help="compared on the (suite, task, init state, seed) keys they all share")
        S.put("cmp_models", list(models))
        if len(models) < 2:
            st.info("Choose at least two models to compare.", icon=":material/compare:")
            _stop(c)
        cols = st.columns(3)
        with cols[0]:
            a = _select("Model A", "cmp_a", list(models), models[0])
        with cols[1]:
            others = [m for m in models if m != a]
            b = _select("Model B", "cmp_b", others, others[0])
        with cols[2]:
            metric = _select("Discordant on", "cmp_metric", list(C.D.COMPARE_METRICS), "safety",
                             format_func=C.D.COMPARE_LABELS.get,
                             help="the outcome on which A and B must disagree to be listed below")
    return tuple(models), a, b, metric


def summary_ui(cmp, tables: dict) -> None:
    agree = cmp.agreement.set_index("group")
    over = agree.loc["overall"] if "overall" in agree.index else agree.iloc[0]
    cols = st.columns(4)
    cols[0].metric("Paired keys", f"{len(cmp.pairing.keys):,}",
                   help=f"keys ({', '.join(cmp.pairing.key_columns)}) that every chosen model has")
    cols[1].metric("Unpaired keys", f"{len(cmp.unpaired):,}", help="keys missing for at least one model: "
                   "left out of every pair and listed below, never dropped silently")
    tau = over["tau"]
    cols[2].metric("Kendall tau (SR vs Safety)", "—" if tau != tau else f"{tau:.3f}",
                   help="rank agreement between the SR ranking and the Safety ranking, overall")
    cols[3].metric("Rank flips", f"{int(over['n_flips'])}",
                   help=f"pairs that SR and Safety order differently (overall); "
                        f"{int(over['n_significant_flips'])} with both differences significant (Holm)")
    for note in cmp.notes:
        st.caption(f":material/info: {note}")


def tables_ui(c: C.Ctx, cmp, tables: dict, a: str, b: str) -> None:
    """The tables of the chosen pair only (the downloads keep every pair of the chosen models)."""
    from scoring.report.tables import to_markdown

    groups = list(cmp.groups)
    group = _select("Group", "cmp_group", groups, groups[0],
                    help="overall pools the keys of every suite; or one suite")
    tabs = st.tabs(["Paired tests", "Ranking and tiers", "Rank agreement", f"Unpaired ({len(cmp.unpaired)})"])
    with tabs[0]:
        caption, df = tables["compare_pairs"]
        st.caption(caption + " b = only A has the outcome, c = only B: the discordant counts McNemar tests."
                   " A - B is green where it favours A, red where it favours B.")
        show = answer_first(df[(df["group"] == group) & is_pair(df["model A"], df["model B"], a, b)]
                             .drop(columns=["group"]))
        # counts are "—" for VSI: show mixed columns as text (Arrow needs one type per column)
        show = show.astype({col: str for col in show.columns if show[col].dtype == object})
        vocab.table(show, hide_index=True, width="stretch", key="cmp_pairs", pinned=("metric",),
                    row_delta=("A - B", "metric"),
                    first=("metric", "model A", "model B", "A - B", "95% CI", "p", "p (Holm)", "significant"))
        st.download_button("Markdown", f"{caption}\n\n{to_markdown(df)}\n", file_name="compare_pairs.md",
                           mime="text/markdown", on_click="ignore", key="cmp_pairs_md")
    with tabs[1]:
        caption, df = tables["compare_ranking"]
        st.caption(caption)
        vocab.table(df[(df["group"] == group) & df["model"].isin([a, b])].drop(columns=["group"]),
                    hide_index=True, width="stretch", key="cmp_ranking")
    with tabs[2]:
        caption, df = tables["compare_rank_agreement"]
        st.caption(caption)
        vocab.table(df, hide_index=True, width="stretch", key="cmp_agreement")
        caption, flips = tables["compare_flips"]
        flips = flips[is_pair(flips["ahead by SR"], flips["ahead by Safety"], a, b)]
        if len(flips):
            st.caption(caption)
            vocab.table(flips, hide_index=True, width="stretch", key="cmp_flips",
                        first=("ahead by SR", "ahead by Safety", "p SR (Holm)", "p Safety (Holm)", "both significant"))
        else:
            st.caption(f"No rank flip between {a} and {b}: SR and Safety order them the same way.")
    with tabs[3]:
        if len(cmp.unpaired):
            vocab.table(cmp.unpaired, hide_index=True, width="stretch", key="cmp_unpaired")
        else:
            st.caption("Every key is shared by all chosen models.")


def discordant_ui(c: C.Ctx, d, a: str, b: str, metric: str, key_columns) -> str | None:
    """The discordant keys of the pair (table; ticking a row picks its key) and the key chooser."""
    label = C.D.COMPARE_LABELS[metric]
    n_a = int((d["which"] == f"{a} only").sum())
    st.subheader(f"Discordant episodes: {label}")
    st.caption(f"Same init state and seed, different {label.lower()} outcome: {len(d)} key(s); "
               f"{a} only: {n_a}, {b} only: {len(d) - n_a}. Tick a row (or choose its key below) to replay "
               "both episodes side by side.")
    options = list(d["key"])
    # a ticked row (selection state of the last run) picks its key
    sel = st.session_state.get(TABLE_KEY)
    rows = (sel.get("selection", {}).get("rows") if hasattr(sel, "get") else None) or []
    if rows and rows[0] < len(options):
        S.set_widget("cmp_key", options[rows[0]])
        S.put("cmp_step", None)
        st.session_state.pop("w.cmp_step", None)
        st.session_state.pop(TABLE_KEY, None)
    linked = st.session_state.pop("_cmp_link_key", None)
    if linked is not None and linked not in options:
        st.toast(f"Link: key {linked!r} is not a discordant key of {a} vs {b} on {label}",
                 icon=":material/warning:")
    cur = S.get("cmp_key")
    if cur not in options:
        cur = None
        S.put("cmp_key", None)
    if len(d):
        show = d[["key", "which", "outcome_a", "vsi_a", "violating_step_a", "outcome_b", "vsi_b",
                  "violating_step_b"]].rename(columns={
                      "which": "outcome held by", "outcome_a": f"A: {a}", "vsi_a": "A: VSI",
                      "violating_step_a": "A: violating step", "outcome_b": f"B: {b}", "vsi_b": "B: VSI",
                      "violating_step_b": "B: violating step"})
        vocab.table(show, key=TABLE_KEY, on_select="rerun", selection_mode="single-row", hide_index=True,
                    width="stretch", height=min(38 + 35 * len(show), 420),
                    column_config={"A: VSI": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0,
                                                                             format="%.2f"),
                                   "B: VSI": st.column_config.ProgressColumn(min_value=0.0, max_value=1.0,
                                                                             format="%.2f"),
                                   "A: violating step": st.column_config.NumberColumn(format="%d"),
                                   "B: violating step": st.column_config.NumberColumn(format="%d")})
    else:
        st.info(f"{a} and {b} agree on {label.lower()} on every paired key: nothing to replay.")
        return None
    key = "w.cmp_key"
    if st.session_state.get(key) != cur:
        st.session_state[key] = cur
    which = dict(zip(d["key"], d["which"]))
    st.selectbox(f"Key ({'/'.join(key_columns)})", options, key=key, index=None,
                 placeholder="choose a discordant key", format_func=lambda k: f"{k}   ·   {which[k]}",
                 on_change=_key_changed)
    return cur


def _key_changed() -> None:
    S.put("cmp_key", st.session_state.get("w.cmp_key"))
    S.put("cmp_step", None)
    st.session_state.pop("w.cmp_step", None)
    C.forget_render("cmp_clip_go")


def _jump(step: int) -> None:
    S.set_widget("cmp_step", int(step))


def _side(row, s: str) -> dict:
    def num(x):
        return None if x is None or x != x else int(x)

    return {"model": None, "i": int(row[f"row_{s}"]), "eid": row[f"episode_id_{s}"], "outcome": row[f"outcome_{s}"],
            "vsi": float(row[f"vsi_{s}"]), "vstep": num(row[f"violating_step_{s}"]),
            "n": max(1, int(row[f"n_steps_{s}"])) if row[f"n_steps_{s}"] == row[f"n_steps_{s}"] else 1,
            "worst": row.get(f"worst_spec_{s}")}


def _caption(side: dict, step: int) -> list[str]:
    at = min(step, side["n"] - 1)
    first = f"{side['model']} · {side['outcome']} · VSI {side['vsi']:.2f}"
    second = f"step {at}" + (f" (ended; step {step} asked)" if at < step else "") + \
        ("" if side["vstep"] is None else f" · violating step {side['vstep']} ({side['worst']})")
    return [first, second]


def replay_ui(c: C.Ctx, d, key: str, a: str, b: str) -> None:
    st.subheader("Side-by-side replay")
    row = d[d["key"] == key].iloc[0]
    sides = [dict(_side(row, "a"), model=a), dict(_side(row, "b"), model=b)]
    n = max(s["n"] for s in sides)
    st.caption(f"Key `{key}` · both episodes start from the same init state and seed. One slider moves both; "
               "an episode that has ended holds its last frame. Red border: the violating frame.")
    step = st.session_state.get("w.cmp_step")
    if step is None:
        step = S.get("cmp_step")
    if step is None:
        vs = [s["vstep"] for s in sides if s["vstep"] is not None]
        step = min(vs) if vs else 0
    step = int(min(max(step, 0), n - 1))
    st.session_state["w.cmp_step"] = step
    S.put("cmp_step", step)
    ctl = st.columns([4, 1.2, 1.2])
    with ctl[0]:
        step = int(st.slider("Step (both episodes)", 0, max(n - 1, 1), key="w.cmp_step"))
        S.put("cmp_step", step)
    for col, s, tag in zip(ctl[1:], sides, ("a", "b")):
        col.button(f"{tag.upper()}'s violation", key=f"cmp_jump_{tag}", disabled=s["vstep"] is None,
                   on_click=_jump, args=(s["vstep"] or 0,), icon=":material/skip_next:", width="stretch",
                   help=f"move both episodes to {s['model']}'s violating frame" if s["vstep"] is not None
                   else f"{s['model']} has no violation here")

    ok, why = cached.replay_status()
    cols = st.columns(2)
    missing = False
    for col, s in zip(cols, sides):
        with col:
            colour = TS.OUTCOME_COLORS.get(s["outcome"], "#666")
            st.markdown(f"**{s['model']}** &nbsp; <span style='background:{colour};color:white;padding:2px 8px;"
                        f"border-radius:6px'>{s['outcome']}</span> &nbsp; <code>{s['eid']}</code>",
                        unsafe_allow_html=True)
            if c.data.missing_trajectory[s["i"]]:
                st.error(f"The trajectory of {s['eid']!r} is missing: no replay for this side.")
                missing = True
                continue
            if not ok:
                st.info(why, icon=":material/movie:")
                continue
            at = min(step, s["n"] - 1)
            try:
                with st.spinner(f"Rendering {s['model']} at step {at} …"):
                    img = cached.frame_jpeg(c.data, c.key, s["i"], at, c.items, True)
            except Exception as exc:  # noqa: BLE001 - RecordError (no replay state), RenderError, StoreProblem
                st.info(f"No replay for this episode: {exc}", icon=":material/movie:")
                missing = True
                continue
            st.image(img, caption=" · ".join(_caption(s, step)), width="stretch")
    if ok and not missing:
        export_ui(c, sides, key, step)


def export_ui(c: C.Ctx, sides: list[dict], key: str, step: int) -> None:
    rows = (sides[0]["i"], sides[1]["i"])
    steps = tuple(min(step, s["n"] - 1) for s in sides)
    name = C.file_safe(f"compare_{sides[0]['model']}_vs_{sides[1]['model']}_{key}")
    caps = [_caption(s, step) for s in sides]
    title = f"{sides[0]['model']} vs {sides[1]['model']} · {key} · step {step}"
    cols = st.columns([1, 1, 2])
    cols[0].download_button(
        "Download figure (PNG)", data=lambda: pair_media.pair_figure(c.data, c.key, rows, steps, c.items, caps, title=title),
        file_name=f"{name}_step{step}.png", mime="image/png", on_click="ignore", key="cmp_fig",
        icon=":material/download:",
        help="both frames at this step side by side, with captions", width="stretch")
    labels = [f"{s['model']} · {s['outcome']}" for s in sides]
    clip = C.render_button_ui(
        "Render side-by-side clip", key="cmp_clip_go", tag=(c.key, rows, c.items), what="the clip",
        where=cols[1], icon=":material/play_circle:", width="stretch",
        render=lambda progress: pair_media.pair_clip(c.data, c.key, rows, c.items, labels, progress=lambda done, total: progress(
            done / max(total, 1), f"Rendering step {done}/{total} …")))
    if clip is not None:
        st.video(clip, format="video/mp4", autoplay=True, muted=True, loop=True)
        cols[2].download_button("Download clip (MP4)", clip, file_name=f"{name}.mp4", mime="video/mp4",
                                on_click="ignore", key="cmp_clip_dl")


def render() -> None:
    c = C.ctx()
    st.title("Compare models")
    C.thresholds_banner(c)
    load_link(c)
    models, a, b, metric = models_ui(c)
    try:
        with st.spinner("Comparing the models …"):
            cmp = cached.comparison(c.data, c.key, c.items, models)
            tables = cached.comparison_tables(c.data, c.key, c.items, models)
    except SafeVLAError as exc:
        unpaired_ui(c, models, a, b, str(exc))
        perturbation_ui.deltas_ui(c, models=(a, b))
        _stop(c)
    answer_ui(cmp.pairs, a, b, groups=cmp.groups)
    methods_ui(paired=True)
    summary_ui(cmp, tables)
    tables_ui(c, cmp, tables, a, b)
    perturbation_ui.deltas_ui(c, models=(a, b))
    d = cached.discordant(c.data, c.key, c.items, models, a, b, metric)
    key = discordant_ui(c, d, a, b, metric, cmp.pairing.key_columns)
    if key is None:
        _stop(c)
    replay_ui(c, d, key, a, b)
    st.session_state[f"_params:{PAGE}"] = link_params(_all_models(c))


if __name__ == "__main__":
    render()
