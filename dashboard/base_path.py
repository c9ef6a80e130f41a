"""A direct link to one of the dashboard's pages (`/detail?ep=...`), told where the server is:
the ASGI middleware `BasePathHint` of dashboard/server.py.

Streamlit's frontend cannot tell from a path like `/detail` whether `detail` is a page or the
server's base path (`server.baseUrlPath`, or a proxy's prefix), so it asks
`/detail/_stcore/health` first, is answered 404, waits its minimum retry period, and asks
`/_stcore/health` (its `getPossibleBaseUris`: the path, then its parent). Every direct link to
a page other than the first paid that before the page's script could start: 0.13 s of a bare
two-page Streamlit app's 0.67-0.81 s to its component's first picture (its second page against
its first, benchmarks/streamlit_floor.py, docs/benchmarks.md).

The server knows which it is. For a page one segment past its base path, `BasePathHint` puts
in the page's HTML, ahead of Streamlit's bundle, the frontend's own setting for where the server
is (`window.__streamlit.BACKEND_BASE_URL`): the link's path without its last segment, the
parent the frontend would have connected to second, as the browser sees it (behind a proxy's
prefix too). The base path itself and deeper paths are left as they are, and so is any answer
but the page's HTML.
"""

from __future__ import annotations

import re

from dashboard.web_files import without_headers

# Run before Streamlit's bundle reads `window.__streamlit` (once, as it loads): any settings an
# embedding page made are kept.
HINT = (b'<script>window.__streamlit = Object.assign({}, window.__streamlit, {BACKEND_BASE_URL: '
        b'location.origin + location.pathname.replace(/\\/+$/, "").replace(/[^/]*$/, "")});</script>')
_ONE_SEGMENT = re.compile(r"/[^/]+/?")


def base_url_path() -> str:
    """The server's `server.baseUrlPath`, as "/a/b" or "" (Streamlit's config)."""
    from streamlit import config

    base = (config.get_option("server.baseUrlPath") or "").strip("/")
    return f"/{base}" if base else ""


def one_segment_past(path: str, base: str) -> bool:
    """Whether `path` is one segment past `base` ("/detail" past "", "/x/detail/" past "/x")."""
    if base and not path.startswith(base + "/"):
        return False
    return _ONE_SEGMENT.fullmatch(path[len(base):]) is not None


def with_hint(html: bytes) -> bytes:
    """`html` with `HINT` first in its head; unchanged if it has no `<head>`."""
    return html.replace(b"<head>", b"<head>" + HINT, 1)


class BasePathHint:
    """ASGI middleware: the HTML of a page one segment past the base path gets `HINT` (not
    gzipped: 2.4 KB); every other request and answer passes as it came."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET" \
                or not one_segment_past(scope.get("path", ""), base_url_path()):
            await self.app(scope, receive, send)
            return
        scope = {**scope, "headers": without_headers(scope.get("headers", []), b"accept-encoding")}
        held: dict = {}
        body: list[bytes] = []

        async def hint_html(message):
            if message["type"] == "http.response.start":
                kinds = [v for k, v in message.get("headers", []) if k.lower() == b"content-type"]
                if message.get("status") == 200 and kinds and kinds[0].startswith(b"text/html"):
                    held.update(message)  # the page's HTML: sent whole once read
                    return
            elif message["type"] == "http.response.body" and held:
                body.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                content = with_hint(b"".join(body))
                headers = [*without_headers(held.get("headers", []), b"content-length"),
                           (b"content-length", str(len(content)).encode())]
                await send({**held, "headers": headers})
                message = {"type": "http.response.body", "body": content}
            await send(message)

        await self.app(scope, receive, hint_html)
