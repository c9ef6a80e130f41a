"""The web scenes of the episodes a page lists for the user to open next, converted before
anyone asks, in a process of their own at the lowest CPU priority.

The Overview lists the worst successful-but-unsafe episodes and the Episodes page its table's
first rows, and a researcher opens those first; the detail page's n / p open its neighbours
(`web_timeline.open_neighbours`). Converting a never-opened LIBERO scene's web
scene (MuJoCo's compile, the textures' decoding, `replay.render.web_scene`) is about 2 CPU-s,
most of a first picture's wait (docs/benchmarks.md). Done in the server, it would take the
cores, and Python's GIL, from the page the user is reading (`web_files.poses_if_converted`
leaves it for that reason). In a process at nice 19, the system runs it only on cores nothing
else wants: a row opened after it finds its scene on disk, and one opened before it is
converted by the page as always (each writes the file whole, `web_scene.cached_file`;
whichever comes second finds it there).

It starts once the server is quiet (`dashboard.ahead`: the list drawn, the user reading it),
when one of the first `LISTED_ROWS` rows' scenes is not on disk. One such process per server at
a time, for at most `MAX_SCENES` scenes, each list once per server; none where
$SAFEVLA_NO_PREWARM is set (the cold server the benchmarks and tests measure). The process
reads the store as a link's head start does (`link_open.linked_record`: only the store and its
archive) and ends with the server.

    python dashboard/convert_ahead.py --parent PID FOLDER STORE EPISODE_ID...
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

MAX_SCENES = 4  # of a list's first rows, the distinct scenes converted, first rows first
LISTED_ROWS = 10  # of a list, the first rows whose scenes are looked at
PARENT_POLL_S = 0.5
_lock = threading.Lock()
_state: dict = {"proc": None, "lists": set(), "looked_at": set()}  # lists started; lists queued for a look


def _list_key(store, eids, folder: Path) -> tuple:
    """What identifies a list for `start` and `listed`: the store, the episodes, the folder."""
    return str(store), tuple(str(e) for e in eids), str(folder)


def start(store: str | Path, eids, folder: Path) -> subprocess.Popen | None:
    """Starts converting the web scenes of episodes `eids` of `store` (in their order, distinct
    scenes, up to `MAX_SCENES`) into `folder`, in a process at the lowest priority; the process,
    or None when one is still running, this list was started before, or the warm-up is off."""
    key = _list_key(store, eids, folder)
    eids = key[1]
    if not eids or os.environ.get("SAFEVLA_NO_PREWARM"):
        return None
    with _lock:
        running = _state["proc"]
        if key in _state["lists"] or (running is not None and running.poll() is None):
            return None
        _state["lists"].add(key)
        proc = _state["proc"] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--parent", str(os.getpid()), str(folder), str(store),
             *eids],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)
    from dashboard import ahead

    ahead.process_started(proc)  # the server's least worthy work waits for it
    return proc


def listed(c, eids, then=None):
    """After a page drew a list of episodes (`eids`, first rows first: the Overview's worst
    unsafe successes, the Episodes table): their web scenes converted ahead where this
    session's player draws them (WebGL, replay available), once the server is quiet
    (`dashboard.ahead`: the page drawn, the user reading it), so that the process's start does
    not slow the page's own drawing, and only if one of those scenes is not on disk yet
    (`_start_if_missing`); `then()` is queued as work ahead once that process has ended. A
    Future, or None when there is nothing to do. `c`: the run context (`dashboard.common.Ctx`)."""
    from dashboard import ahead, cached
    from dashboard.web_files import uses_frames, web_dir

    if os.environ.get("SAFEVLA_NO_PREWARM") or uses_frames() or not cached.replay_status()[0]:
        return None
    eids = [str(e) for e in list(eids)[:LISTED_ROWS]]
    if not eids or c.data.missing_trajectory.all():  # no trajectories (a scores-only store): nothing to convert
        return None
    folder = web_dir()
    key = _list_key(c.data.path, eids, folder)
    with _lock:
        if key in _state["looked_at"]:  # every rerun of the page lists them again
            return None
        _state["looked_at"].add(key)
    return ahead.submit(_start_if_missing, c, eids, folder, then)


def _start_if_missing(c, eids: list[str], folder: Path, then=None) -> subprocess.Popen | None:
    """On the ahead thread, off the page's run: `start` unless the scenes it would convert are
    on disk already (the records are the pages' own, `cached.replay_record`: read once per
    server; an episode without a trajectory or replay state is passed over, as the converter
    does)."""
    from dashboard import cached

    def record(eid: str):
        i = c.data.index_of(eid)
        return None if i is None or c.data.missing_trajectory[i] else cached.replay_record(c.data, i)

    if any(not (folder / f"{name}.bin").is_file() for _, name in _first_scenes(eids, record)):
        proc = _start_or_look_again(c.data.path, eids, folder)
        if proc is not None and then is not None:
            _after(proc, then)
        return proc
    return None


def _after(proc: subprocess.Popen, then) -> None:
    """Queues `then()` as work ahead once `proc` has ended (waited for on a thread of its own)."""
    from dashboard import ahead

    def wait() -> None:
        proc.wait()
        ahead.submit(then)

    threading.Thread(target=wait, name="safevla-convert-ahead-then", daemon=True).start()


def _start_or_look_again(store, eids: list[str], folder: Path) -> subprocess.Popen | None:
    """`start`; when another list's process is still running, the page's next run of this
    list looks again (`listed`)."""
    proc = start(store, eids, folder)
    if proc is None:
        key = _list_key(store, eids, folder)
        with _lock:
            if key not in _state["lists"]:
                _state["looked_at"].discard(key)
    return proc


def _die_with_parent(parent: int) -> bool:
    """Ends this process once the server `parent` has ended (its parent then changes); False
    if it has already. Watched from a thread: Linux's PR_SET_PDEATHSIG fires when the thread
    that started the process ends, here the page's script run, long before the server."""
    if os.getppid() != parent:
        return False

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(0)

    threading.Thread(target=watch, name="safevla-convert-ahead-parent", daemon=True).start()
    return True


