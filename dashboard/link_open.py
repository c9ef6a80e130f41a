"""A linked episode's replay, readied from the page request: the ASGI middleware of
dashboard/server.py.

A page's script runs only once the browser has fetched and started Streamlit's frontend (about
150 script files on a first visit, 1.2-1.6 s on this 2-core machine) and connected. Until then
the server knew nothing of the episode, so readying its replay (converting the scene's web
scene, 2-4 s for a never-opened LIBERO scene; the episode's poses and violation marks) began
only with the script (`cached.open_replay`). The page request (`GET /detail?ep=...`) reaches
the server first: `OpenLinkedEpisode` hands the episode to `cached.open_episode_replay` on a
worker thread, so that work overlaps the frontend's start, and the page's player then finds
its files made or being made (docs/benchmarks.md, "The replay drawn in the browser").

It acts only for a store the link may open (`stores.store_allowed`, the page's own check). The
scene's conversion comes first, from the episode's row and record alone (`convert_linked_scene`),
so on a server that has run no page it does not wait for the pages' modules. Then, on a server
that has not loaded that store yet (a link opened first after a start), it loads it as the
page would (`stores.load_store_at_request`: 0.1 s for the demo store; the page's run then waits
for that load instead of making its own) and queues the episode's poses. Everything else is
left to the page, which says what is wrong. The request and its response are passed on
untouched.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from urllib.parse import parse_qs

from dashboard import ahead

DETAIL = "detail"  # the detail page's url_path (dashboard/app.py)
_OPENER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="safevla-link-open")


def linked_episode(path: str, query: str) -> tuple[str, str | None] | None:
    """(episode id, the link's `store` or None) when `path`?`query` asks for a detail page
    (`.../detail?ep=...`, or `?page=detail&ep=...` on any page), else None."""
    q = parse_qs(query)
    eid = (q.get("ep") or [""])[0]
    if not eid:
        return None
    if path.rstrip("/").rsplit("/", 1)[-1] != DETAIL and (q.get("page") or [""])[0] != DETAIL:
        return None
    return eid, (q.get("store") or [None])[0]


def open_linked_episode(eid: str, store: str | None) -> bool:
    """Starts opening episode `eid`'s replayer when its store (the link's, else the server's)
    may be opened by a link: its web scene converted first (`convert_linked_scene`), then the
    store loaded if no page has and the episode's poses queued; whether they were."""
    from dashboard import stores

    if store is not None and not stores.store_allowed(store):
        return False
    path = store or stores.server_default_store()[0]
    convert_linked_scene(eid, path)
    from dashboard import cached

    return cached.open_episode_replay(stores.load_store_at_request(path), eid)


def convert_linked_scene(eid: str, store: str) -> bool:
    """Converts episode `eid`'s web scene (`web_files.prepare_scene`) before anything else a
    page needs, with no more than that imported: on a server that has run no page, the pages'
    modules and the store's load (`dashboard.cached`, pandas, the registry) took 1 s of a
    first link's 2-core start before the conversion could begin (docs/benchmarks.md, 2026-11-28).
    Reads the episode's row of `store`'s episodes.parquet (two columns), its trajectory and the
    model it names only where the page would (inside the store and its archive,
    `scoring.store.paths.store_roots`: the checks of `dashboard.data.StoreData`); True if it
    converted. Anything amiss is left to the page, which says what."""
    try:
        rec = linked_record(eid, store)
    except Exception:  # noqa: BLE001 - a head start only: the page opens the episode itself and reports
        logging.getLogger(__name__).debug("reading linked episode %r failed", eid, exc_info=True)
        return False
    if rec is None:
        return False
    from dashboard.web_files import prepare_scene

    return prepare_scene(rec)


def linked_record(eid: str, store: str):
    """Episode `eid`'s record with replay state, or None: not in `store`, no trajectory, or a
    trajectory or model file outside the store and its archive."""
    import pyarrow.parquet as pq

    from scoring.records.io import load_record
    from scoring.store.paths import is_inside, model_file_outside, read_manifest_quietly, store_roots, trajectory_file

    # a ParquetFile, not read_table: that imports pyarrow.dataset, and pandas with it (0.18 s)
    table = pq.ParquetFile(os.path.join(store, "episodes.parquet")).read(columns=["episode_id", "trajectory"])
    ids = table.column("episode_id").to_pylist()
    path = trajectory_file(store, table.column("trajectory")[ids.index(eid)].as_py()) if ids.count(eid) == 1 else None
    roots = store_roots(store, read_manifest_quietly(store))
    if path is None or not path.is_file() or not is_inside(path, roots):
        return None
    rec = load_record(path)
    return None if rec.replay is None or model_file_outside(rec, roots) is not None else rec


# What a page's first run imports (dashboard/app.py and dashboard/views/*.py), and a scene's
# open: 0.7 s of imports on this machine, 0.35 s of it Altair's (dashboard/charts.py). Every
# page's first run also computes the Overview's Wilson intervals (for the replays' warm-up),
# whose first call imports scipy.special (scoring.stats.intervals): 0.07 s on an idle machine,
# 0.44 s in a first link's page run, beside the scene's open and the frontend's start. The
# detail page's player is declared with streamlit.components.v1, imported then.
PAGE_MODULES = ("dashboard.cached", "dashboard.common", "dashboard.links", "dashboard.state", "dashboard.vocab",
                "dashboard.annotations", "dashboard.episode_groups", "dashboard.player", "dashboard.detail_timeline",
                "dashboard.replay_bridge", "replay.render.replayer", "dashboard.charts", "dashboard.compare_answer",
                "dashboard.pair_media", "scipy.special", "streamlit.components.v1")


def warm_server() -> Future | None:
    """At server start (dashboard/server.py's lifespan, the runtime started): loads the
    server's store and imports what a page's first run and a scene's open import, on a thread
    of its own, so the first browser to arrive finds them done: the first page after a start
    ran 0.4 s of imports and waited on the store (docs/benchmarks.md, 2026-11-27, 36f4af0),
    then 0.9 s more on scipy.special and Streamlit's REPL check (2026-11-27, a177f7a). A
    page or link arriving meanwhile waits on the same store load
    (`stores.load_store_at_request`) and the same module locks, never on a second copy. Then,
    once the server is idle (`ahead.idle`: no other work ahead, no conversion process), a
    scene's meshes and textures are loaded for the first conversion (`load_a_scenes_assets`);
    returned is that load (whether it found a scene). Nothing when $SAFEVLA_NO_PREWARM is set
    (the cold server the benchmarks and tests measure)."""
    import importlib

    if os.environ.get("SAFEVLA_NO_PREWARM"):
        return None
    _check_for_a_repl()
    store = None
    try:
        from dashboard import stores

        store = stores.server_default_store()[0]
        stores.load_store_at_request(store)
    except Exception:  # noqa: BLE001 - a head start only: the page loads the store itself and says what is wrong
        logging.getLogger(__name__).debug("loading the server's store at start failed", exc_info=True)
    for name in PAGE_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the page imports it again and reports
            logging.getLogger(__name__).debug("importing %s at start failed", name, exc_info=True)
    _index_module_files()
    return None if store is None else ahead.after_the_rest(load_a_scenes_assets, store)


def _index_module_files() -> None:
    """Brings `inspect.getmodule`'s index of module files up to date with the modules just
    imported (the real path of each: an lstat per path component). The detail page's first
    run declares the player component (`player._component`), whose module Streamlit looks up
    with it: 8,826 lstats, 0.11 s of that run after a warm-up that left them to it."""
    import inspect

    inspect.getmodule(None, _filename="<no module's file>")  # not in the index: every module is added


def _check_for_a_repl() -> None:
    """Streamlit's first element in a process checks once whether it runs in a REPL, to warn
    (streamlit.delta_generator's use warning: env_util.is_repl, `inspect.stack()`), and
    inspect's first module look-up resolves the real path of every loaded module's file:
    10,000-15,000 lstat calls, each giving up the GIL, 0.5 s of the first page run after a
    start (docs/benchmarks.md, 2026-11-27, a177f7a). Run here before the warm-up's imports, it
    resolves fewer modules and no page runs it. (Run after them, a page arriving meanwhile ran
    it too, racing this thread for the GIL on every lstat: 0.54 s of that page's run.)"""
    from streamlit import delta_generator

    check = getattr(delta_generator, "_maybe_print_use_warning", None)  # a Streamlit without it: nothing to do
    if callable(check):
        check()


SCENES_TRIED = 5  # load_a_scenes_assets: episodes looked at for one with a replay


def load_a_scenes_assets(store: str) -> bool:
    """Loads the meshes and textures of the scene of the first of `store`'s episodes with a
    replay (`web_files.load_scene_assets`), once the server is idle after its start
    (`dashboard.ahead.after_the_rest`): a scene's first conversion in a process spent 0.5-0.7 CPU-s of its
    1.9-2.2 loading the meshes and textures every LIBERO scene shares (the robot's; the scanned
    bowl and plate), on the way to a first link's picture. True if it found such an episode."""
    try:
        return _load_first_scenes_assets(store)
    finally:
        _index_module_files()  # what it imported, as after the warm-up's imports


def _load_first_scenes_assets(store: str) -> bool:
    found = first_replayable_episode(store)
    if found is None:
        return False
    from dashboard.web_files import load_scene_assets

    load_scene_assets(found[1])
    return True


def first_replayable_episode(store: str) -> tuple[str, object] | None:
    """(episode id, record) of the first of `store`'s episodes with a trajectory whose record
    has replay state (`linked_record`), among its first `SCENES_TRIED` with a trajectory; None
    if none. The scene whose assets the server's start loads (`load_a_scenes_assets`)."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(os.path.join(store, "episodes.parquet")).read(columns=["episode_id", "trajectory"])
    with_trajectory = [eid for eid, path in zip(table.column("episode_id").to_pylist(),
                                                table.column("trajectory").to_pylist()) if path]
    for eid in with_trajectory[:SCENES_TRIED]:
        try:
            rec = linked_record(eid, store)
        except Exception:  # noqa: BLE001 - a head start only: the page that opens it says what is wrong
            logging.getLogger(__name__).debug("reading episode %r for its scene's assets failed", eid, exc_info=True)
            continue
        if rec is not None:
            return eid, rec
    return None


def _open_quietly(eid: str, store: str | None) -> None:
    try:
        open_linked_episode(eid, store)
    except Exception:  # noqa: BLE001 - a head start only: the page opens the episode itself and reports
        logging.getLogger(__name__).debug("opening linked episode %r failed", eid, exc_info=True)


class OpenLinkedEpisode:
    """ASGI middleware: a GET of a detail page queues its episode's scene open (on a worker
    thread, never in the event loop), then passes the request on. Every HTTP request also
    tells `dashboard.ahead` that the server is not quiet."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            ahead.request_seen()  # work ahead of the user waits while a browser loads a page
        if scope["type"] == "http" and scope.get("method") == "GET":
            linked = linked_episode(scope.get("path", ""), scope.get("query_string", b"").decode("latin-1"))
            if linked is not None:
                _OPENER.submit(_open_quietly, *linked)
        await self.app(scope, receive, send)
