"""Browser history and shareable links.

History: Streamlit's frontend pushes a history entry for every change of the query string
(`st.query_params`, which `sync_url` writes after every run), so one filter click or slider
move became one Back step, and a page switch followed by its own parameters took two. The
app keeps one rule instead: a change that stays on the same page (same path) replaces the
current entry; a page switch (another path) pushes one. Streamlit has no server-side choice
between push and replace, so a few lines of script in the page wrap `history.pushState`.

Link: the sidebar's "Copy link" shows the address that reproduces the view (the page's
parameters, the same `sync_url` writes) in a code block, whose copy button puts it on the
clipboard; the text stays visible where a browser blocks clipboard access.
"""

from __future__ import annotations

from urllib.parse import urlencode, urlsplit

import streamlit as st

from dashboard import state as S

# Idempotent: the element mounts once, and a remount finds history already wrapped.
HISTORY_SCRIPT = """<script>
(function () {
  var h = window.history;
  if (h.__safevlaOneEntryPerPage) { return; }
  h.__safevlaOneEntryPerPage = true;
  var push = h.pushState.bind(h);
  h.pushState = function (state, title, url) {
    try {
      var next = new URL(url, window.location.href);
      if (next.pathname === window.location.pathname) { return h.replaceState(state, title, url); }
    } catch (e) { /* an unparsable url: keep Streamlit's own behaviour */ }
    return push(state, title, url);
  };
})();
</script>"""


def history_ui() -> None:
    """Installs the one-entry-per-page history rule in the browser (no visible element)."""
    st.html(HISTORY_SCRIPT, unsafe_allow_javascript=True, width="content")


def link_params(page: str, data, *, store_param: str | None = None) -> dict:
    """The query parameters of the view: `state.params_for` plus a page's own (`_params:<page>`)."""
    return {**S.params_for(page, data, store_param=store_param), **(st.session_state.get(f"_params:{page}") or {})}


def view_link(page: str, params: dict, *, root: str = "") -> str:
    """The address of `page` with `params` ({key: str or list of str}) under the app's `root`
    ("http://host:port" plus any path prefix; "" gives a relative link)."""
    query = urlencode([(k, x) for k, v in params.items() for x in ([v] if isinstance(v, str) else v)])
    path = "" if page == "overview" else page
    return f"{root.rstrip('/')}/{path}" + (f"?{query}" if query else "")


def app_root(url: str, pages) -> str:
    """The app's root from the browser's current address: scheme, host and path without the page."""
    if not url:
        return ""
    parts = urlsplit(url)
    segs = parts.path.rstrip("/").split("/")
    if segs and segs[-1] in pages:
        segs = segs[:-1]
    return f"{parts.scheme}://{parts.netloc}{'/'.join(segs)}"


def copy_link_ui(page: str, data, *, store_param: str | None = None) -> str:
    """The sidebar's "Copy link": the view's address in a code block (its icon copies it)."""
    root = app_root(st.context.url or "", (*S.PAGES, "compare"))
    link = view_link(page, link_params(page, data, store_param=store_param), root=root)
    with st.popover("Copy link", icon=":material/link:", width="stretch",
                    help="the address that reopens this view with its filters, episode and thresholds"):
        st.caption("Copy with the icon at the right of the box (or select the text):")
        st.code(link, language=None, wrap_lines=True)
    return link
