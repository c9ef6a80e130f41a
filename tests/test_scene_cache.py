"""Compiled scenes on disk (replay/render/scene_cache.py): a cached scene loads without compiling
and renders the same frames; a changed asset, another folder or a damaged file compiles anew;
the cache stays under its size limit; "off" writes nothing."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402

import replay.render.replayer as render  # noqa: E402
import replay.render.scene_models as models  # noqa: E402
import replay.render.scene_cache as scene_cache  # noqa: E402
from render_helpers import BIG_TEXTURE_XML, MESH_XML, H, W, toy_record, toy_scene, write_stl  # noqa: E402
from replay.render.scene_cache import SUFFIX, compile_cached, scene_digest  # noqa: E402

pytestmark = pytest.mark.render


@pytest.fixture(autouse=True)
def no_background_writer(monkeypatch):
    """A render service of another test in this process runs the background writer: here no
    service is asked, so it never acts unless a test registers one, and what these tests queue
    is written only where they say; the queue is their own too (another test's scenes may
    still wait in the process's)."""
    monkeypatch.setitem(scene_cache._WRITER, "asks", [])
    monkeypatch.setattr(scene_cache, "_PENDING", [])


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", str(folder))
    monkeypatch.setattr(models, "_MODEL_CACHE", type(models._MODEL_CACHE)())  # nothing compiled in memory
    monkeypatch.setattr(scene_cache, "_DEFER", [False])  # a render service in this process defers writes
    return folder


def no_compile(*_a, **_k):
    raise AssertionError("compiled although the scene is in the disk cache")


def test_a_cached_scene_loads_without_compiling_and_renders_the_same(cache, monkeypatch):
    rec = toy_record(mjcf=toy_scene(2))
    with render.Replayer(rec, width=W, height=H) as r:
        compiled = [r.frame(s) for s in (0, 6)]
    assert len(list(cache.glob("*" + SUFFIX))) == 1
    monkeypatch.setattr(models, "_MODEL_CACHE", type(models._MODEL_CACHE)())
    monkeypatch.setattr(models, "_compile", no_compile)
    with render.Replayer(rec, width=W, height=H) as r:
        assert all(np.array_equal(a, r.frame(s)) for a, s in zip(compiled, (0, 6)))


def test_a_changed_asset_or_folder_compiles_anew(cache, tmp_path):
    write_stl(tmp_path / "meshes" / "tet.stl")
    xml = models.resolve_scene(MESH_XML.format(tex=""), base=tmp_path, origin="test")
    calls = []

    def compile_fn():
        calls.append(1)
        return mujoco.MjModel.from_xml_string(xml)

    first = scene_digest(xml, str(tmp_path) + os.sep)
    compile_cached(xml, str(tmp_path) + os.sep, compile_fn)
    compile_cached(xml, str(tmp_path) + os.sep, compile_fn)
    assert len(calls) == 1
    # the mesh file changes (size and mtime) and stays a valid binary STL: one more triangle,
    # a copy of the last (appending bare bytes made a file MuJoCo refuses when it re-reads it)
    stl = tmp_path / "meshes" / "tet.stl"
    body = stl.read_bytes()
    count = int.from_bytes(body[80:84], "little")
    stl.write_bytes(body[:80] + (count + 1).to_bytes(4, "little") + body[84:] + body[-50:])
    assert scene_digest(xml, str(tmp_path) + os.sep) != first
    compile_cached(xml, str(tmp_path) + os.sep, compile_fn)
    assert len(calls) == 2
    assert scene_digest(xml, str(tmp_path / "other") + os.sep) != scene_digest(xml, str(tmp_path) + os.sep)


def test_a_damaged_cache_file_is_replaced(cache, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo logs the truncated file to MUJOCO_LOG.TXT in the working folder
    xml = toy_scene(1)
    model = compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    (path,) = cache.glob("*" + SUFFIX)
    path.write_bytes(path.read_bytes()[:100])
    again = compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    assert again.ngeom == model.ngeom and path.stat().st_size > 100


def test_the_cache_stays_under_its_limit_dropping_the_least_recently_used(cache, monkeypatch):
    sizes = []
    for i in range(4):
        xml = toy_scene(i)
        compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
        sizes.append(max(p.stat().st_size for p in cache.glob("*" + SUFFIX)))
        os.utime(max(cache.glob("*" + SUFFIX), key=lambda p: p.stat().st_mtime_ns), (i, i))  # clear order
    monkeypatch.setenv("SAFEVLA_SCENE_CACHE_MB", str(2.5 * max(sizes) / 2**20))
    xml = toy_scene(4)
    compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    left = list(cache.glob("*" + SUFFIX))
    assert len(left) == 2 and sum(p.stat().st_size for p in left) <= 2.5 * max(sizes)
    assert scene_digest(toy_scene(4), "/") + SUFFIX in {p.name for p in left}
    assert scene_digest(toy_scene(3), "/") + SUFFIX in {p.name for p in left}  # the most recent of the old


def test_deferred_writes_wait_for_save_pending(cache, monkeypatch):
    monkeypatch.setattr(scene_cache, "_DEFER", [True])
    xml = toy_scene(3)
    compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    assert not any(cache.glob("*" + SUFFIX))
    assert scene_cache.save_pending() == 1 and len(list(cache.glob("*" + SUFFIX))) == 1
    assert scene_cache.save_pending() == 0


def test_save_pending_stops_between_scenes_when_asked(cache, monkeypatch):
    """The render service asks it to stop as soon as a frame is queued: the scene being
    written finishes, the rest waits for the next idle moment."""
    monkeypatch.setattr(scene_cache, "_DEFER", [True])
    for n in (2, 3, 4):
        xml = toy_scene(n)
        compile_cached(xml, "/", lambda xml=xml: mujoco.MjModel.from_xml_string(xml))
    asked = []
    assert scene_cache.save_pending(stop=lambda: True) == 0 and not any(cache.glob("*" + SUFFIX))
    assert scene_cache.save_pending(stop=lambda: asked.append(1) or len(asked) > 1) == 1  # a job came after one
    assert len(list(cache.glob("*" + SUFFIX))) == 1
    assert scene_cache.save_pending() == 2 and len(list(cache.glob("*" + SUFFIX))) == 3


def test_a_shared_model_is_written_without_the_vis_lock_and_dropped_if_changed_meanwhile(cache, monkeypatch):
    """The writer takes no lock a renderer's upload needs; a file written while an upload
    changed a shared model for a moment (`render_assets.begin_model_edit`) is dropped and the
    scene written at the next call, so what is kept is the model as compiled."""
    from replay.render.render_assets import MODEL_VIS_LOCK, begin_model_edit

    monkeypatch.setattr(scene_cache, "_DEFER", [True])
    xml = toy_scene(5)
    model = compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    real_save, locked = mujoco.mj_saveModel, []

    def save_during_an_upload(m, *args):
        locked.append(MODEL_VIS_LOCK.locked())
        with MODEL_VIS_LOCK:  # a renderer's upload starts while the file is written
            begin_model_edit()
            m.tex_data[:4] = 7
        out = real_save(m, *args)
        with MODEL_VIS_LOCK:
            m.tex_data[:4] = texels
        return out

    texels = model.tex_data[:4].copy()
    monkeypatch.setattr(mujoco, "mj_saveModel", save_during_an_upload)
    assert scene_cache.save_pending() == 0 and scene_cache.pending() == 1  # dropped, left for the next call
    assert not any(cache.glob("*" + SUFFIX)) and not any(cache.glob("*.part"))
    monkeypatch.setattr(mujoco, "mj_saveModel", lambda m, *args: locked.append(MODEL_VIS_LOCK.locked())
                        or real_save(m, *args))
    assert scene_cache.save_pending() == 1 and scene_cache.pending() == 0
    assert locked == [False, False]
    (written,) = cache.glob("*" + SUFFIX)
    loaded = mujoco.MjModel.from_binary_path(str(written))
    assert np.array_equal(loaded.tex_data, model.tex_data) and np.array_equal(loaded.mesh_vert, model.mesh_vert)


def _wait_for_files(cache, n: int, what: str, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while scene_cache.pending() or len(list(cache.glob("*" + SUFFIX))) < n:
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_the_background_writer_writes_only_while_idle_at_the_lowest_priority(cache, monkeypatch):
    """`write_in_background(idle)`: a queued scene waits while the renderer is busy, and is
    written on the writer's own thread once it is idle; on Linux that thread runs at nice 19."""
    import threading
    import time

    idle = threading.Event()
    thread = scene_cache.write_in_background(idle.is_set)  # the only service asked: the autouse fixture asks none
    assert scene_cache._DEFER[0]
    xml = toy_scene(6)
    ours = cache / (scene_digest(xml, "/") + SUFFIX)
    compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    time.sleep(4 * scene_cache.WRITER_POLL_S)
    # busy: nothing written yet. Compared by path, not by count: a dashboard test earlier in this
    # process may leave a worker thread compiling (a link's scene made ahead), which queues too
    queued = [path for _, path, _ in list(scene_cache._PENDING)]
    assert not ours.exists() and queued.count(ours) == 1, queued
    idle.set()
    deadline = time.monotonic() + 30
    while not ours.is_file() or ours in [path for _, path, _ in list(scene_cache._PENDING)]:
        assert time.monotonic() < deadline, "the idle writer never wrote the scene"
        time.sleep(0.05)
    assert thread.is_alive() and thread is not threading.current_thread()
    if os.uname().sysname == "Linux":
        assert os.getpriority(os.PRIO_PROCESS, thread.native_id) == scene_cache.WRITER_NICE


def test_the_writer_waits_for_every_live_service_and_no_longer_asks_a_closed_one(cache):
    """Two render services in one process (the dashboard's and a script's, or two tests'):
    the writer writes only when both are idle; a closed service (`stop_asking`, idle forever)
    is no longer asked, and with no service left it writes nothing."""
    import time

    busy, idle = (lambda: False), (lambda: True)
    scene_cache.write_in_background(busy)
    scene_cache.write_in_background(idle)
    xml = toy_scene(11)
    compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    time.sleep(4 * scene_cache.WRITER_POLL_S)
    assert scene_cache.pending() == 1  # one of the two renders
    scene_cache.stop_asking(busy)
    _wait_for_files(cache, 1, "the writer never wrote once the busy service closed")
    scene_cache.stop_asking(idle)
    xml = toy_scene(12)
    compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    time.sleep(4 * scene_cache.WRITER_POLL_S)
    assert scene_cache.pending() == 1 and len(list(cache.glob("*" + SUFFIX))) == 1  # nobody left to ask


def test_a_half_written_file_left_by_a_stopped_process_is_removed(cache, monkeypatch):
    """A process stopped mid-write leaves a `.part` file: the next write removes it once it is
    older than `PART_STALE_S`; a recent one (another process writing now) stays."""
    cache.mkdir(parents=True)
    stale, fresh = cache / "old.part", cache / "new.part"
    for p in (stale, fresh):
        p.write_bytes(b"x" * 100)
    os.utime(stale, (0, 0))
    xml = toy_scene(2)
    compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    assert not stale.exists() and fresh.exists()


def test_off_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", "off")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    xml = toy_scene(0)
    compile_cached(xml, "/", lambda: mujoco.MjModel.from_xml_string(xml))
    assert not any(tmp_path.rglob("*" + SUFFIX))


def test_a_preview_scene_is_built_when_idle_and_renders_the_same_bytes(tmp_path, monkeypatch):
    """replay/render/preview_scene.py: after a first preview open, the service's idle time compiles
    the scene with its textures shrunk; later opens load that small model instead of the full
    one, and their frames equal the shrink-on-upload frames exactly."""
    from replay.render.offscreen import pool_for_this_thread

    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", str(tmp_path))
    monkeypatch.setattr(scene_cache, "_DEFER", [True])
    monkeypatch.setattr(models, "_MODEL_CACHE", type(models._MODEL_CACHE)())
    xml = BIG_TEXTURE_XML.replace("</worldbody>", '<body name="box" pos="0 0 .095"><freejoint/><geom size=".1 .1 .1"/>'
                                  '</body><body name="ball" pos=".4 0 .095"><freejoint/><geom size=".1"/></body></worldbody>')
    rec = toy_record(mjcf=xml)
    pool_for_this_thread().close()
    with render.Replayer(rec, width=W, height=H, camera="cam", textures="preview") as first:
        shrunk_on_upload = first.frame(0, highlight=False)
        full_texdata = first.model.ntexdata
    assert scene_cache.save_pending() == 2  # the full scene, then its preview
    models._MODEL_CACHE.clear()
    pool_for_this_thread().close()
    with render.Replayer(rec, width=W, height=H, camera="cam", textures="preview") as later:
        assert later.model.ntexdata < full_texdata / 4  # the small model, not the full one
        assert np.array_equal(later.frame(0, highlight=False), shrunk_on_upload)
    pool_for_this_thread().close()


def test_a_scene_opened_from_its_preview_shares_the_context_of_one_shrunk_on_upload(tmp_path, monkeypatch):
    """Two scenes of one asset set, one with its preview model on disk and one without (its
    preview not written yet): both upload the same shrunk textures, so they share one context
    (`render_assets_key` counts textures as uploaded), and each frame equals a render in a
    context of its own. Before, they made two contexts, depending on what was on disk (CI
    failed on it in test_offscreen before 22b29ba)."""
    from replay.render.offscreen import pool_for_this_thread

    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", str(tmp_path))
    monkeypatch.setattr(scene_cache, "_DEFER", [True])
    monkeypatch.setattr(models, "_MODEL_CACHE", type(models._MODEL_CACHE)())

    def scene(ball_rgba: str):  # another scene file, same assets (as LIBERO's episodes of one task)
        return toy_record(mjcf=BIG_TEXTURE_XML.replace(
            "</worldbody>", '<body name="box" pos="0 0 .095"><freejoint/><geom size=".1 .1 .1"/></body>'
                            f'<body name="ball" pos=".4 0 .095"><freejoint/><geom size=".1" rgba="{ball_rgba}"/>'
                            '</body></worldbody>'))

    with_preview, without = scene("1 0 0 1"), scene("0 1 0 1")
    pool = pool_for_this_thread()
    pool.close()
    with render.Replayer(with_preview, width=W, height=H, camera="cam", textures="preview"):
        pass
    assert scene_cache.save_pending() == 2  # the full scene, then its preview
    models._MODEL_CACHE.clear()
    pool.close()
    with render.Replayer(with_preview, width=W, height=H, camera="cam", textures="preview") as a, \
            render.Replayer(without, width=W, height=H, camera="cam", textures="preview") as b:
        assert a.model.ntexdata < b.model.ntexdata / 4  # the preview model, and the full one shrunk on upload
        assert a._ctx is b._ctx and pool.n_open == 1
        got = {"a": a.frame(0, highlight=False), "b": b.frame(0, highlight=False)}
    assert not np.array_equal(got["a"], got["b"])
    for name, rec in (("a", with_preview), ("b", without)):
        pool.close()
        with render.Replayer(rec, width=W, height=H, camera="cam", textures="preview") as alone:
            assert np.array_equal(alone.frame(0, highlight=False), got[name])
    pool.close()
