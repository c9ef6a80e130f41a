"""The dashboard's server: `streamlit run dashboard/server.py -- --store STORE` (what
`safevla dashboard` runs).

Streamlit's ASGI `st.App` serving the script dashboard/app.py, plus one middleware a script
cannot be: `link_open.OpenLinkedEpisode` starts opening an episode's scene the moment a
browser asks for its detail page, while the browser is still starting Streamlit's frontend.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402

from dashboard.link_open import OpenLinkedEpisode  # noqa: E402

app = st.App(str(Path(__file__).with_name("app.py")), middleware=[Middleware(OpenLinkedEpisode)])
