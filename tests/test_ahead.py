"""Work ahead of the user (dashboard/ahead.py) waits until the server is quiet and never holds
the process at its exit, the detail page's neighbours get their poses only where their web
scene is converted (dashboard/web_files.py `poses_if_converted`), and the web files are sent
unzipped and cached for good (`CachedWebFiles`)."""

from __future__ import annotations

import sys
import time

import pytest

pytest.importorskip("streamlit")

from dashboard import ahead  # noqa: E402


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(ahead, "QUIET_S", 0.3)
    monkeypatch.setattr(ahead, "POLL_S", 0.02)
    ahead.request_seen()


def test_work_ahead_waits_for_a_quiet_server(quick):
    ran = []

    def job(tag):
        ran.append((tag, time.monotonic()))
        return tag

    with ahead.page_running():  # a page script runs: nothing starts
        t0 = time.monotonic()
        fut = ahead.submit(job, "a")
        time.sleep(0.6)
        assert not ran and not ahead.quiet()
    ended = time.monotonic()
    assert fut.result(timeout=10) == "a"
    assert ran[0][1] - ended >= 0.3 - 0.02  # not before the quiet spell after the page's run
    assert ran[0][1] - t0 >= 0.6
    # a request resets the quiet spell; an error in a job is dropped, the next job runs
    ahead.request_seen()
    assert not ahead.quiet()
    assert ahead.submit(lambda: 1 / 0).result(timeout=10) is None
    assert ahead.submit(job, "b").result(timeout=10) == "b"


def test_the_least_worthy_work_waits_for_every_other_job_and_process_ahead(quick, monkeypatch):
    import subprocess
    import threading

    monkeypatch.setattr(ahead, "IDLE_S", 0.5)
    monkeypatch.setattr(ahead, "_processes", [])
    order, release = [], threading.Event()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        ahead.process_started(proc)  # a conversion process, as dashboard/convert_ahead.py starts one
        first = ahead.submit(lambda: release.wait(10) and order.append("ahead"))
        last = ahead.after_the_rest(order.append, "last")
        time.sleep(1.0)
        assert order == [] and not last.done()  # a job ahead is running
        release.set()
        first.result(timeout=10)
        time.sleep(1.0)
        assert order == ["ahead"] and not last.done()  # the process still runs
    finally:
        proc.communicate(b"", timeout=30)
    last.result(timeout=10)
    assert order == ["ahead", "last"]


def test_jobs_still_queued_never_hold_the_process_at_its_exit():
    """A process whose queued job waits for a quiet server that never comes (a page run that
    never ends) exits at once: the ahead thread is a daemon."""
    import subprocess
    from pathlib import Path

    code = ("import time; from dashboard import ahead; ahead.page_running().__enter__(); "
            "ahead.submit(time.sleep, 60); print('queued')")
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                         capture_output=True, text=True, timeout=50)
    assert out.returncode == 0 and "queued" in out.stdout, out.stderr
    assert time.monotonic() - t0 < 20


@pytest.mark.render
def test_a_neighbours_poses_are_made_ahead_only_where_its_scene_is_converted(tmp_path):
    pytest.importorskip("mujoco")
    from dashboard_helpers import build_store

    from dashboard import web_files as WF
    from scoring.records.io import load_record

    import pandas as pd

    store = build_store(tmp_path / "store", 2, renderable=True)
    eps = pd.read_parquet(store / "episodes.parquet")
    rec = load_record(store / eps["trajectory"].iat[0])
    folder = tmp_path / "web"
    assert WF.poses_if_converted(rec, (), folder) is False  # no web scene: nothing converted ahead
    assert not folder.exists() or not list(folder.glob("*.bin"))
    made = WF.web_files(rec, (), folder)  # the page converts the scene and makes its poses
    (folder / made["poses"].split("/")[-1]).unlink()
    assert WF.poses_if_converted(rec, (), folder) is True
    assert (folder / made["poses"].split("/")[-1]).is_file()
    assert sorted(p.name for p in folder.glob("scene-*.bin")) == [made["scene"].split("/")[-1]]


def test_web_files_are_sent_unzipped_and_cached_for_good_other_files_untouched():
    """`CachedWebFiles` in front of an ASGI app that gzips when asked and says "public": a web
    scene or poses file comes back as the app sent it without gzip, with an immutable cache
    header; any other path keeps its request and response headers."""
    import asyncio

    from dashboard.web_files import FOREVER, WEB_PATH, CachedWebFiles

    async def inner(scope, receive, send):
        gz = any(k == b"accept-encoding" and b"gzip" in v for k, v in scope["headers"])
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"cache-control", b"public")] + ([(b"content-encoding", b"gzip")] if gz else [])})
        await send({"type": "http.response.body", "body": b"x"})

    def get(path):
        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path, "headers": [(b"accept-encoding", b"gzip, br")]}
        asyncio.run(CachedWebFiles(inner)(scope, None, send))
        return dict(sent[0]["headers"])

    scene = get(f"/app{WEB_PATH}scene-0123456789abcdef01234567-f1.bin")
    assert scene == {b"cache-control": FOREVER}
    other = get("/component/dashboard.player.safevla_timeline/player.js")
    assert other == {b"cache-control": b"public", b"content-encoding": b"gzip"}


def test_giving_a_conversions_memory_back_runs_no_full_collection():
    """`_give_back_memory` trims the heap without a full `gc.collect()`: that held the GIL
    0.1-0.5 s in a server (the page's run and the frontend's files waited) and freed nothing
    more, a conversion's arrays and models going by reference counts."""
    import gc

    from dashboard.web_files import _give_back_memory

    full = []

    def seen(phase, info):
        if info["generation"] == 2:
            full.append(phase)

    gc.callbacks.append(seen)
    try:
        _give_back_memory()
    finally:
        gc.callbacks.remove(seen)
    assert full == []
