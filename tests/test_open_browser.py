"""dashboard.open_browser: the browser opens once the server answers its health check, never before."""

from __future__ import annotations

import http.server
import threading
import time

import pytest

from dashboard.open_browser import answers, open_when_answering, url_to_open


class Health(http.server.BaseHTTPRequestHandler):
    """Answers /_stcore/health with "ok" once `ready` is set, and 503 before."""

    ready = threading.Event()

    def do_GET(self):  # noqa: N802 - http.server's name
        body = b"ok" if self.ready.is_set() and self.path == "/_stcore/health" else b"not yet"
        self.send_response(200 if body == b"ok" else 503)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Health.ready.clear()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


@pytest.mark.parametrize("argv, url", [
    (["--store", "s", "--open-browser", "http://localhost:8501"], "http://localhost:8501"),
    (["--store", "s", "--stores", "a", "b", "--open-browser", "http://[fe80::1]:80"], "http://[fe80::1]:80"),
    (["--store", "s"], None),
    ([], None),
])
def test_url_to_open_reads_the_script_arguments(argv, url):
    assert url_to_open(argv) == url


def test_opens_once_and_only_after_the_server_answers(server, monkeypatch):
    _, url = server
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # a proxy from the environment is not asked
    opened = []
    threading.Timer(0.6, Health.ready.set).start()
    t0 = time.monotonic()
    assert open_when_answering(url, timeout=10, interval=0.05, opener=lambda u: opened.append((u, answers(u))) or True)
    assert opened == [(url, True)] and time.monotonic() - t0 >= 0.6


def test_gives_up_without_opening_when_the_server_never_answers(server):
    _, url = server
    opened = []
    assert not open_when_answering(url, timeout=0.3, interval=0.05, opener=opened.append)
    assert opened == []


def test_reports_a_browser_that_could_not_be_started(server):
    _, url = server
    Health.ready.set()
    assert not open_when_answering(url, timeout=5, interval=0.05, opener=lambda u: False)
