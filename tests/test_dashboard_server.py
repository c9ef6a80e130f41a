"""`safevla dashboard` behaves like a server: loopback by default, a warning when exposed, and
SIGTERM or Ctrl-C leaves nothing listening."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from net_helpers import free_port

pytest.importorskip("streamlit")

REPO = Path(__file__).resolve().parent.parent



def listening(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp*) of the sockets listening on `port`."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            addr, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:
                out.append(addr)
    return out


def start(port: int, *extra: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "scoring.cli", "dashboard", "--port", str(port), "--headless",
                             *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as r:
                if r.read() == b"ok":
                    return proc
        except OSError:
            if proc.poll() is not None:
                raise AssertionError(f"the dashboard exited: {proc.stdout.read()}")
            time.sleep(0.5)
    proc.kill()
    raise AssertionError("the dashboard did not answer within 120 s")


def stop_and_wait_closed(proc: subprocess.Popen, port: int, sig: int) -> float:
    t0 = time.monotonic()
    proc.send_signal(sig)
    while time.monotonic() - t0 < 10:
        if not listening(port) and proc.poll() is not None:
            return time.monotonic() - t0
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"port {port} still listening 10 s after signal {sig}: {listening(port)}")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_listens_on_loopback_only_and_stops_on_a_signal(sig):
    port = free_port()
    proc = start(port)
    try:
        assert listening(port) and set(listening(port)) <= {"0100007F", "00000000000000000000000001000000"}
    finally:
        stop_and_wait_closed(proc, port, sig)
    out = proc.stdout.read()
    assert "Did not auto detect external IP" not in out and f"http://localhost:{port}" in out


@pytest.mark.slow
def test_exposing_it_warns_that_there_is_no_login():
    port = free_port()
    proc = start(port, "--host", "0.0.0.0")
    try:
        assert "00000000" in listening(port)
    finally:
        stop_and_wait_closed(proc, port, signal.SIGTERM)
    assert "has no login" in proc.stdout.read()