def _first_scenes(eids, record_of):
    """(record, web scene name) of the first `MAX_SCENES` distinct scenes of episodes `eids`,
    in their order; an episode whose record cannot be read (`record_of` raises or gives None:
    unknown, no trajectory or replay state, a file outside the store) is passed over."""
    from dashboard.web_files import scene_name

    seen: list[str] = []
    for eid in eids:
        try:
            rec = record_of(eid)
            name = scene_name(rec) if rec is not None else None
        except Exception:  # noqa: BLE001 - a head start only: the page opens the episode itself and reports
            continue
        if name is None or name in seen:
            continue
        seen.append(name)
        yield rec, name
        if len(seen) == MAX_SCENES:
            return


def convert(folder: Path, store: str, eids) -> list[str]:
    """The web scenes of episodes `eids` of `store` converted into `folder` (distinct scenes,
    in order, up to `MAX_SCENES`); the names of those it converted or found there. An episode
    that cannot be read (unknown, no replay state, a file outside the store) is skipped."""
    from dashboard.link_open import linked_record
    from dashboard.web_files import prepare_scene

    scenes: list[str] = []
    for rec, name in _first_scenes(eids, lambda eid: linked_record(eid, store)):
        prepare_scene(rec, folder)
        _pose_model_to_disk(rec)
        scenes.append(name)
    return scenes


def _pose_model_to_disk(record) -> None:
    """The scene's pose model in the compiled-scene cache, so that the server's poses of its
    episodes load it instead of compiling it (`scene_models.pose_model_to_disk`)."""
    from replay.render.scene_models import pose_model_to_disk

    try:
        pose_model_to_disk(record)
    except Exception:  # noqa: BLE001 - a head start only: the page compiles it and reports
        pass


def main(argv: list[str]) -> int:
    if len(argv) < 5 or argv[0] != "--parent" or not argv[1].isdigit():
        print("usage: " + __doc__.rsplit("\n\n", 1)[-1].strip(), file=sys.stderr)
        return 2
    try:
        os.nice(19)  # before any thread: the texture decoders started later inherit it
    except (OSError, AttributeError):  # no lower priority here: not worth the cores the user's pages need
        return 0
    if not _die_with_parent(int(argv[1])):
        return 0
    from dashboard import ahead

    with ahead.page_running():  # no work ahead here: `convert` stores each pose model itself, before it exits
        convert(Path(argv[2]), argv[3], argv[4:])
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main(sys.argv[1:]))
