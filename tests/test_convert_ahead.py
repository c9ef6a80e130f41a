"""dashboard/convert_ahead.py: the web scenes of the first rows the Overview and the Episodes
page list are converted before anyone opens them, in a process at the lowest CPU priority that
ends with the server, with each scene's pose model left in the compiled-scene cache for the
server."""

import os
import subprocess
import sys
import time
from collections import OrderedDict
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("streamlit")
os.environ.setdefault("MUJOCO_GL", "egl")

pytestmark = pytest.mark.render

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "assets" / "demo" / "store"


def _demo_record(eid: str):
    from dashboard.link_open import linked_record

    return linked_record(eid, str(DEMO))


def _two_scenes() -> list[str]:
    """SBU episodes of the demo store: two of one scene, then one of another."""
    from dashboard.web_files import scene_name

    eps = pd.read_parquet(DEMO / "episodes.parquet")
    by_scene: dict[str, list[str]] = {}
    for eid in eps.loc[eps["sbu"], "episode_id"]:
        by_scene.setdefault(scene_name(_demo_record(eid)), []).append(eid)
        if len(by_scene) >= 2 and any(len(v) >= 2 for v in by_scene.values()):
            break
    first = next(v for v in by_scene.values() if len(v) >= 2)
    second = next(v for v in by_scene.values() if v is not first)
    return [first[0], first[1], second[0]]


@pytest.fixture
def scene_cache(tmp_path, monkeypatch):
    folder = tmp_path / "scenes"
    folder.mkdir()
    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", str(folder))
    return folder


def test_each_listed_scene_converted_once_with_its_pose_model_left_on_disk(tmp_path, scene_cache, monkeypatch):
    from dashboard import convert_ahead as CA
    from dashboard.web_files import scene_name
    from replay.render import scene_cache as SC
    from replay.render import scene_models

    monkeypatch.setattr(SC, "_DEFER", [True])  # as a server's render thread leaves it: written anyway
    eids = _two_scenes()
    web = tmp_path / "web"
    web.mkdir()
    got = CA.convert(web, str(DEMO), ["no/such/episode", *eids])  # an unknown episode is skipped
    names = [scene_name(_demo_record(e)) for e in eids]
    assert got == [names[0], names[2]] and names[0] == names[1] != names[2]
    assert sorted(p.name for p in web.iterdir()) == sorted(f"{n}.bin" for n in got)
    assert all((web / f"{n}.bin").stat().st_size > 100_000 for n in got)
    # the server's poses load the pose model instead of compiling it
    monkeypatch.setattr(scene_models, "_POSE_CACHE", OrderedDict())

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled, not loaded from the compiled-scene cache")

    monkeypatch.setattr(scene_models, "_compile", no_compile)
    model = scene_models.pose_model(_demo_record(eids[2]))
    # loaded, not compiled: the conversion's model, kept as the pose model, textures shrunk for
    # the browser (a texture-free compile has one texel per texture)
    assert model.nbody > 1 and model.ntex > 0 and max(model.tex_width) > 1


def test_at_most_max_scenes_per_list(tmp_path, scene_cache, monkeypatch):
    from dashboard import convert_ahead as CA

    monkeypatch.setattr(CA, "MAX_SCENES", 1)
    eids = _two_scenes()
    assert len(CA.convert(tmp_path, str(DEMO), [eids[2], eids[0]])) == 1
    assert len(list(tmp_path.glob("scene-*.bin"))) == 1


def test_started_once_per_list_at_the_lowest_priority(tmp_path, scene_cache, monkeypatch):
    from dashboard import convert_ahead as CA
    from dashboard.web_files import scene_name

    monkeypatch.setattr(CA, "_state", {"proc": None, "lists": set(), "looked_at": set()})
    monkeypatch.delenv("SAFEVLA_NO_PREWARM", raising=False)
    eid = _two_scenes()[2]
    proc = CA.start(DEMO, [eid], tmp_path)
    assert proc is not None
    niceness = []
    while proc.poll() is None and not niceness:
        try:
            nice = os.getpriority(os.PRIO_PROCESS, proc.pid)
        except OSError:
            break
        if nice:
            niceness.append(nice)
        time.sleep(0.01)
    assert proc.wait(timeout=120) == 0
    assert niceness == [19]
    assert (tmp_path / f"{scene_name(_demo_record(eid))}.bin").is_file()
    assert CA.start(DEMO, [eid], tmp_path) is None  # this list was started before
    monkeypatch.setenv("SAFEVLA_NO_PREWARM", "1")
    assert CA.start(DEMO, [eid, "other"], tmp_path) is None  # the cold server of the benchmarks and tests


