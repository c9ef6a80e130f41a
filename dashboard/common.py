"""Shared page plumbing: the run context every page starts from (`ctx`), navigation and its
guards, the what-if banner, deep-link sync, and small display helpers. The store in use is
dashboard/stores.py's; cached computations are dashboard/cached.py's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import streamlit as st

from dashboard import cached
from dashboard import data as D
from dashboard import state as S
from dashboard.cached import override_items, verdicts
from scoring.errors import RecordError, SafeVLAError

PAGE_TITLES = {"overview": "Overview", "episodes": "Episodes", "detail": "Episode detail", "whatif": "What-if",
               "export": "Export"}


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
    items = override_items(overrides)
    return Ctx(data=data, knobs=knobs, overrides=overrides, items=items, v=verdicts(data, data.key, items),
               store_param=store_param, page=page)


def ctx() -> Ctx:
    c = st.session_state.get("_ctx")
    if c is None:
        st.error("The dashboard context is missing: start the app with `safevla dashboard` "
                 "(or `streamlit run dashboard/server.py`).")
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
    if page == "detail":
        cached.open_replay(c, state.get("ep"))  # the scene opens while the page switches
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


def render_button_ui(label: str, *, key: str, tag, render, what: str, where=None, **button_kw):
    """A button that renders something slow (a clip, a figure) under a progress bar.

    `render(progress)` makes the result and reports with `progress(fraction, text)`. The
    result is kept in the session with `tag`, what it was made from, and returned on later
    runs while `tag` still holds: the bytes for `tag`, or None. A failed render is
    reported and the page stays usable.
    """
    if (where or st).button(label, key=key, **button_kw):
        bar = st.progress(0.0, text=f"Rendering {what} …")
        try:
            st.session_state[f"_{key}"] = (tag, render(lambda fraction, text: bar.progress(
                min(max(fraction, 0.0), 1.0), text=text)))
        except Exception as exc:  # noqa: BLE001 - whatever the renderer raises is shown, not a traceback
            st.error(f"Could not render {what}: {exc}")
        finally:
            bar.empty()
    got = st.session_state.get(f"_{key}")
    return got[1] if got is not None and got[0] == tag else None


def forget_render(key: str) -> None:
    """Drops what `render_button_ui(key=key)` kept, e.g. when the page shows another episode."""
    st.session_state.pop(f"_{key}", None)


def has_render(key: str) -> bool:
    """Whether `render_button_ui(key=key)` keeps a result (for whichever tag)."""
    return f"_{key}" in st.session_state


# What loading an episode's trajectory raises for bad data: StoreProblem (the file is missing, or
# refused: outside the store and its archive) and RecordError (unreadable: truncated, corrupt, not a
# record). Both are SafeVLAErrors; a page that loads a trajectory catches these and shows
# `trajectory_problem` instead of a traceback.
TRAJECTORY_ERRORS = (SafeVLAError,)


def trajectory_problem(exc: BaseException) -> str:
    """One readable line (bold cause first) for a trajectory that cannot be loaded (`TRAJECTORY_ERRORS`)."""
    text = " ".join(str(exc).split()) or type(exc).__name__  # one line, however the message was built
    if isinstance(exc, RecordError):
        head = "Unreadable trajectory."
        text += "; scores and tables still show, robustness over time and replay need a readable file"
    elif "outside the run store" in text:
        head = "Refused trajectory."
    else:
        head = "Missing trajectory."
    return f"**{head}** {text}"


def file_safe(name: str) -> str:
    """`name` as a download file name: letters, digits, '-', '_' and '.' kept, anything else '_'."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def pct(x) -> str:
    return "—" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * x:.1f}%"


def sync_url(page: str, data: D.StoreData, *, store_param: str | None = None) -> None:
    """`state.sync_url`, plus the link parameters a page keeps itself in
    `st.session_state["_params:<page>"]` (pages outside `state.PAGE_PARAMS`, e.g. Compare)."""
    extra = st.session_state.get(f"_params:{page}")
    if not extra:
        S.sync_url(page, data, store_param=store_param)
        return
    want = {**S.params_for(page, data, store_param=store_param), **extra}
    have = {}
    for k in st.query_params.keys():
        vals = st.query_params.get_all(k)
        have[k] = vals if len(vals) > 1 else st.query_params.get(k)
    norm = {k: (v if isinstance(v, str) or len(v) != 1 else v[0]) for k, v in want.items()}
    if have != norm:
        st.query_params.from_dict(want)
