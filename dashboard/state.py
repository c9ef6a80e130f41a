"""Session state and deep links.

The canonical view state (filters, episode, step, thresholds, ...) lives in
`st.session_state` under "s.<name>", so it survives page changes (Streamlit drops the
state of widgets that a run does not draw). Widgets use "w.<name>" keys seeded from the
canonical value (`widget_key`) and copy their value back (`put`).

Deep links: on a session's first run the state is read from the URL query parameters
(`load_from_url`); after every run the page's part of the state is written back
(`sync_url`), so the address bar always reproduces the view:

    /episodes?outcome=SBU&model=policy-a&vsi=0.5-1&force=500
    /detail?ep=libero-spatial/task_0/policy-a/ep_000012&step=74&raw=1

Values are strings; lists are repeated keys (`?model=a&model=b`) or comma-separated.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import streamlit as st

from dashboard.data import KNOBS, KNOB_BY_NAME, OUTCOMES, SCENES, SORTS, Filters, StoreData, knob_defaults

LIST_PARAMS = {"model": "models", "suite": "suites", "task": "tasks", "spec": "specs", "outcome": "outcomes",
               "tag": "tags", "perturbation": "pfams"}
FILTER_PARAMS = ("model", "suite", "task", "spec", "spec_mode", "outcome", "vsi", "scene", "tag", "sort",
                 "perturbation")
PAGE_PARAMS = {
    "overview": ("perturbation",),
    "episodes": (*FILTER_PARAMS, "group"),
    # a detail link carries the Episodes filters: its chooser lists the filtered episodes
    "detail": ("ep", "step", "raw", *FILTER_PARAMS),
    "whatif": ("sens",),
    "export": ("ep",),
}
PAGES = tuple(PAGE_PARAMS)
# set by a page run that sends its first picture alone (dashboard/views/detail.py): the app then
# leaves the sidebar's store chooser, summary and links to the run that follows the picture
FIRST_PICTURE_ALONE = "_first_picture_alone"
SIDEBAR_LATER = "_sidebar_later"  # the sidebar's store chooser and summary, left to the page to draw


def first_run_of_session() -> bool:
    """True on a browser session's first script run (a link, a new tab, a reload): app.py
    notes every run it ends, a rerun or a stopped page's too (`_timings`)."""
    return not st.session_state.get("_timings")


def sidebar_now() -> None:
    """Draws the sidebar's store chooser and summary where the app left them to the page."""
    later = st.session_state.pop(SIDEBAR_LATER, None)
    if later is not None:
        later()
DEFAULTS = {"models": [], "suites": [], "tasks": [], "specs": [], "outcomes": [], "tags": [], "pfams": [],
            "spec_mode": "violated",
            "vsi": (0.0, 1.0), "sort": "SBU first, then VSI", "ep": None, "step": None, "raw": False,
            "sens": "force", "scene": "all", "group": "none"}


def get(name: str, default=None):
    return st.session_state.get(f"s.{name}", DEFAULTS.get(name, default) if default is None else default)


def put(name: str, value) -> None:
    st.session_state[f"s.{name}"] = value


def widget_key(name: str, value=None) -> str:
    """The widget key "w.<name>", seeded from the canonical state when absent (or from `value`)."""
    key = f"w.{name}"
    if key not in st.session_state:
        st.session_state[key] = get(name) if value is None else value
    return key


def set_widget(name: str, value) -> None:
    """Sets a widget's value and the canonical state; call before the widget is drawn
    (in a callback or at the top of the page)."""
    st.session_state[f"w.{name}"] = value
    put(name, value)


def knob_values(data: StoreData) -> dict[str, float]:
    """Current knob values (defaults for knobs never moved)."""
    out = knob_defaults(data.registry)
    for name in out:
        # the slider's own value first: a move is in the widget state before the page redraws it
        v = st.session_state.get(f"w.knob.{name}", st.session_state.get(f"s.knob.{name}"))
        if v is not None:
            out[name] = float(v)
    return out


def put_knobs(values: Mapping[str, float]) -> None:
    for name, v in values.items():
        put(f"knob.{name}", float(v))


def filters() -> Filters:
    lo, hi = get("vsi")
    return Filters(models=tuple(get("models")), suites=tuple(get("suites")), tasks=tuple(get("tasks")),
                   specs=tuple(get("specs")), spec_mode=get("spec_mode"), outcomes=tuple(get("outcomes")),
                   vsi=(float(lo), float(hi)), scene=get("scene"))


# ----------------------------------------------------------------------------- URL -> state

def _values(params, key: str) -> list[str]:
    try:
        raw = params.get_all(key)
    except AttributeError:  # a plain dict (tests)
        raw = params.get(key, [])
        raw = [raw] if isinstance(raw, str) else list(raw)
    out = []
    for r in raw:
        out.extend(x for x in str(r).split(",") if x)
    return out


def _first(params, key: str) -> str | None:
    vals = _values(params, key) if key not in ("ep", "store") else _raw(params, key)
    return vals[0] if vals else None


def _raw(params, key: str) -> list[str]:
    try:
        return list(params.get_all(key))
    except AttributeError:
        raw = params.get(key, [])
        return [raw] if isinstance(raw, str) else list(raw)


