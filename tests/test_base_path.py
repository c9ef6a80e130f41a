"""A direct link to a dashboard page tells Streamlit's frontend where the server is
(dashboard/base_path.py): the page's HTML one segment past the base path gets the hint, not
gzipped, with its length; every other path and answer passes as it came; and in chromium the
hint names the link's path without its page, behind a proxy's prefix too."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("streamlit")

from dashboard.base_path import HINT, BasePathHint, one_segment_past, with_hint  # noqa: E402

PAGE = b"<!DOCTYPE html><html><head><title>Streamlit</title></head><body></body></html>"


def test_only_a_page_one_segment_past_the_base_path_is_hinted():
    assert one_segment_past("/detail", "") and one_segment_past("/detail/", "")
    assert one_segment_past("/sv/detail", "/sv") and one_segment_past("/sv/episodes/", "/sv")
    assert not one_segment_past("/", "") and not one_segment_past("", "")
    assert not one_segment_past("/sv", "/sv") and not one_segment_past("/sv/", "/sv")
    assert not one_segment_past("/component/dashboard.player.safevla_timeline/index.html", "")
    assert not one_segment_past("/_stcore/health", "") and not one_segment_past("/detail", "/sv")
    assert not one_segment_past("/svdetail", "/sv")
    assert with_hint(PAGE) == PAGE.replace(b"<head>", b"<head>" + HINT)
    assert with_hint(b"no head here") == b"no head here"


def _served(path: str, *, status: int = 200, kind: bytes = b"text/html", chunks=(PAGE[:20], PAGE[20:])):
    """What `BasePathHint` in front of an app that gzips when asked sends for a GET of `path`,
    and whether the app was asked for gzip."""
    asked = {}

    async def inner(scope, receive, send):
        asked["gzip"] = any(k == b"accept-encoding" and b"gzip" in v for k, v in scope["headers"])
        body = b"".join(chunks)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode()),
                                (b"etag", b'"e1"')] + ([(b"content-encoding", b"gzip")] if asked["gzip"] else [])})
        for k, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk, "more_body": k < len(chunks) - 1})

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": [(b"accept-encoding", b"gzip, br")]}
    asyncio.run(BasePathHint(inner)(scope, None, send))
    body = b"".join(m.get("body", b"") for m in sent[1:])
    return sent[0]["status"], dict(sent[0]["headers"]), body, asked["gzip"]


def test_the_pages_html_gets_the_hint_with_its_length_and_nothing_else_changes():
    status, headers, body, gzip = _served("/detail")
    assert (status, body, gzip) == (200, with_hint(PAGE), False)
    assert headers == {b"content-type": b"text/html", b"content-length": str(len(body)).encode(), b"etag": b'"e1"'}
    # the base path, a deeper path, another answer to a page's path, another type: as they came
    for path, status, kind in [("/", 200, b"text/html"), ("/component/x/index.html", 200, b"text/html"),
                               ("/detail", 304, b"text/html"), ("/favicon.png", 200, b"image/png")]:
        got = _served(path, status=status, kind=kind)
        assert got[:3:2] == (status, PAGE) and b"content-length" in got[1], path
    assert _served("/")[3] is True  # not one segment past: its request untouched, gzip still asked for


def test_in_chromium_the_hint_names_the_links_path_without_its_page():
    """The HTML as the middleware sends it, at a proxy's prefix and at the root, with and without
    a trailing slash: Streamlit's setting for where the server is, before its bundle reads it."""
    from playwright import sync_api

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
        try:
            pg = browser.new_page()
            pg.route("http://svl.test/**", lambda route: route.fulfill(
                status=200, body=with_hint(PAGE), headers={"content-type": "text/html"}))
            got = {}
            for path in ("/detail?ep=a%2Fb", "/detail/", "/user/ab/proxy/8501/detail?ep=x"):
                pg.goto(f"http://svl.test{path}")
                got[path] = pg.evaluate("window.__streamlit.BACKEND_BASE_URL")
        finally:
            browser.close()
    assert got == {"/detail?ep=a%2Fb": "http://svl.test/", "/detail/": "http://svl.test/",
                   "/user/ab/proxy/8501/detail?ep=x": "http://svl.test/user/ab/proxy/8501/"}
