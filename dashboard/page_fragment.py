"""A page whose own widgets rerun only the page (`st.fragment`), not the whole app.

A widget change reruns the whole script: dashboard/app.py's part (the store check,
navigation, the sidebar with its history script, its link and its counts) and then the
page. For the Episodes filters and the What-if sliders only the page changes, so the page
runs as a fragment: a change inside it reruns the page's function alone, and the browser
receives only the page's elements: a Model filter on the 20k store sends 44 messages instead
of 57 (docs/benchmarks.md, 2026-11-27). The page's own elements remain (the 2,000-row table is
most of its ~350 KB), so this alone does not bring an interaction under 0.3 s.

What app.py does after a full run, a fragment's run does itself: the view goes into the
address bar (links restore it) and a What-if setting warms the Overview. The sidebar is
drawn by full runs only (a fragment cannot write there): its "Copy link" box and its
"What-if thresholds active" note follow at the next full run (a page switch, a reload);
the address bar always holds the view.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from dashboard import cached
from dashboard import common as C


def after_page_run() -> None:
    """What app.py's `finally` does after a page ran, for a fragment's own run: the address
    bar, and the Overview of a new What-if setting computed in the background."""
    c = st.session_state.get("_ctx")
    if c is None or st.session_state.get("_switching"):
        return
    C.sync_url(c.page, c.data, store_param=c.store_param)
    cached.prewarm_overview(c)


def run(render: Callable[[], None], name: str) -> None:
    """Runs the page function `render` as the fragment `name` (see the module doc)."""

    def page() -> None:
        render()
        after_page_run()

    st.fragment(page, key=f"page_{name}")()
