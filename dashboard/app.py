"""SafeVLA-Bench dashboard: `safevla dashboard [STORE]`, or
`streamlit run dashboard/server.py -- --store STORE` (the ASGI app that serves this script and
starts a linked episode's scene open at the page request, dashboard/server.py). This script
also runs alone (`streamlit run dashboard/app.py -- --store STORE`, the AppTest tests), without
that head start.

The store comes from the sidebar (this session), else the link's `?store=`, else
`--store`, else $SAFEVLA_STORE, else the bundled demo store. The sidebar and links open
only the server's store and those listed with `--stores` (or $SAFEVLA_STORES); any
other path gets one neutral message that says nothing about it. Pages live in
`dashboard/views/` (not `pages/`, which Streamlit would auto-discover).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("MUJOCO_GL", "egl")

import streamlit as st  # noqa: E402
from streamlit import config as st_config  # noqa: E402

from dashboard import ahead  # noqa: E402
from dashboard import cached  # noqa: E402
from dashboard import common as C  # noqa: E402
from dashboard import links as L  # noqa: E402
from dashboard import state as S  # noqa: E402
from dashboard import stores  # noqa: E402
from dashboard.data import StoreProblem  # noqa: E402

HERE = Path(__file__).resolve().parent
# A local SVG icon: a ":material/...:" page icon makes the browser fetch its favicon from
# fonts.gstatic.com, a failed request on every page offline.
st.set_page_config(page_title="SafeVLA-Bench dashboard", page_icon=str(HERE / "static" / "icon.svg"), layout="wide")
# "viewer": no Deploy button or developer menu for the researchers using it; client options
# may be set from the script, so `streamlit run dashboard/app.py` gets it as `safevla dashboard` does
st.set_option("client.toolbarMode", "viewer")
# Streamlit runs a full garbage collection after every script run (runner.postScriptGC). On a
# 20k-episode store that is a pass over ~170k objects, 45 ms in-process and ~100 ms of every
# click in the browser (the run's end reaches the page only after it): filter 0.30 -> 0.20 s,
# what-if 0.30 -> 0.18 s without it, and the server's memory stays flat over 120 interactions
# either way (docs/benchmarks.md). Python's own collector still runs. A setting of the user's wins.
if not st_config.is_manually_set("runner.postScriptGC"):
    st_config.set_option("runner.postScriptGC", False)
# Streamlit's "magic" rewrites a page script's syntax tree on its first run in a process to draw
# bare expressions; the pages have none (tests/test_app_magic.py), and the rewrite was 0.15 s of
# the detail page's first run. A setting of the user's wins.
if not st_config.is_manually_set("runner.magicEnabled"):
    st_config.set_option("runner.magicEnabled", False)
ICONS = {"overview": ":material/insights:", "episodes": ":material/table_rows:", "detail": ":material/frame_inspect:",
         "whatif": ":material/tune:", "export": ":material/download:", "compare": ":material/compare:"}
# pages whose link parameters the page keeps itself (not in state.PAGE_PARAMS): name -> title
EXTRA_PAGES = {"compare": "Compare"}


def _load_other_store() -> None:
    path = (st.session_state.get("w.store_input") or "").strip()
    if path:
        st.session_state["s.store"] = path
        for name in ("s.ep", "s.step"):  # episodes of the old store mean nothing in the new one
            st.session_state.pop(name, None)
        for k in [k for k in st.session_state if str(k).startswith(("_url_loaded:", "w.")) and k != "w.store_input"]:
            del st.session_state[k]


def sidebar_store(box, path: str, origin: str) -> None:
    """The sidebar's store chooser, in `box` (a container at the sidebar's top)."""
    with box:
        with st.expander("Run store", expanded=False):
            st.caption(stores.shown_caption(path, origin))
            others = stores.allowed_stores()
            if len(others) > 1:
                st.caption("Stores this dashboard serves: " + ", ".join(f"`{p}`" for p in others))
            if "w.store_input" not in st.session_state:
                st.session_state["w.store_input"] = path
            st.text_input("Store directory", key="w.store_input",
                          help="A directory written by `safevla score ... --out STORE`.")
            st.button("Load store", on_click=_load_other_store, key="load_store", width="stretch")


def sidebar_about(box, data, c) -> None:
    """The store's size, its warnings and the what-if note, in `box`; and the history rule."""
    with box:
        n = len(data.episodes)
        n_models, n_suites = data.episodes["model"].nunique(), data.episodes["suite"].nunique()
        st.caption(f"{n:,} episode{'s' * (n != 1)} · {n_models} model{'s' * (n_models != 1)} · "
                   f"{n_suites} suite{'s' * (n_suites != 1)}" + (" · **synthetic**" if data.synthetic else ""))
        for w in data.warnings:
            (st.caption if w.startswith("Synthetic") else st.warning)(w)
        if c.overrides:
            st.caption(":material/tune: What-if thresholds active (see What-if).")
        L.history_ui()


