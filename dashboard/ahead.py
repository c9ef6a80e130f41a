"""Work done ahead of a user's next step, while nobody waits for the server: the detail page
readies the episodes n / p and ‹ › open next (`dashboard.web_timeline.open_neighbours`).

Such work must not slow what a user waits for now. It runs on one thread of its own, and each
job starts only once the server has been quiet for `QUIET_S`: no page script running and no
HTTP request (a page load, its files) for that long. A job that started runs to its end, even
when the process exits meanwhile (`_end_at_exit`); jobs still queued then are dropped. The
thread keeps the normal CPU priority: a thread at a lower one that holds Python's GIL when the
browser's drawing takes the cores is not scheduled to give it back, and every other thread of
the server waits meanwhile.
Work worth less than any other (`after_the_rest`: the server start's load of a scene's
assets) waits on a thread of its own until no other is queued, running, or running in a process
of its own (`process_started`: dashboard/convert_ahead.py's conversions).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import queue
import threading
import time
from concurrent.futures import Future

QUIET_S = 2.0  # a user reading the page, not one whose next page is loading
POLL_S = 0.1

_lock = threading.Lock()
_state = {"running": 0, "last": 0.0, "ahead": 0}  # page runs; last page run or request; jobs queued or running


_jobs: queue.SimpleQueue = queue.SimpleQueue()
_worker: list[threading.Thread] = []  # started with the first job
_threads: list[threading.Thread] = []  # the ahead thread and those of `after_the_rest`, under _lock
_stopping = threading.Event()  # the process exits: no job starts any more


def _work() -> None:
    """The ahead thread: a daemon, so that jobs still queued never hold the process at its exit
    (they are head starts only); `_end_at_exit` lets the one running end."""
    while True:
        fut, fn, args = _jobs.get()
        if fut is None:  # the process exits
            return
        try:
            if _waited_for(quiet):
                _run(fut, fn, args)
            else:
                fut.cancel()
        finally:
            with _lock:
                _state["ahead"] -= 1


def _waited_for(ready) -> bool:
    """Polls `ready()` every `POLL_S` until it says True (then True) or the process exits (False)."""
    while not ready():
        if _stopping.wait(POLL_S):
            return False
    return not _stopping.is_set()


def _started(thread: threading.Thread) -> None:
    """Starts a thread of work ahead, for `_end_at_exit` to wait for (under _lock)."""
    if not _threads:
        atexit.register(_end_at_exit)
    _threads[:] = [t for t in _threads if t.is_alive()] + [thread]
    thread.start()


def _end_at_exit() -> None:
    """At the process's exit (atexit): no job starts, and the threads of work ahead end once the
    job they run has. A daemon thread still inside MuJoCo's C code, which gives Python's GIL up
    (`mj_saveModel`, a compile), when the interpreter finalizes is ended as it takes the GIL back,
    and that crashed the process (SIGSEGV, in 8 of 150 exits of a process that had just converted
    a scene and queued its pose model's write, 2026-12-02)."""
    _stopping.set()
    _jobs.put((None, None, None))
    with _lock:
        threads = list(_threads)
    for thread in threads:
        thread.join()


def _run(fut: Future, fn, args) -> None:
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn(*args))
    except Exception:  # noqa: BLE001 - a head start only: the page does the work itself and reports
        logging.getLogger(__name__).debug("work ahead %r failed", fn, exc_info=True)
        fut.set_result(None)


@contextlib.contextmanager
def page_running():
    """Around a page script's run (dashboard/app.py): no work ahead starts meanwhile."""
    with _lock:
        _state["running"] += 1
    try:
        yield
    finally:
        with _lock:
            _state["running"] -= 1
            _state["last"] = time.monotonic()


def request_seen() -> None:
    """An HTTP request reached the server (dashboard/link_open.py's middleware)."""
    with _lock:
        _state["last"] = time.monotonic()


def quiet(quiet_s: float = QUIET_S) -> bool:
    """True when no page script runs and nothing was asked of the server for `quiet_s`."""
    with _lock:
        return _state["running"] == 0 and time.monotonic() - _state["last"] >= quiet_s


def submit(fn, *args) -> Future:
    """Runs `fn(*args)` on the ahead thread once the server is quiet (errors are dropped)."""
    fut: Future = Future()
    with _lock:
        _state["ahead"] += 1
        if not _worker:
            _worker.append(threading.Thread(target=_work, name="safevla-ahead", daemon=True))
            _started(_worker[0])
    _jobs.put((fut, fn, args))
    return fut


IDLE_S = 3.0  # `after_the_rest`: longer than QUIET_S, so work queued meanwhile starts first
_processes: list = []  # processes doing work ahead (`process_started`), under _lock


def process_started(proc) -> None:
    """A process doing work ahead of the user (a `subprocess.Popen`: dashboard/convert_ahead.py's
    conversions); `after_the_rest` waits while it runs."""
    with _lock:
        _processes[:] = [p for p in _processes if p.poll() is None] + [proc]


def idle(quiet_s: float = IDLE_S) -> bool:
    """`quiet(quiet_s)`, and no work ahead queued, running or in a process of its own."""
    with _lock:
        others = _state["ahead"] or any(p.poll() is None for p in _processes)
    return not others and quiet(quiet_s)


def after_the_rest(fn, *args) -> Future:
    """Runs `fn(*args)` on a thread of its own once the server is `idle`: a head start worth
    less than any other, which must not delay them (errors are dropped). Polled every `POLL_S`."""
    fut: Future = Future()

    def wait_then_run() -> None:
        if _waited_for(idle):
            _run(fut, fn, args)
        else:
            fut.cancel()

    with _lock:
        _started(threading.Thread(target=wait_then_run, name="safevla-after-the-rest", daemon=True))
    return fut