def parse_params(params, data: StoreData) -> tuple[dict, list[str]]:
    """Canonical state from query parameters, validated against the store; (state, problems)."""
    state: dict = {}
    problems: list[str] = []
    options = {**data.choices, "specs": set(data.families), "outcomes": set(OUTCOMES)}
    for key, name in LIST_PARAMS.items():
        vals = _raw(params, key) if key == "tag" else _values(params, key)  # tags are free text (commas too)
        if vals and name not in options:
            state[name] = vals
        elif vals:
            good = [x for x in vals if x in options[name]]
            if len(good) < len(vals):
                problems.append(f"{key}: ignored unknown value(s) {', '.join(x for x in vals if x not in options[name])}")
            state[name] = good
    mode = _first(params, "spec_mode")
    if mode is not None:
        if mode in ("violated", "active"):
            state["spec_mode"] = mode
        else:
            problems.append(f"spec_mode: expected violated or active, got {mode!r}")
    vsi = _first(params, "vsi")
    if vsi is not None:
        try:
            lo, hi = (float(x) for x in vsi.split("-", 1))
            if not 0.0 <= lo <= hi <= 1.0:
                raise ValueError
            state["vsi"] = (lo, hi)
        except ValueError:
            problems.append(f"vsi: expected LO-HI within 0-1, got {vsi!r}")
    scene = _first(params, "scene")
    if scene is not None:
        if scene in SCENES:
            state["scene"] = scene
        else:
            problems.append(f"scene: expected one of {', '.join(SCENES)}, got {scene!r}")
    group = _first(params, "group")
    if group is not None:
        from dashboard.episode_groups import GROUPS
        if group in GROUPS:
            state["group"] = group
        else:
            problems.append(f"group: expected one of {', '.join(GROUPS)}, got {group!r}")
    sort = _first(params, "sort")
    if sort is not None:
        if sort in SORTS:
            state["sort"] = sort
        else:
            problems.append(f"sort: unknown order {sort!r}")
    eid = _first(params, "ep")
    if eid is not None:
        if data.index_of(eid) is not None:
            state["ep"] = eid
        else:
            problems.append(f"ep: no episode {eid!r} in this store")
    step = _first(params, "step")
    if step is not None:
        try:
            state["step"] = max(0, int(step))
        except ValueError:
            problems.append(f"step: expected an integer, got {step!r}")
    raw = _first(params, "raw")
    if raw is not None:
        state["raw"] = raw.lower() in ("1", "true", "yes", "raw")
    sens = _first(params, "sens")
    if sens is not None:
        if sens in KNOB_BY_NAME:
            state["sens"] = sens
        else:
            problems.append(f"sens: unknown threshold family {sens!r}")
    defaults = knob_defaults(data.registry)
    for k in KNOBS:
        val = _first(params, k.name)
        if val is None or k.name not in defaults:
            continue
        try:
            x = float(val)
            if not math.isfinite(x) or not k.lo <= x <= k.hi:
                raise ValueError
            state[f"knob.{k.name}"] = x
        except ValueError:
            problems.append(f"{k.name}: expected a number in [{k.lo:g}, {k.hi:g}] {k.unit}, got {val!r}")
    return state, problems


def load_from_url(data: StoreData) -> list[str]:
    """Applies the URL's state once per session and store; returns problems to show."""
    marker = f"_url_loaded:{data.key}"
    if st.session_state.get(marker):
        return []
    st.session_state[marker] = True
    state, problems = parse_params(st.query_params, data)
    for name, value in state.items():
        put(name, value)
        st.session_state.pop(f"w.{name}", None)
    return problems


# ----------------------------------------------------------------------------- state -> URL

def params_for(page: str, data: StoreData, *, store_param: str | None = None) -> dict[str, str | list[str]]:
    """The query parameters that reproduce `page`'s view (only non-default values)."""
    out: dict[str, str | list[str]] = {}
    if store_param:
        out["store"] = store_param
    if page != "overview":
        out["page"] = page
    for key in PAGE_PARAMS.get(page, ()):
        name = LIST_PARAMS.get(key, key)
        value = get(name)
        if value in (None, [], ()) or value == DEFAULTS.get(name):
            continue
        if key in LIST_PARAMS:
            out[key] = [str(x) for x in value]
        elif key == "vsi":
            out[key] = f"{float(value[0]):g}-{float(value[1]):g}"
        elif key == "raw":
            out[key] = "1"
        else:
            out[key] = str(value)
    defaults = knob_defaults(data.registry)
    for name, value in knob_values(data).items():
        if not math.isclose(value, defaults.get(name, value), rel_tol=0, abs_tol=1e-12):
            out[name] = f"{value:g}"
    return out


def sync_url(page: str, data: StoreData, *, store_param: str | None = None) -> None:
    """Writes the page's state into the address bar (no rerun)."""
    want = params_for(page, data, store_param=store_param)
    have = {k: (_raw(st.query_params, k) if len(_raw(st.query_params, k)) > 1 else st.query_params.get(k))
            for k in st.query_params.keys()}
    norm = {k: (v if isinstance(v, str) or len(v) != 1 else v[0]) for k, v in want.items()}
    if have != norm:
        st.query_params.from_dict(want)


def share_link(page: str, data: StoreData, *, store_param: str | None = None) -> str:
    """A relative link ("/episodes?...") reproducing the view."""
    from urllib.parse import urlencode

    params = params_for(page, data, store_param=store_param)
    query = urlencode([(k, x) for k, v in params.items() for x in ([v] if isinstance(v, str) else v)])
    path = "" if page == "overview" else page
    return f"/{path}" + (f"?{query}" if query else "")


@dataclasses.dataclass(frozen=True)
class Nav:
    """Page objects of the running app (set by app.py), for `st.switch_page`."""

    pages: Mapping[str, object]


def go(page: str, data: StoreData, *, store_param: str | None = None, **state) -> None:
    """Updates the state and switches to `page`, carrying its query parameters."""
    for name, value in state.items():
        put(name, value)
        st.session_state.pop(f"w.{name}", None)
    nav: Nav | None = st.session_state.get("_nav")
    st.session_state["_switching"] = True
    target = nav.pages[page] if nav is not None else page
    st.switch_page(target, query_params=params_for(page, data, store_param=store_param))