def test_the_process_ends_when_its_server_does():
    """A server (here a process that starts the watcher and ends a second later) passes its
    pid, as `start` does; its converter ends within a poll of the server's end."""
    child = ("import os, sys, time; sys.path.insert(0, sys.argv[1]); "
             "from dashboard.convert_ahead import _die_with_parent; "
             "_die_with_parent(int(sys.argv[2])) or sys.exit(3); time.sleep(120)")
    server = ("import os, subprocess, sys, time; "
              f"p = subprocess.Popen([sys.executable, '-c', {child!r}, sys.argv[1], str(os.getpid())], "
              "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); print(p.pid, flush=True); time.sleep(1.0)")
    out = subprocess.run([sys.executable, "-c", server, str(ROOT)], stdout=subprocess.PIPE, text=True, timeout=60)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return  # gone
        if state == "Z":
            return  # ended, its exit not yet collected by its new parent
        time.sleep(0.1)
    os.kill(pid, 9)
    pytest.fail("the process outlived its server by 30 s")


@pytest.mark.parametrize("page", ["overview", "episodes"])
def test_a_listing_page_converts_its_first_rows_once_the_server_is_quiet(page, tmp_path, scene_cache, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from dashboard import convert_ahead as CA
    from dashboard.web_files import scene_name, web_dir

    monkeypatch.setattr(CA, "_state", {"proc": None, "lists": set(), "looked_at": set()})
    monkeypatch.delenv("SAFEVLA_NO_PREWARM", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr("sys.argv", ["app.py", "--store", str(DEMO)])
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
    at.query_params["page"] = page  # the page opened first (no other page's list)
    at.run()
    assert not at.exception and at.title[0].value == page.capitalize()
    listed = max((t.value for t in at.dataframe if "episode_id" in t.value), key=len)  # the page's episode list
    first = scene_name(_demo_record(listed["episode_id"].iat[0]))
    deadline = time.monotonic() + 60
    while not CA._state["lists"]:
        assert time.monotonic() < deadline, "no conversion started once the server was quiet"
        time.sleep(0.2)
    (started,) = CA._state["lists"]  # this page's list, its first rows
    assert started[1][:3] == tuple(listed["episode_id"].iloc[:3])
    deadline = time.monotonic() + 120
    while not (web_dir() / f"{first}.bin").is_file():
        assert time.monotonic() < deadline, "the first row's scene was not converted ahead"
        time.sleep(0.2)
    proc = CA._state["proc"]
    assert proc is not None and proc.wait(timeout=120) == 0
    assert len(list(web_dir().glob("scene-*.bin"))) <= CA.MAX_SCENES


def test_nothing_started_when_the_listed_scenes_are_on_disk_or_have_no_replay(tmp_path, scene_cache, monkeypatch):
    import types

    from dashboard import convert_ahead as CA
    from dashboard import stores
    from dashboard_helpers import build_store

    monkeypatch.setattr(CA, "_state", {"proc": None, "lists": set(), "looked_at": set()})
    monkeypatch.delenv("SAFEVLA_NO_PREWARM", raising=False)
    demo = types.SimpleNamespace(data=stores.load_store(str(DEMO)))  # the run context's store
    eids = _two_scenes()
    CA.convert(tmp_path, str(DEMO), eids)
    assert CA._start_if_missing(demo, eids, tmp_path) is None
    assert CA._state["proc"] is None
    synthetic = build_store(tmp_path / "synthetic", 4, renderable=False)  # trajectories without replay state
    monkeypatch.setenv("SAFEVLA_STORES", str(synthetic))
    plain = types.SimpleNamespace(data=stores.load_store(str(synthetic)))
    ids = plain.data.episodes["episode_id"].tolist()
    assert CA._start_if_missing(plain, ids, tmp_path / "web") is None
    (tmp_path / "empty").mkdir()
    done = []
    proc = CA._start_if_missing(demo, eids, tmp_path / "empty", lambda: done.append(proc.poll()))  # started
    assert proc is not None and proc.wait(timeout=120) == 0
    deadline = time.monotonic() + 60
    while not done:  # `then`, queued as work ahead once the process ended
        assert time.monotonic() < deadline, "then() never ran after the process"
        time.sleep(0.1)
    assert done == [0]


def test_a_list_refused_while_another_converts_is_looked_at_again(tmp_path, monkeypatch):
    from dashboard import convert_ahead as CA

    monkeypatch.delenv("SAFEVLA_NO_PREWARM", raising=False)
    busy = subprocess.Popen(["sleep", "60"])  # another list's process, still converting
    key = (str(DEMO), ("a", "b"), str(tmp_path))
    monkeypatch.setattr(CA, "_state", {"proc": busy, "lists": set(), "looked_at": {key}})
    try:
        assert CA._start_or_look_again(DEMO, ["a", "b"], tmp_path) is None
        assert key not in CA._state["looked_at"]  # the page's next run queues it again
    finally:
        busy.kill()
        busy.wait()


def test_a_scene_the_server_converts_leaves_its_pose_model_on_disk_once_quiet(tmp_path, scene_cache, monkeypatch):
    """A conversion in the server (a page's, a link's) keeps the conversion's model as the
    scene's pose model; once the server is quiet it is written to the compiled-scene cache, so
    a restarted server loads it for another episode's poses instead of compiling it."""
    from dashboard import ahead
    from dashboard.web_files import prepare_scene
    from replay.render import scene_cache as SC
    from replay.render import scene_models

    monkeypatch.setattr(SC, "_DEFER", [True])  # as a server's render thread leaves it: written anyway
    monkeypatch.setattr(ahead, "QUIET_S", 0.2)
    monkeypatch.setattr(scene_models, "_POSE_CACHE", OrderedDict())
    eid = _two_scenes()[2]
    with ahead.page_running():  # the page that converts it: nothing written meanwhile
        assert prepare_scene(_demo_record(eid), tmp_path / "web")
        time.sleep(0.5)
        assert not list(scene_cache.glob("*.mjb"))
    ahead.submit(lambda: None).result(timeout=120)  # the jobs queued before it are done
    assert len(list(scene_cache.glob("*.mjb"))) == 1
    monkeypatch.setattr(scene_models, "_POSE_CACHE", OrderedDict())  # a restarted server

    def no_compile(*args, **kwargs):
        raise AssertionError("compiled, not loaded from the compiled-scene cache")

    monkeypatch.setattr(scene_models, "_compile", no_compile)
    assert scene_models.pose_model(_demo_record(eid)).nbody > 1


def test_the_detail_pages_neighbours_are_listed_once_its_picture_is_drawn(tmp_path, scene_cache, monkeypatch):
    """The detail page hands the episodes n / p open next to `convert_ahead.listed` (their
    scenes converted ahead where not on disk) once its first picture is drawn, not before."""
    from streamlit.testing.v1 import AppTest

    from dashboard import convert_ahead as CA
    from dashboard.web_timeline import DRAWN_KEY

    calls = []
    monkeypatch.setattr(CA, "listed", lambda c, eids, then=None: calls.append(tuple(eids)))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr("sys.argv", ["app.py", "--store", str(DEMO)])
    eid = _two_scenes()[0]
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=120)
    at.query_params["page"], at.query_params["ep"] = "detail", eid
    at.run()
    assert not at.exception and calls == []  # the tables wait for the player's first picture: nothing ahead yet
    at.session_state[DRAWN_KEY] = at.session_state["_timeline_tag"]  # what the player's value "drawn" sets
    at.run()
    assert not at.exception and calls, "no neighbours listed once the picture was drawn"
    assert all(len(eids) == 2 and eid not in eids for eids in calls)
