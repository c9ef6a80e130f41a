"""Opens the user's browser on the dashboard once its server answers (`--open-browser URL`).

`safevla dashboard` always runs Streamlit headless: Streamlit's own browser opening comes with
its first-run e-mail prompt, which a server started without a terminal never gets past. So the
command passes `--open-browser URL` after `--` when the machine has a display, and the server
opens that URL itself, from a thread, once its health check answers.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import urllib.request
import webbrowser
from collections.abc import Callable, Sequence

log = logging.getLogger("safevla.dashboard")

# the server's own address: a proxy from the environment (http_proxy) must not answer for it
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def url_to_open(argv: Sequence[str] | None = None) -> str | None:
    """The URL given with `--open-browser` among the script's arguments, or None."""
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--open-browser", default=None)
    args, _ = p.parse_known_args(sys.argv[1:] if argv is None else argv)
    return args.open_browser


def answers(url: str) -> bool:
    """Streamlit's health check at `url` answers "ok"."""
    try:
        with _NO_PROXY.open(url.rstrip("/") + "/_stcore/health", timeout=2) as r:
            return r.read() == b"ok"
    except OSError:
        return False


def open_when_answering(url: str, *, timeout: float = 120.0, interval: float = 0.25,
                        opener: Callable[[str], bool] = webbrowser.open) -> bool:
    """Opens `url` with `opener` once the server there answers; False if it did not answer
    within `timeout` seconds or no browser could be started."""
    deadline = time.monotonic() + timeout
    while not answers(url):
        if time.monotonic() > deadline:
            log.warning("the dashboard did not answer at %s within %.0f s; no browser opened", url, timeout)
            return False
        time.sleep(interval)
    if not opener(url):
        log.warning("no browser could be started; open %s", url)
        return False
    return True
