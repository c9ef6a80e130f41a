"""Which run stores this dashboard may open, and opening them: the store it was started with
(or the bundled demo), those given with `--stores`, each loaded once per server (an LRU of a few).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

if TYPE_CHECKING:
    from dashboard import data as D

ROOT = Path(__file__).resolve().parent.parent
DEMO_STORE = ROOT / "assets" / "demo" / "store"
ENV_STORE = "SAFEVLA_STORE"
ENV_STORES = "SAFEVLA_STORES"  # more stores a link may open, os.pathsep-separated (`safevla dashboard --stores`)
# One message for every store a link may not open: whether the path exists, is a store,
# or is /etc must not show.
NOT_AVAILABLE = ("This run store is not available on this dashboard. A link or the sidebar opens only the store "
                 "the dashboard was started with and those it was given with `safevla dashboard STORE --stores "
                 "DIR ...`.")


# ----------------------------------------------------------------------------- store loading

@st.cache_resource(show_spinner=False)
def _store_cache() -> tuple[OrderedDict, threading.Lock, dict]:
    """(loaded stores by version, their lock, the loads under way by version)."""
    return OrderedDict(), threading.Lock(), {}


def loaded_store(path: str) -> D.StoreData | None:
    """The store at `path` if a page has loaded this version of it already, else None (never
    loads: callable outside a page's run, see dashboard/link_open.py)."""
    from dashboard.data import store_stamp

    return _cached_store(store_stamp(path))


def _cached_store(key) -> D.StoreData | None:
    cache, lock, _ = _store_cache()
    with lock:
        return _peek(cache, key)


def _peek(cache: OrderedDict, key) -> D.StoreData | None:
    """The loaded store of version `key`, marked recently used; with the cache's lock held."""
    hit = cache.get(key)
    if hit is not None:
        cache.move_to_end(key)
    return hit


def load_store(path: str) -> D.StoreData:
    """The store at `path`, loaded once per version of its files (with a progress bar)."""
    from dashboard.data import store_stamp

    return _load_once(path, store_stamp(path), progress=True)


def load_store_at_request(path: str) -> D.StoreData:
    """`load_store` outside a page's run (no progress bar): a detail link's page request on a
    server that has not loaded the store yet (dashboard/link_open.py). A page run asking for
    the store meanwhile waits for this load instead of making its own."""
    from dashboard.data import store_stamp

    return _load_once(path, store_stamp(path), progress=False)


def _load_once(path: str, key, *, progress: bool) -> D.StoreData:
    from dashboard.data import open_store

    cache, lock, loading = _store_cache()
    with lock:
        hit = _peek(cache, key)
        if hit is not None:
            return hit
        underway = loading.get(key)
        if underway is None:
            mine = loading[key] = Future()
    if underway is not None:
        return underway.result()  # raises what that load raised (the page reports it)
    try:
        data = _open_with_progress(path) if progress else open_store(path)
    except BaseException as exc:
        with lock:
            del loading[key]
        mine.set_exception(exc)
        raise
    with lock:
        cache[key] = data
        while len(cache) > 3:
            cache.popitem(last=False)
        del loading[key]
    mine.set_result(data)
    return data


def _open_with_progress(path: str) -> D.StoreData:
    from dashboard.data import open_store

    bar = st.progress(0.0, text=f"Loading run store {path} …")
    try:
        bar.progress(0.2, text=f"Reading {path}/episodes.parquet and spec_results.parquet …")
        data = open_store(path)
        bar.progress(1.0, text="Loaded.")
    finally:
        bar.empty()
    return data


def _server_args():
    import argparse
    import sys

    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--store", default=None)
    p.add_argument("--stores", nargs="*", default=[])
    args, _ = p.parse_known_args(sys.argv[1:])
    return args


def server_default_store() -> tuple[str, str]:
    """(path, where it came from): `--store` after `--`, else $SAFEVLA_STORE, else the demo store."""
    args = _server_args()
    if args.store:
        return args.store, "--store"
    if os.environ.get(ENV_STORE):
        return os.environ[ENV_STORE], f"${ENV_STORE}"
    return str(DEMO_STORE), "bundled demo store"


def allowed_stores() -> tuple[str, ...]:
    """The stores a link (`?store=`) or the sidebar may open, as given: the server's own
    store, then `--stores` after `--`, then $SAFEVLA_STORES."""
    extra = [*_server_args().stores, *os.environ.get(ENV_STORES, "").split(os.pathsep)]
    return tuple(dict.fromkeys(p for p in [server_default_store()[0], *extra] if p))


def store_allowed(path: str) -> bool:
    """`path` is one of `allowed_stores()` (compared with symlinks resolved; nothing else is looked at)."""
    real = os.path.realpath(path)
    return any(real == os.path.realpath(p) for p in allowed_stores())


def shown_caption(path: str, origin: str) -> str:
    """The sidebar's line on the store in use: which one it shows, or, for a path a link or the
    sidebar may not open, that none is shown (the path is not echoed as if it were shown)."""
    if store_allowed(path):
        return f"Showing `{path}` ({origin})."
    return "No store is shown: the one asked for is not available on this dashboard."


def chosen_store() -> tuple[str, str]:
    """The session's store: chosen in the sidebar, else the URL's `store`, else the server default."""
    picked = st.session_state.get("s.store")
    if picked:
        return picked, "chosen in the sidebar"
    url = st.query_params.get("store")
    if url:
        return url, "from the link"
    return server_default_store()
