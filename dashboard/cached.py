"""The pages' cached computations over a store: re-scored verdicts, tables, charts, records,
replay frames and the render service, paired comparisons.

Heavy objects (the store's frames, `WhatIf`, re-scored verdicts, records) are kept with
`st.cache_resource` (no pickling or copying; never mutated); small derived tables too.
Cached functions take the `StoreData` as an unhashed `_data` argument plus its `key`
(path and file stamps), so a re-scored store is reloaded.
"""

from __future__ import annotations

import importlib
import logging
import os
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import streamlit as st

from dashboard import data as D
from dashboard.data.detail import CHART_POINTS

BOOTSTRAP_AUTO_MAX = 5000  # above this many episodes, VSI bootstrap CIs wait for a click (Overview, Export)


# ----------------------------------------------------------------------------- cached computations

def override_items(overrides) -> tuple:
    return tuple(sorted((k, float(v)) for k, v in overrides.items()))


@st.cache_resource(show_spinner=False, max_entries=24)
def verdicts(_data: D.StoreData, key: str, items: tuple) -> D.Verdicts:
    return D.verdicts(_data, dict(items))


@st.cache_resource(show_spinner=False, max_entries=24)
def overview_tables(_data: D.StoreData, key: str, items: tuple) -> dict:
    v = verdicts(_data, key, items)
    return {"agg": D.cell_aggregates(v), "rates": D.cell_spec_rates(_data, v),
            "comp": D.cell_composition(_data, v), "top": D.top_sbu(_data, v, 10)}


def unvalidated(chart):
    """`chart`, drawn without Altair's jsonschema validation of the whole spec.

    Streamlit calls `chart.to_dict()` on every script run, and Altair validates the spec
    each time: ~80 ms a chart here, ~0.25 s for the Overview's three, on every threshold
    change. The builders' specs are validated by tests/test_dashboard_charts.py (plain
    `to_dict()`), so the dashboard skips it; `to_dict` still runs Streamlit's data
    transformer (it fills the Arrow datasets).
    """
    import functools

    object.__setattr__(chart, "to_dict", functools.partial(type(chart).to_dict, chart, validate=False))
    return chart


def on_canvas(chart):
    """`chart` drawn by Vega on a canvas instead of SVG (Streamlit's `usermeta.embedOptions`):
    the Overview's charts as SVG are ~5,000 DOM nodes, which the browser took 1-2 s to lay
    out after each run on this machine; a canvas is one node. Tooltips work the same."""
    meta = getattr(chart, "usermeta", None)
    meta = meta.to_dict() if hasattr(meta, "to_dict") else meta
    meta = meta if isinstance(meta, dict) else {}
    chart["usermeta"] = {**meta, "embedOptions": {**meta.get("embedOptions", {}), "renderer": "canvas"}}
    return chart


@st.cache_resource(show_spinner=False, max_entries=24)
def overview_charts(_data: D.StoreData, key: str, items: tuple) -> dict:
    """The Overview's three charts under one threshold setting, built once."""
    from dashboard import charts
    from scoring.report.paper_figure import sr_safety_scatter

    tabs = overview_tables(_data, key, items)
    labels = {f: _data.label(f) for f in _data.families}
    out = {"scatter": sr_safety_scatter(tabs["agg"]),
           "heatmap": charts.violation_heatmap(tabs["rates"], labels=labels)}
    if not tabs["comp"].empty:
        out["composition"] = charts.composition_bars(tabs["comp"], tabs["agg"], labels=labels, colors=_data.colors())
    return {name: unvalidated(on_canvas(chart)) for name, chart in out.items()}


@st.cache_resource(show_spinner=False, max_entries=64)
def sensitivity_chart(_data: D.StoreData, key: str, knob: str, current: float):
    """The What-if sensitivity chart of `knob` with its rule at `current`, built once."""
    from dashboard import charts

    k = D.KNOB_BY_NAME[knob]
    return unvalidated(on_canvas(charts.sensitivity_chart(sensitivity(_data, key, knob), current=current,
                                                          default=D.knob_defaults(_data.registry)[knob],
                                                          label=k.label, unit=k.unit)))


@st.cache_resource(show_spinner=False, max_entries=8)
def composition_table(_data: D.StoreData, key: str, items: tuple) -> pd.DataFrame:
    from scoring.report.tables import composition_table as build
    v = verdicts(_data, key, items)
    return build(D.settled_frame(v), D.spec_results_under(_data, v), registry=_data.registry)


