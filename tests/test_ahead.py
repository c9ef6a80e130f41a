"""Work ahead of the user (dashboard/ahead.py) waits until the server is quiet, never holds
the process at its exit and ends the job it runs before it, the detail page's neighbours get
their poses only where their web scene is converted (dashboard/web_files.py
`poses_if_converted`), and the web files are sent unzipped and cached for good
(`CachedWebFiles`)."""

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


AT_EXIT_CHILD = """import sys, threading
import mujoco, numpy as np
from mujoco import rollout
from dashboard import ahead
ball = "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body></worldbody></mujoco>"
model = mujoco.MjModel.from_xml_string(ball)
data = mujoco.MjData(model)
state = np.zeros((1, mujoco.mj_stateSize(model, mujoco.mjtState.mjSTATE_FULLPHYSICS)))
mujoco.mj_getState(model, data, state[0], mujoco.mjtState.mjSTATE_FULLPHYSICS)
started = threading.Event()

def in_mujoco():  # a second or more in MuJoCo's C code, which gives the GIL up
    started.set()
    rollout.rollout(model, data, state, nstep=600_000)
    print("ended", flush=True)

getattr(ahead, sys.argv[1])(in_mujoco)
started.wait(60)
print("exiting", flush=True)
"""


@pytest.mark.parametrize("queued_by", ["submit", "after_the_rest"])
def test_a_job_running_in_mujoco_at_the_exit_ends_before_the_process(queued_by):
    """The process exits while a job ahead (or after the rest) runs in MuJoCo's C code: the job
    ends first, and the process exits cleanly. Ended in the middle, such a thread crashed the
    process (SIGSEGV) as it took Python's GIL back during the interpreter's finalization."""
    import subprocess
    from pathlib import Path

    pytest.importorskip("mujoco")
    out = subprocess.run([sys.executable, "-c", AT_EXIT_CHILD, queued_by],
                         cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["exiting", "ended"]


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


def test_web_files_are_sent_unzipped_and_cached_for_good_other_files_untouched(monkeypatch):
    """`CachedWebFiles` in front of an ASGI app that gzips when asked and says "public": a web
    scene or poses file comes back as the app sent it without gzip, with an immutable cache
    header; the player's code without gzip, with an ETag of its content and "no-cache", and a
    request naming that ETag gets "304 Not Modified" with no body, until the file changes; an
    answer other than 200 and any path outside the player keep their headers."""
    import asyncio
    import threading

    from dashboard import web_files as WF
    from dashboard.web_files import FOREVER, PLAYER_PATH, REVALIDATE, WEB_PATH, CachedWebFiles

    # the middleware marks its process as `safevla dashboard`'s server: not this test's process
    monkeypatch.setattr(WF, "_SERVED_HERE", threading.Event())
    served = {"body": b"const three = 1;", "status": 200}

    async def inner(scope, receive, send):
        gz = any(k == b"accept-encoding" and b"gzip" in v for k, v in scope["headers"])
        await send({"type": "http.response.start", "status": served["status"],
                    "headers": [(b"cache-control", b"public")] + ([(b"content-encoding", b"gzip")] if gz else [])})
        await send({"type": "http.response.body", "body": served["body"][:5], "more_body": True})
        await send({"type": "http.response.body", "body": served["body"][5:]})

    def get(path, *extra):
        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "method": "GET", "path": path,
                 "headers": [(b"accept-encoding", b"gzip, br"), *extra]}
        asyncio.run(CachedWebFiles(inner)(scope, None, send))
        return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])

    assert get(f"/app{WEB_PATH}scene-0123456789abcdef01234567-f1.bin")[1] == {b"cache-control": FOREVER}
    code = f"/app{PLAYER_PATH}vendor/three.core.js"
    status, headers, body = get(code)
    etag = headers.pop(b"etag")
    assert (status, headers, body) == (200, {b"cache-control": REVALIDATE}, served["body"])
    assert get(code, (b"if-none-match", etag)) == (304, {b"etag": etag, b"cache-control": REVALIDATE}, b"")
    assert get(code, (b"if-none-match", b'W/"other", ' + etag))[0] == 304
    assert get(code, (b"if-none-match", b'"other"'))[:3:2] == (200, served["body"])
    served["body"] = b"const three = 2;"  # a new version of the file: sent whole, under another ETag
    status, headers, body = get(code, (b"if-none-match", etag))
    assert (status, body) == (200, served["body"]) and headers[b"etag"] not in (etag, None)
    served["status"] = 404
    assert get(code, (b"if-none-match", etag))[:2] == (404, {b"cache-control": b"public"})
    served["status"] = 200
    other = get("/static/js/index.js")
    assert other[:2] == (200, {b"cache-control": b"public", b"content-encoding": b"gzip"})


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
