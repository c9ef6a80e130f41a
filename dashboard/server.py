"""The dashboard's server: `streamlit run dashboard/server.py -- --store STORE` (what
`safevla dashboard` runs).

Streamlit's ASGI `st.App` serving the script dashboard/app.py, plus three middlewares a script
cannot be: `link_open.OpenLinkedEpisode` starts opening an episode's scene the moment a
browser asks for its detail page, while the browser is still starting Streamlit's frontend,
`web_files.CachedWebFiles` has the player's scene and poses files cached by the browser, and
`base_path.BasePathHint` tells the frontend of a direct link to a page where the server is.
At start, `link_open.warm_server` loads the store and imports the pages' modules before
anyone asks, and with `--open-browser URL` (`safevla dashboard` on a machine with a display)
the server opens the user's browser once it answers (`open_browser`).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from dashboard.base_path import BasePathHint  # noqa: E402
from dashboard.link_open import OpenLinkedEpisode, warm_server  # noqa: E402
from dashboard.open_browser import open_when_answering, url_to_open  # noqa: E402
from dashboard.web_files import CachedWebFiles  # noqa: E402


@contextlib.asynccontextmanager
async def _warm_at_start(_app):
    """Runs once the runtime has started: the server's store and the pages' imports are
    readied in the background (`link_open.warm_server`) while nobody has asked yet, and the
    browser is opened once the server answers, if `--open-browser` asks for it."""
    threading.Thread(target=warm_server, name="safevla-warm-start", daemon=True).start()
    if url := url_to_open():
        threading.Thread(target=open_when_answering, args=(url,), name="safevla-open-browser", daemon=True).start()
    yield


app = st.App(str(Path(__file__).with_name("app.py")),
             middleware=[Middleware(OpenLinkedEpisode), Middleware(CachedWebFiles), Middleware(BasePathHint)],
             lifespan=_warm_at_start)