@st.cache_resource(show_spinner=False, max_entries=8)
def main_table(_data: D.StoreData, key: str, items: tuple, ci: bool) -> pd.DataFrame:
    from scoring.report.tables import main_table as build
    return build(D.settled_frame(verdicts(_data, key, items)), ci=ci)


@st.cache_resource(show_spinner=False, max_entries=32)
def sensitivity(_data: D.StoreData, key: str, knob: str) -> pd.DataFrame:
    """The knob's sweep with every other threshold at its default (computed once per store)."""
    return D.sensitivity_curve(_data, D.KNOB_BY_NAME[knob])


@st.cache_resource(show_spinner=False, max_entries=8)
def base_aggregates(_data: D.StoreData, key: str) -> dict:
    return D.base_aggregates(verdicts(_data, key, ()))


@st.cache_resource(show_spinner=False, max_entries=8)
def record(path: str, stamp: float):
    from scoring.records.io import load_record
    return load_record(path)


@st.cache_resource(show_spinner=False, max_entries=32)
def traces(_data: D.StoreData, key: str, i: int, items: tuple) -> pd.DataFrame:
    rec = episode_record(_data, i)
    fams = [f for j, f in enumerate(_data.families) if _data.active[i, j]]
    tr = D.robustness_traces(rec, _data.registry, verdicts(_data, key, items).thresholds, fams,
                             force_sampling=D.scored_option(_data, i), max_points=CHART_POINTS)
    # raw plots read in the display units of the spec table and the red line (margin is unitless)
    return D.in_display_units(tr, ("value", "threshold"))


def episode_record(data: D.StoreData, i: int):
    """The episode's record; StoreProblem when it is missing or lies outside the store and its archive."""
    path = data.trajectory_path(i)
    if path is None or not path.is_file():
        raise D.StoreProblem(f"the trajectory of episode {data.episodes['episode_id'].iat[i]!r} is missing "
                             f"(expected {path}); robustness over time and replay need it")
    return record(str(path), path.stat().st_mtime)


def replay_record(data: D.StoreData, i: int):
    """`episode_record` for rendering: also StoreProblem when the MJCF file it names lies
    outside the store and its archive (its traces need no model file and stay available)."""
    rec = episode_record(data, i)
    D.check_mjcf_path(data, rec)
    return rec


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


def open_replay(c, eid: str | None) -> None:
    """Starts getting episode `eid`'s replay ready the moment a page knows the user chose it
    (a row click, the picker, a link), so it is ready while the page switches and the detail
    page's script runs: its web scene converted (`open_episode_replay`), or, for a session
    whose browser has no WebGL, its replayer opened on the render thread for the server frames.
    Nobody waits for it. Once per chosen episode and session, not on every rerun of its page.
    `c`: the run context (`dashboard.common.Ctx`; not imported here, common imports this module)."""
    if eid is None or st.session_state.get("_replay_opened") == (c.key, eid):
        return
    st.session_state["_replay_opened"] = (c.key, eid)
    from dashboard.web_files import uses_frames

    if not uses_frames():
        open_episode_replay(c.data, eid, c.items)
        return
    if st.session_state.get("w.camera") == "wrist" or not replay_status()[0]:
        return  # the wrist view: the player opens that one
    i = c.data.index_of(eid)
    try:
        rec = replay_record(c.data, i) if i is not None and not c.data.missing_trajectory[i] else None
    except Exception:  # noqa: BLE001 - a missing or refused file: the detail page says why
        return
    if rec is not None and rec.replay is not None:
        render_service().prewarm(f"{c.data.key}#{i}", rec)


_SCENE_PREP = ThreadPoolExecutor(max_workers=1, thread_name_prefix="safevla-web-scene")


