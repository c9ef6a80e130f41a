"""Shared page plumbing: the store in use, cached computations, the run context, guards.

Heavy objects (the store's frames, `WhatIf`, re-scored verdicts, records) are kept with
`st.cache_resource` (no pickling or copying; never mutated); small derived tables too.
Cached functions take the `StoreData` as an unhashed `_data` argument plus its `key`
(path and file stamps), so a re-scored store is reloaded.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pandas as pd
import streamlit as st

from dashboard import data as D
from dashboard import state as S

ROOT = Path(__file__).resolve().parent.parent
DEMO_STORE = ROOT / "assets" / "demo" / "store"
ENV_STORE = "SAFEVLA_STORE"
PAGE_TITLES = {"overview": "Overview", "episodes": "Episodes", "detail": "Episode detail", "whatif": "What-if",
               "export": "Export"}


# ----------------------------------------------------------------------------- store loading

@st.cache_resource(show_spinner=False)
def _store_cache() -> tuple[OrderedDict, threading.Lock]:
    return OrderedDict(), threading.Lock()


def load_store(path: str) -> D.StoreData:
    """The store at `path`, loaded once per version of its files (with a progress bar)."""
    cache, lock = _store_cache()
    key = D.store_stamp(path)
    with lock:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
            return hit
    bar = st.progress(0.0, text=f"Loading run store {path} …")
    try:
        bar.progress(0.2, text=f"Reading {path}/episodes.parquet and spec_results.parquet …")
        data = D.open_store(path)
        bar.progress(1.0, text="Loaded.")
    finally:
        bar.empty()
    with lock:
        cache[key] = data
        while len(cache) > 3:
            cache.popitem(last=False)
    return data


def server_default_store() -> tuple[str, str]:
    """(path, where it came from): `--store` after `--`, else $SAFEVLA_STORE, else the demo store."""
    import argparse
    import sys

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--store", default=None)
    args, _ = p.parse_known_args(sys.argv[1:])
    if args.store:
        return args.store, "--store"
    if os.environ.get(ENV_STORE):
        return os.environ[ENV_STORE], f"${ENV_STORE}"
    return str(DEMO_STORE), "bundled demo store"


def chosen_store() -> tuple[str, str]:
    """The session's store: chosen in the sidebar, else the URL's `store`, else the server default."""
    picked = st.session_state.get("s.store")
    if picked:
        return picked, "chosen in the sidebar"
    url = st.query_params.get("store")
    if url:
        return url, "from the link"
    return server_default_store()


# ----------------------------------------------------------------------------- cached computations

def _items(overrides) -> tuple:
    return tuple(sorted((k, float(v)) for k, v in overrides.items()))


@st.cache_resource(show_spinner=False, max_entries=24)
def verdicts(_data: D.StoreData, key: str, items: tuple) -> D.Verdicts:
    return D.verdicts(_data, dict(items))


@st.cache_resource(show_spinner=False, max_entries=24)
def overview_tables(_data: D.StoreData, key: str, items: tuple) -> dict:
    v = verdicts(_data, key, items)
    return {"agg": D.cell_aggregates(v), "rates": D.cell_spec_rates(_data, v),
            "comp": D.cell_composition(_data, v), "top": D.top_sbu(_data, v, 10)}


@st.cache_resource(show_spinner=False, max_entries=8)
def composition_table(_data: D.StoreData, key: str, items: tuple) -> pd.DataFrame:
    from scoring.tables import composition_table as build
    v = verdicts(_data, key, items)
    return build(v.frame, D.spec_results_under(_data, v), registry=_data.registry)


@st.cache_resource(show_spinner=False, max_entries=8)
def main_table(_data: D.StoreData, key: str, items: tuple, ci: bool) -> pd.DataFrame:
    from scoring.tables import main_table as build
    return build(verdicts(_data, key, items).frame, ci=ci)


@st.cache_resource(show_spinner=False, max_entries=32)
def sensitivity(_data: D.StoreData, key: str, knob: str) -> pd.DataFrame:
    """The knob's sweep with every other threshold at its default (computed once per store)."""
    return D.sensitivity_curve(_data, D.KNOB_BY_NAME[knob])


@st.cache_resource(show_spinner=False, max_entries=8)
def base_aggregates(_data: D.StoreData, key: str) -> dict:
    return D.base_aggregates(verdicts(_data, key, ()))


@st.cache_resource(show_spinner=False, max_entries=8)
def record(path: str, stamp: float):
    from scoring.io import load_record
    return load_record(path)


@st.cache_resource(show_spinner=False, max_entries=32)
def traces(_data: D.StoreData, key: str, i: int, items: tuple) -> pd.DataFrame:
    rec = episode_record(_data, i)
    fams = [f for j, f in enumerate(_data.families) if _data.active[i, j]]
    return D.robustness_traces(rec, _data.registry, verdicts(_data, key, items).thresholds, fams)


def episode_record(data: D.StoreData, i: int):
    path = data.trajectory_path(i)
    if path is None or not path.is_file():
        raise D.StoreProblem(f"the trajectory of episode {data.episodes['episode_id'].iat[i]!r} is missing "
                             f"(expected {path}); robustness over time and replay need it")
    return record(str(path), path.stat().st_mtime)