def main() -> None:
    st.session_state["_run_start"] = time.perf_counter()
    path, origin = stores.chosen_store()
    # the app's name above the navigation (a sidebar heading would sit below it)
    st.logo(str(HERE / "static" / "logo.svg"), icon_image=str(HERE / "static" / "icon.svg"), size="large")
    store_box, about_box = st.sidebar.container(), st.sidebar.container()  # the sidebar's top
    if not stores.store_allowed(path):
        sidebar_store(store_box, path, origin)
        st.error(stores.NOT_AVAILABLE, icon=":material/block:")
        st.stop()
    try:
        data = stores.load_store(path)
    except StoreProblem as exc:
        sidebar_store(store_box, path, origin)
        st.error(f"**This run store cannot be shown.** {exc}", icon=":material/block:")
        if origin == "bundled demo store":
            st.info("The bundled demo store is not installed here. Point the dashboard at a store: "
                    "`safevla dashboard STORE`, or enter its directory under *Run store* in the sidebar.")
        else:
            st.info("Enter another store directory under *Run store* in the sidebar.")
        st.stop()
    default_path, _ = stores.server_default_store()
    store_param = path if os.path.abspath(path) != os.path.abspath(default_path) else None

    st.session_state.setdefault("_link_problems", []).extend(S.load_from_url(data))
    titles = {**C.PAGE_TITLES, **EXTRA_PAGES}
    order = [n for n in S.PAGES if n not in ("whatif", "export")] + list(EXTRA_PAGES) + \
        [n for n in S.PAGES if n in ("whatif", "export")]
    pages = {name: st.Page(str(HERE / "views" / f"{name}.py"), title=titles[name], icon=ICONS[name],
                           url_path=name, default=name == "overview") for name in order}
    pg = st.navigation(list(pages.values()))
    st.session_state["_nav"] = S.Nav(pages)
    page = next((n for n, p in pages.items() if p is pg), "overview")
    wanted = st.query_params.get("page")
    if not st.session_state.get("_deeplinked"):
        st.session_state["_deeplinked"] = True
        if wanted in pages and wanted != page:
            params = {k: st.query_params.get_all(k) for k in st.query_params.keys()}
            st.switch_page(pages[wanted], query_params=params)
    for p in st.session_state.pop("_link_problems", []):
        st.toast(f"Link: {p}", icon=":material/warning:")

    c = C.make_ctx(data, page, store_param)
    st.session_state["_ctx"] = c
    st.session_state["_switching"] = False
    st.session_state.pop(S.FIRST_PICTURE_ALONE, None)

    def draw_sidebar() -> None:
        sidebar_store(store_box, path, origin)
        sidebar_about(about_box, data, c)
    # the detail page's first run in a session may send its first picture alone
    # (`detail.first_picture_alone`): it draws the store chooser and summary itself unless so
    if page == "detail" and S.first_run_of_session():
        st.session_state[S.SIDEBAR_LATER] = draw_sidebar
    else:
        draw_sidebar()
    t0 = time.perf_counter()
    try:
        pg.run()
    finally:
        alone = st.session_state.get(S.FIRST_PICTURE_ALONE)
        if not alone:  # a page that ended before drawing them
            S.sidebar_now()
        st.session_state.pop(S.SIDEBAR_LATER, None)
        if not st.session_state.get("_switching"):
            C.sync_url(page, data, store_param=store_param)
            if not alone:
                with st.sidebar:  # after the page ran: the link holds what the page just chose
                    L.copy_link_ui(page, data, store_param=store_param)
            cached.prewarm_overview(st.session_state.get("_ctx", c))  # What-if moved: the Overview next
            cached.prewarm_bootstrap(c)  # a big store: the CI button's library, once per server
        # script time of this run (app + page), for benchmarks/bench_dashboard.py
        st.session_state.setdefault("_timings", []).append(
            (page, time.perf_counter() - st.session_state.get("_run_start", t0)))
        del st.session_state["_timings"][:-50]


def run() -> None:
    """`main()`, under cProfile when $SAFEVLA_PROFILE names a folder: one .prof per script run
    (how the benchmark's browser timings are broken down; docs/benchmarks.md)."""
    folder = os.environ.get("SAFEVLA_PROFILE")
    if not folder:
        with ahead.page_running():
            main()
        return
    import cProfile

    prof = cProfile.Profile()
    prof.enable()
    try:
        with ahead.page_running():
            main()
    finally:
        prof.disable()
        page = (st.session_state.get("_timings") or [("run", 0)])[-1][0]
        prof.dump_stats(os.path.join(folder, f"{time.time_ns()}-{page}.prof"))


run()