def open_episode_replay(data: D.StoreData, eid: str, items: tuple = ()) -> bool:
    """Queues, on a worker thread, the conversion of episode `eid`'s web scene (the one the
    browser draws, `dashboard.web_files.prepare_scene`), then its poses with the violations
    its page marks under the thresholds `items` (`prepare_poses`); whether it was queued (not:
    replay unavailable, an unknown, missing or refused episode, a record without replay state).
    Needs no page run: `open_replay` calls it, and so does the server when a browser asks for a
    detail page (dashboard/link_open.py, the middleware of dashboard/server.py), with the
    default thresholds. The page's own `web_files` then finds both made, or waits for them."""
    if not replay_status()[0]:
        return False
    i = data.index_of(eid)
    if i is None or data.missing_trajectory[i]:
        return False
    try:
        rec = replay_record(data, i)
    except Exception:  # noqa: BLE001 - a missing or refused file: the detail page says why
        return False
    if rec.replay is None:
        return False
    from dashboard.web_files import prepare_poses, prepare_scene

    def poses_ahead(record) -> bool:
        try:
            marked = violations(data, data.key, i, items)
        except Exception:  # noqa: BLE001 - the page computes (and reports) them itself
            return False
        return prepare_poses(record, marked)

    _SCENE_PREP.submit(prepare_scene, rec)
    _SCENE_PREP.submit(poses_ahead, rec)
    return True


@st.cache_resource(show_spinner=False)
def _overview_warmer() -> tuple[ThreadPoolExecutor, dict]:
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="overview-warm"), {}


def prewarm_bootstrap(c) -> None:
    """Once per server, after a page of a store too big for automatic VSI bootstrap CIs is
    drawn: import scipy.stats in the background (0.5 s; `bootstrap_ci` takes its percentiles),
    so the Overview's "Compute VSI bootstrap CIs" click does not pay for it (1.2 s -> 0.6 s
    on 20,000 episodes, docs/benchmarks.md). `c`: the run context."""
    done = _prewarmed()
    if "scipy.stats" in done or len(c.data.episodes) <= BOOTSTRAP_AUTO_MAX or os.environ.get("SAFEVLA_NO_PREWARM"):
        return
    done.add("scipy.stats")
    pool, _ = _overview_warmer()
    pool.submit(importlib.import_module, "scipy.stats")


def prewarm_overview(c) -> None:
    """After a What-if run under new thresholds: compute the Overview of that setting in the
    background (tables, charts, main table), so opening the Overview next finds it cached.
    `c`: the run context (`dashboard.common.Ctx`).

    One worker; a setting superseded by a newer slider move before its turn is skipped.
    A page that asks for the same setting meanwhile waits for this computation (Streamlit's
    cache computes each key once) instead of repeating it.
    """
    if c.page != "whatif" or not c.items or os.environ.get("SAFEVLA_NO_PREWARM"):
        return
    pool, latest = _overview_warmer()
    latest["want"] = (c.key, c.items)

    def job(data: D.StoreData, key: str, items: tuple) -> None:
        if latest.get("want") != (key, items):
            return
        try:
            overview_charts(data, key, items)  # and overview_tables
            main_table(data, key, items, False)
        except Exception:  # noqa: BLE001 - the page computes (and reports) it itself when opened
            logging.getLogger(__name__).exception("warming the Overview failed")

    pool.submit(job, c.data, c.key, c.items)


@st.cache_data(show_spinner=False, max_entries=400)
def frame_jpeg(_data: D.StoreData, key: str, i: int, step: int, items: tuple, highlight: bool) -> bytes:
    from dashboard.replay_bridge import jpeg
    rec = replay_record(_data, i)
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
    return build_violations(episode_record(_data, i), bad.to_dict("records"), force_sampling=D.scored_option(_data, i))


# ----------------------------------------------------------------------------- paired comparison

@st.cache_resource(show_spinner=False, max_entries=8)
def comparison(_data: D.StoreData, key: str, items: tuple, models: tuple):
    """The paired comparison of `models` (`scoring.stats.compare.compare_models`), once per store,
    thresholds and model choice."""
    return D.comparison(verdicts(_data, key, items), models)


@st.cache_resource(show_spinner=False, max_entries=8)
def comparison_tables(_data: D.StoreData, key: str, items: tuple, models: tuple) -> dict:
    from scoring.cli.compare import comparison_tables as build
    return build(comparison(_data, key, items, models))


@st.cache_resource(show_spinner=False, max_entries=32)
def discordant(_data: D.StoreData, key: str, items: tuple, models: tuple, a: str, b: str, metric: str) -> pd.DataFrame:
    return D.discordant(_data, verdicts(_data, key, items), comparison(_data, key, items, models), a, b, metric)