@st.cache_resource(show_spinner=False)
def render_service():
    from dashboard.replay_bridge import RenderService
    return RenderService()


@st.cache_resource(show_spinner=False)
def replay_status() -> tuple[bool, str]:
    from dashboard.replay_bridge import available
    return available()


@st.cache_resource(show_spinner=False)
def _prewarmed() -> set:
    return set()


def prewarm_replays(c: "Ctx", n: int = 6) -> None:
    """Once per store: in the background, open the replay of the worst SBU episode and
    compile the scenes of the next few, so the first frame a user asks for is quick."""
    done = _prewarmed()
    if c.key in done or os.environ.get("SAFEVLA_NO_PREWARM"):
        return
    done.add(c.key)
    top = overview_tables(c.data, c.key, c.items)["top"]
    jobs = []
    for eid in top["episode_id"].head(n):
        i = c.data.index_of(eid)
        path = c.data.trajectory_path(i) if i is not None else None
        if path is not None and not c.data.missing_trajectory[i]:
            jobs.append((f"{c.key}#{i}", str(path)))
    if jobs:
        render_service().prewarm_episodes(jobs)


@st.cache_data(show_spinner=False, max_entries=400)
def frame_jpeg(_data: D.StoreData, key: str, i: int, step: int, items: tuple, highlight: bool) -> bytes:
    from dashboard.replay_bridge import jpeg
    rec = episode_record(_data, i)
    img = render_service().frame(f"{key}#{i}", rec, step, violations(_data, key, i, items), highlight=highlight)
    return jpeg(img)


@st.cache_resource(show_spinner=False, max_entries=32)
def violations(_data: D.StoreData, key: str, i: int, items: tuple):
    from dashboard.replay_bridge import build_violations
    v = verdicts(_data, key, items)
    rows = D.episode_specs(_data, v, i)
    bad = rows[rows["violated"] & ~rows["report_only"].astype(bool)].copy()
    if bad.empty:
        return ()
    worst = v.frame["worst_spec"].iat[i]
    bad["_w"] = bad["family"] != worst
    bad = bad.sort_values(["_w", "rho"])
    return build_violations(episode_record(_data, i), bad.to_dict("records"))


# ----------------------------------------------------------------------------- run context

@dataclasses.dataclass
class Ctx:
    """What every page needs: the store, the current thresholds and the verdicts under them."""

    data: D.StoreData
    knobs: dict
    overrides: dict
    items: tuple
    v: D.Verdicts
    store_param: str | None
    page: str

    @property
    def key(self) -> str:
        return self.data.key


def make_ctx(data: D.StoreData, page: str, store_param: str | None) -> Ctx:
    knobs = S.knob_values(data)
    overrides = D.knob_overrides(data.registry, knobs)
    items = _items(overrides)
    return Ctx(data=data, knobs=knobs, overrides=overrides, items=items, v=verdicts(data, data.key, items),
               store_param=store_param, page=page)


def ctx() -> Ctx:
    c = st.session_state.get("_ctx")
    if c is None:
        st.error("The dashboard context is missing: start the app with `safevla dashboard` "
                 "(or `streamlit run dashboard/app.py`).")
        st.stop()
    return c


def stop() -> None:
    """A page guard's `st.stop()` that still writes the view into the address bar first."""
    c = st.session_state.get("_ctx")
    if c is not None:
        S.sync_url(c.page, c.data, store_param=c.store_param)
    st.session_state["_switching"] = True  # nothing left for app.py to sync
    st.stop()


def go(page: str, **state) -> None:
    c = ctx()
    S.go(page, c.data, store_param=c.store_param, **state)


def thresholds_banner(c: Ctx) -> None:
    """Says when verdicts are re-scored under what-if thresholds, with a reset."""
    if not c.overrides:
        return
    defaults = D.knob_defaults(c.data.registry)
    moved = [f"{k.label} {c.knobs[k.name]:g} {k.unit}" for k in D.KNOBS
             if k.name in c.knobs and abs(c.knobs[k.name] - defaults.get(k.name, c.knobs[k.name])) > 1e-12]
    cols = st.columns([5, 1])
    cols[0].info("What-if thresholds in effect: " + ", ".join(moved) + ". Verdicts on this page are re-scored.",
                 icon=":material/tune:")
    cols[1].button("Reset thresholds", key=f"reset_thr_{c.page}", on_click=reset_knobs, args=(c.data,))


def reset_knobs(data: D.StoreData) -> None:
    for name, value in D.knob_defaults(data.registry).items():
        S.set_widget(f"knob.{name}", value)
    st.session_state.pop("w.preset", None)


def show(chart, **kw):
    """`st.altair_chart` at the chart's full width and the height its decorations need."""
    import altair as alt

    from dashboard.charts import display_height
    # facets cannot stretch (Vega-Lite sizes each cell): show them at their own width
    kw.setdefault("width", "content" if isinstance(chart, alt.FacetChart) else "stretch")
    return st.altair_chart(chart, height=display_height(chart) or "content", **kw)


def pct(x) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f}%"
