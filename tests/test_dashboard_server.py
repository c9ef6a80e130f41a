"""`safevla dashboard` behaves like a server: loopback by default, a warning when exposed,
SIGTERM or Ctrl-C leaves nothing listening, and a first run on a fresh machine (no
~/.streamlit, no terminal) starts without Streamlit's onboarding prompt."""

from __future__ import annotations

import contextlib
import os
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


def start(port: int, *extra: str, cmd: list[str] | None = None, limit: float = 120, **popen) -> subprocess.Popen:
    """Starts `cmd` (default: `safevla dashboard --port PORT --headless` from the checkout) and
    waits until it answers Streamlit's health check; `popen` goes to subprocess.Popen."""
    cmd = cmd or [sys.executable, "-m", "scoring.cli", "dashboard", "--port", str(port), "--headless"]
    popen.setdefault("cwd", REPO)
    proc = subprocess.Popen([*cmd, *extra], **popen, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + limit
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
    raise AssertionError(f"the dashboard did not answer within {limit:.0f} s: {proc.stdout.read()}")


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


def safevla() -> list[str]:
    """The installed `safevla` command of this environment (a new user's first command)."""
    script = Path(sys.executable).with_name("safevla")
    return [str(script)] if script.exists() else [sys.executable, "-m", "scoring.cli"]


def fresh_machine_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment as a new user's first login has it: an empty HOME, no display, and no
    Streamlit settings (STREAMLIT_SERVER_HEADLESS would hide the onboarding prompt)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("STREAMLIT_", "XDG_")) and k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER")}
    return {**env, "HOME": str(home), **extra}


def start_fresh(port: int, home: Path, *extra: str, **env: str) -> subprocess.Popen:
    """`safevla dashboard --port PORT` without a terminal (stdin /dev/null), in its own process
    group, from outside the checkout (the repository's .streamlit/config.toml is not read)."""
    home.mkdir(exist_ok=True)
    return start(port, *extra, cmd=[*safevla(), "dashboard", "--port", str(port)], limit=60, cwd=home,
                 env=fresh_machine_env(home, **env), stdin=subprocess.DEVNULL, start_new_session=True)


def stop_group(proc: subprocess.Popen) -> str:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out


@pytest.mark.slow
def test_first_run_without_a_terminal_starts_with_no_onboarding_prompt(tmp_path):
    port = free_port()
    proc = start_fresh(port, tmp_path / "home")
    out = stop_group(proc)
    assert "Welcome to Streamlit" not in out and "Email" not in out and "gatherUsageStats" not in out
    assert f"http://localhost:{port}" in out


def fake_browser(folder: Path) -> Path:
    """An executable for $BROWSER that notes, in the file returned, the URL it is given and what
    the server's health check answered at that moment."""
    (folder / "note_url.py").write_text(
        "import sys, urllib.request\n"
        "health = urllib.request.urlopen(sys.argv[1] + '/_stcore/health', timeout=5).read().decode()\n"
        f"open({str(folder / 'opened')!r}, 'a').write(sys.argv[1] + ' ' + health + '\\n')\n")
    (folder / "browser").write_text(f'#!/bin/sh\nexec "{sys.executable}" "{folder / "note_url.py"}" "$@"\n')
    (folder / "browser").chmod(0o755)
    return folder / "opened"


@pytest.mark.slow
@pytest.mark.parametrize("headless", [False, True])
def test_opens_the_browser_once_it_answers_when_there_is_a_display(tmp_path, headless):
    port = free_port()
    opened = fake_browser(tmp_path)
    proc = start_fresh(port, tmp_path / "home", *(["--headless"] if headless else []),
                       DISPLAY=":99", BROWSER=str(tmp_path / "browser"))
    try:
        deadline = time.monotonic() + (3 if headless else 30)
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        out = stop_group(proc)
    if headless:
        assert not opened.exists()
    else:
        assert opened.read_text() == f"http://localhost:{port} ok\n", out
    assert "Welcome to Streamlit" not in out and "Email" not in out
