"""Replay render speed on a real LIBERO scene, highlight overhead, and MP4 export time.

A 300-step libero_spatial task-0 rollout (a scripted sweep of the arm over the table,
recorded as qpos/qvel with the scene's MJCF) is built once into a cache directory. Then,
at 640x480 on this machine's CPU (EGL through Mesa llvmpipe):

- `Replayer.frame` fps with every frame highlighted (the bowl red, its contacts with the
  table as discs, the force arrow, border, caption) and with no highlight;
- bare `mujoco.Renderer` fps on the same model, camera, geom groups and render settings
  (set qpos/qvel, mj_forward, update_scene, render), measured interleaved frame by frame
  with the replayer in the same run, and their ratio (target <= 1.3);
- bare fps with the model's own visual quality (4x MSAA, reflections), for reference;
- wall time of `export_clip` to MP4 for the 300 steps (target < 40 s).

Prints one JSON line. Usage: python benchmarks/bench_render.py [--cache DIR] [--frames 40]

`--first-frame` measures instead the first frame of a scene the process has not opened,
the way the dashboard's render service meets it: each measurement is a fresh interpreter
(MuJoCo imported, nothing compiled, no GL context) that opens a replayer on a demo episode
at the dashboard's 480x360 and renders one step, then opens another episode of the same
scene file. Per scene, in this order:
- `before`: the code at `--baseline-rev` (default: ffcaab8, before shared GL contexts and
  the scene cache), from `git archive`; without git, this code with the scene cache off;
- `cold`: this code, the scene not in the disk cache (compiles it and stores it);
- `cold_preview`: as `cold`, with the dashboard's "preview" textures, in a cache of its
  own; after its frame it stores the full scene and the preview scene (small textures);
- `cached` / `cached_preview`: this code, the scene compiled by an earlier process (in the
  disk cache; for preview, the small-texture scene), interleaved `--repeats` times.
Ratios: median `before` / median `cached` (and `cached_preview`), `cached` / `cached_preview`. Usage:
python benchmarks/bench_render.py --first-frame [--scenes 3] [--repeats 2] [--baseline-rev REV]

`--mixed-previews` measures two libero_spatial demo scene files of one asset set, the first
opened from its preview scene on disk, the second with no preview yet (shrunk on upload): the
second's open and first frame, and the GL contexts held, this code against `--baseline-rev`
(a446322 for the figures of 2026-11-27) in alternating fresh processes. Usage:
python benchmarks/bench_render.py --mixed-previews --baseline-rev a446322 [--rounds 3] [--repeats 5]

`--player` measures `RenderService.frames` (the in-browser player's violation-first
pre-render, JPEG-encoded) against frame-by-frame `frame()` calls in the same run, and how
soon the violating frame is ready. Usage: python benchmarks/bench_render.py --player [--frames 40]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from replay.render.export import export_clip  # noqa: E402
from replay.render.highlight import Violation  # noqa: E402
from replay.render.replayer import Replayer, load_model  # noqa: E402
from replay.scene.assets import portable_scene  # noqa: E402
from scoring.records.io import load_record, save_record  # noqa: E402
from scoring.records.schema import EpisodeRecord  # noqa: E402

STEPS = 300
WIDTH, HEIGHT = 640, 480
TARGET_BODIES = ("akita_black_bowl_1_main", "table")  # in contact at every step: discs and arrow drawn


def build_episode(cache: Path) -> Path:
    """Records a 300-step scripted sweep on libero_spatial task 0 (once; reused from `cache`)."""
    path = cache / "libero_sweep_v2.npz"
    if path.exists():
        return path
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs import OffScreenRenderEnv

    suite = benchmark.get_benchmark_dict()["libero_spatial"]()
    task = suite.get_task(0)
    bddl = os.path.join(get_libero_path("bddl_files"), task.problem_folder, task.bddl_file)
    env = OffScreenRenderEnv(bddl_file_name=bddl, has_renderer=False, has_offscreen_renderer=False,
                             use_camera_obs=False)
    try:
        env.reset()
        env.set_init_state(suite.get_task_init_states(0)[0])
        d = env.sim.data._data
        qpos, qvel = [], []
        for t in range(STEPS):
            a = np.zeros(7)
            a[:3] = 0.6 * np.array([np.sin(t / 15), np.cos(t / 20), np.sin(t / 25) - 0.2])
            a[6] = 1.0 if (t // 60) % 2 else -1.0
            env.step(a)
            qpos.append(d.qpos.copy())
            qvel.append(d.qvel.copy())
        cache.mkdir(parents=True, exist_ok=True)
        (cache / "libero_sweep.xml").write_text(portable_scene(env.sim.model.get_xml()))
    finally:
        env.close()
    rec = EpisodeRecord.build(
        episode_id="bench-libero-sweep", benchmark="libero", task_id="libero_spatial/0", success=True, dt=0.05,
        body_roles={"gripper0_rightfinger": "gripper", "akita_black_bowl_1_main": "target", "table": "furniture"},
        eef_pos=np.zeros((STEPS, 3)),
        meta={"success_step": STEPS - 1},
        replay={"mjcf": "libero_sweep.xml", "qpos": np.array(qpos), "qvel": np.array(qvel), "camera": "agentview"})
    return save_record(rec, path)


def bare_renderer(rp: Replayer, *, model_quality: bool):
    """A plain mujoco.Renderer on a copy of the replayer's model and camera (optionally the model's own quality)."""
    m = load_model(rp.record)  # the portable scene, resolved on this machine
    m.vis.global_.offwidth, m.vis.global_.offheight = max(m.vis.global_.offwidth, WIDTH), \
        max(m.vis.global_.offheight, HEIGHT)
    if not model_quality:
        m.vis.quality.offsamples = 0
    r = mujoco.Renderer(m, HEIGHT, WIDTH)
    if not model_quality:
        r.scene.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = 0
    opt = mujoco.MjvOption()
    opt.geomgroup[0] = 0  # as the replayer does for robosuite models: visual geoms only
    return m, mujoco.MjData(m), r, opt


def bare_frame(m, d, r, opt, rec: EpisodeRecord, step: int, camera: str) -> np.ndarray:
    d.qpos[:] = rec.replay.qpos[step]
    d.qvel[:] = rec.replay.qvel[step]
    mujoco.mj_forward(m, d)
    r.update_scene(d, camera=camera, scene_option=opt)
    return r.render()


ROOT = Path(__file__).resolve().parent.parent
BASELINE_REV = "ffcaab8"  # before the render work of 2026-11-23: one GL context per replayer, no scene cache
FIRST_FRAME_CHILD = """
import json, sys, time
try:
    import replay.render.scene_models as render
    from replay.render.replayer import Replayer
    from scoring.records.io import load_record
except ImportError:  # a baseline from before the subpackages (37491ee): flat modules
    import replay.render as render
    from replay.render import Replayer
    from scoring.io import load_record
try:  # as the dashboard's render service: write compiled scenes once no frame waits
    from replay.render.scene_cache import defer_saves, save_pending
    defer_saves()
except ImportError:  # the baseline has no scene cache
    save_pending = lambda: None
out = {}
textures = {"textures": sys.argv[3]} if len(sys.argv) > 3 else {}  # the baseline has no textures option
for name, path in (("first", sys.argv[1]), ("same_scene", sys.argv[2])):
    t = time.perf_counter()
    rec = load_record(path)
    if textures.get("textures") == "preview" and render.preview_scene_model(rec, 512) is not None:
        pass  # the small-texture scene from the disk cache: what the replayer will use
    else:
        getattr(render, "scene_model", render.load_model)(rec)  # compile or load (the baseline also copies)
    model = time.perf_counter()
    r = Replayer(rec, width=480, height=360, **textures)
    opened = time.perf_counter()
    r.frame(rec.n_steps // 2)
    out[name] = {"model_s": model - t, "open_s": opened - model, "total_s": time.perf_counter() - t}
    r.close()
save_pending()
print(json.dumps(out))
"""


def demo_scene_pairs(n: int) -> list[tuple[Path, Path]]:
    """(episode, another episode of the same MJCF file) for `n` distinct demo scene files,
    taking the suites in turn (the libero_goal tasks share one scene file)."""
    by_scene: dict[Path, list[Path]] = {}
    for f in sorted((ROOT / "assets" / "demo" / "archive").rglob("*.npz")):
        rec = load_record(f)
        if rec.replay is not None and not rec.replay.mjcf_is_xml:
            by_scene.setdefault((f.parent / rec.replay.mjcf).resolve(), []).append(f)
    by_suite: dict[str, list] = {}
    for files in by_scene.values():
        if len(files) >= 2:
            by_suite.setdefault(files[0].parent.parent.parent.name, []).append((files[0], files[1]))
    turns = [pair for group in zip(*by_suite.values()) for pair in group]
    return turns[:n]


def baseline_tree(rev: str, tmp: Path) -> Path | None:
    """The code at git revision `rev`, extracted under `tmp`, its assets this tree's (the
    episodes and scenes are the same files); None without git or that revision."""
    import shutil
    import subprocess

    tree = tmp / "baseline"
    try:
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        shutil.rmtree(tree / "assets")
        (tree / "assets").symlink_to(ROOT / "assets")
    except (OSError, subprocess.CalledProcessError):
        return None
    return tree


def run_child(script: str, tree: Path, cache: str, *args) -> dict:
    """`script` run by a fresh interpreter on the code at `tree` with the scene cache `cache`;
    the JSON of its last output line."""
    import subprocess

    env = {**os.environ, "MUJOCO_GL": "egl", "PYTHONPATH": str(tree), "SAFEVLA_SCENE_CACHE": cache}
    got = subprocess.run([sys.executable, "-c", script, *map(str, args)], cwd=tree, env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(got.stdout.strip().splitlines()[-1])


def first_frame(args) -> None:
    def child(tree: Path, cache: str, pair, *textures: str) -> dict:
        return run_child(FIRST_FRAME_CHILD, tree, cache, *pair, *textures)

    pairs = demo_scene_pairs(args.scenes)
    with tempfile.TemporaryDirectory(prefix="safevla-first-frame-") as tmp:
        base_tree = baseline_tree(args.baseline_rev, Path(tmp))
        base_tree, baseline = (base_tree, f"git {args.baseline_rev}") if base_tree else (ROOT, "this code, scene cache off")
        runs = {"before": [], "cold": [], "cached": [], "cached_preview": [], "cold_preview": []}
        for i, pair in enumerate(pairs):
            cache, cache2 = str(Path(tmp) / "scenes"), str(Path(tmp) / f"scenes-{i}")
            runs["before"].append(child(base_tree, "off", pair))
            runs["cold"].append(child(ROOT, cache, pair, "full"))
            runs["cold_preview"].append(child(ROOT, cache2, pair, "preview"))
            for _ in range(args.repeats):  # full and preview interleaved, so load hits both alike
                runs["cached"].append(child(ROOT, cache, pair, "full"))
                runs["cached_preview"].append(child(ROOT, cache2, pair, "preview"))

    def med(kind: str, which: str) -> float:
        return round(float(np.median([r[which]["total_s"] for r in runs[kind]])), 2)

    print(json.dumps({
        "benchmark": "render_first_frame", "size": [480, 360], "scenes": len(pairs), "baseline": baseline,
        "cpus": os.cpu_count(),
        **{f"{k}_first_frame_s": med(k, "first") for k in runs},
        **{f"{k}_same_scene_next_episode_s": med(k, "same_scene") for k in runs},
        "ratio_before_over_cached": round(med("before", "first") / med("cached", "first"), 2),
        "ratio_before_over_cached_preview": round(med("before", "first") / med("cached_preview", "first"), 2),
        "ratio_cached_full_over_preview": round(med("cached", "first") / med("cached_preview", "first"), 2),
        "ratio_cached_full_over_preview_open_only": round(
            float(np.median([r["first"]["open_s"] for r in runs["cached"]]))
            / float(np.median([r["first"]["open_s"] for r in runs["cached_preview"]])), 2),
        "ratio_same_scene_before_over_now": round(med("before", "same_scene") / med("cached", "same_scene"), 2),
        "per_scene_first_frame_s": {k: [round(r["first"]["total_s"], 2) for r in v] for k, v in runs.items()},
        "first_frame_stages_median_s": {k: {s: round(float(np.median([r["first"][s] for r in v])), 2)
                                            for s in ("model_s", "open_s")} for k, v in runs.items()},
        "target_first_frame_s": 2.0, "load_avg_1m": round(os.getloadavg()[0], 2),
    }))


def player(args) -> None:
    """Frames/s of `RenderService.frames` (the player's violation-first pre-render, JPEG
    encoded) against the page's path measured in the same run: one `frame()` round trip
    per step plus the JPEG encode, the way the detail page fetched each step."""
    from dashboard.replay_bridge import FRAME_SIZE, RenderService, jpeg
    from replay.render.highlight import Violation

    path = next(f for f, _ in demo_scene_pairs(1))
    rec = load_record(path)
    n = min(args.frames, rec.n_steps)
    mid = rec.n_steps // 2
    v = Violation("max_contact_force", mid, 412.0, 200.0, "N", ">", ())
    steps = list(range(max(0, mid - n // 2), max(0, mid - n // 2) + n))
    svc = RenderService()
    try:
        t0 = time.perf_counter()
        svc.frame("bench", rec, mid, (v,))  # the scene opened: both paths reuse its replayer
        open_s = time.perf_counter() - t0
        serial, batch_s = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            for s in steps:
                jpeg(svc.frame("bench", rec, s, (v,)), 85)
            serial.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            batch = svc.frames("bench", rec, steps, (v,))
            batch.wait(600)
            batch_s.append(time.perf_counter() - t0)
            assert not batch.errors and batch.done == n, batch.errors
        t0 = time.perf_counter()
        first = svc.frames("bench-other-size", rec, steps, (v,), size=(400, 300))
        while mid not in first.ready:
            time.sleep(0.005)
        violation_frame_s = time.perf_counter() - t0
        first.wait(600)
    finally:
        svc.close()
    fps_batch, fps_serial = n / float(np.median(batch_s)), n / float(np.median(serial))
    print(json.dumps({
        "benchmark": "render_player", "episode": path.name, "frames": n, "size": list(FRAME_SIZE),
        "textures": "preview", "jpeg_quality": 85, "scene_open_and_first_frame_s": round(open_s, 2),
        "batch_fps": round(fps_batch, 2), "frame_by_frame_fps": round(fps_serial, 2),
        "ratio_batch_over_frame_by_frame": round(fps_batch / fps_serial, 2),
        "violation_frame_first_s_new_size": round(violation_frame_s, 3),
        "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2),
    }))


MIXED_PREVIEWS_CHILD = """
import json, os, sys, time
os.environ.setdefault("MUJOCO_GL", "egl")
import replay.render.scene_cache as scene_cache
import replay.render.scene_models as models
from replay.render.offscreen import pool_for_this_thread
from replay.render.replayer import Replayer
from scoring.records.io import load_record

with_preview, without = (load_record(p) for p in sys.argv[1:3])
scene_cache.defer_saves()
Replayer(with_preview, width=480, height=360, textures="preview").close()  # queues its preview scene
Replayer(without, width=480, height=360, textures="full").close()  # compiled and stored, no preview
scene_cache.save_pending()
out = {"open_s": [], "contexts": []}
pool = pool_for_this_thread()
for _ in range(int(sys.argv[3])):
    models._MODEL_CACHE.clear()
    pool.close()
    a = Replayer(with_preview, width=480, height=360, textures="preview")
    a.frame(0)
    t = time.perf_counter()
    b = Replayer(without, width=480, height=360, textures="preview")
    b.frame(0)
    out["open_s"].append(time.perf_counter() - t)
    out["contexts"].append(pool.n_open)
    b.close(); a.close()
print(json.dumps(out))
"""


def mixed_previews(args) -> None:
    """Two libero_spatial demo scene files of one asset set: the first opened from its preview
    scene (on disk), then the second, whose preview is not written yet (opened from its full
    model, textures shrunk on upload): the second's open and first frame, and how many GL
    contexts the two hold, in this code and at `--baseline-rev`, alternating child processes."""
    (first, _), (second, _) = [p for p in demo_scene_pairs(99) if "spatial" in str(p[0])][:2]
    with tempfile.TemporaryDirectory(prefix="safevla-mixed-previews-") as tmp:
        trees = {"now": ROOT, "baseline": baseline_tree(args.baseline_rev, Path(tmp))}
        if trees["baseline"] is None:
            raise SystemExit(f"--mixed-previews: no code at --baseline-rev {args.baseline_rev!r} (git archive failed)")
        runs: dict = {k: {"open_s": [], "contexts": []} for k in trees}
        for i in range(args.rounds):
            for name, tree in trees.items():
                got = run_child(MIXED_PREVIEWS_CHILD, tree, str(Path(tmp) / f"scenes-{name}-{i}"), first, second,
                                args.repeats)
                for k in got:
                    runs[name][k] += got[k]
    med = {k: round(float(np.median(v["open_s"])), 3) for k, v in runs.items()}
    print(json.dumps({
        "benchmark": "render_mixed_previews", "size": [480, 360], "baseline": f"git {args.baseline_rev}",
        "episodes": [str(first.relative_to(ROOT)), str(second.relative_to(ROOT))],
        "second_scene_open_and_frame_median_s": med, "ratio_baseline_over_now": round(med["baseline"] / med["now"], 2),
        "contexts_held": {k: sorted(set(v["contexts"])) for k, v in runs.items()},
        "samples": {k: len(v["open_s"]) for k, v in runs.items()}, "load_avg_1m": round(os.getloadavg()[0], 2),
    }))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "safevla-bench-render"))
    ap.add_argument("--frames", type=int, default=40, help="steps measured per round (default 40)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--first-frame", action="store_true", help="measure the first frame of unopened scenes instead")
    ap.add_argument("--scenes", type=int, default=3, help="demo scenes for --first-frame (default 3)")
    ap.add_argument("--repeats", type=int, default=2, help="cached full/preview runs per scene (--first-frame)")
    ap.add_argument("--baseline-rev", default=BASELINE_REV, help="git revision measured as 'before' (--first-frame)")
    ap.add_argument("--player", action="store_true",
                    help="measure RenderService.frames (the player's pre-render) against frame-by-frame instead")
    ap.add_argument("--mixed-previews", action="store_true",
                    help="measure a scene opened beside one of its asset set opened from its preview scene instead "
                         "(--rounds, --repeats, --baseline-rev)")
    args = ap.parse_args()
    if args.mixed_previews:
        mixed_previews(args)
        return
    if args.player:
        player(args)
        return
    if args.first_frame:
        first_frame(args)
        return

    path = build_episode(Path(args.cache))
    rec = load_record(path)
    steps = np.linspace(0, STEPS - 1, args.frames).astype(int)
    mid = STEPS // 2
    v_all = Violation("target_furniture_force", mid, 412.0, 200.0, "N", ">", TARGET_BODIES)

    times = {"replay_highlight": [], "replay_plain": [], "bare": [], "bare_model_quality": []}
    with Replayer(rec, width=WIDTH, height=HEIGHT, window=STEPS) as rp:
        bare = bare_renderer(rp, model_quality=False)
        bare_hq = bare_renderer(rp, model_quality=True)
        cam = rp.camera_name
        rp.frame(0, violation=v_all)  # warm-up: first-use costs (textures upload, caches)
        bare_frame(*bare, rec, 0, cam)
        bare_frame(*bare_hq, rec, 0, cam)
        runs = (("replay_highlight", lambda s: rp.frame(int(s), violation=v_all)),
                ("bare", lambda s: bare_frame(*bare, rec, int(s), cam)),
                ("replay_plain", lambda s: rp.frame(int(s))),
                ("bare_model_quality", lambda s: bare_frame(*bare_hq, rec, int(s), cam)))
        for _ in range(args.rounds):  # interleaved frame by frame, so machine load hits all alike
            for s in steps:
                for key, fn in runs:
                    t0 = time.perf_counter()
                    fn(s)
                    times[key].append(time.perf_counter() - t0)
        for _, _, r, _ in (bare, bare_hq):
            r.close()
    fps = {k: 1.0 / float(np.median(v)) for k, v in times.items()}

    with tempfile.TemporaryDirectory() as tmp:
        v = Violation("target_furniture_force", mid, 412.0, 200.0, "N", ">", TARGET_BODIES)
        t0 = time.perf_counter()
        export_clip(rec, Path(tmp) / "clip.mp4", violations=[v], fps=20, size=(WIDTH, HEIGHT))
        export_s = time.perf_counter() - t0
        mp4_bytes = (Path(tmp) / "clip.mp4").stat().st_size

    print(json.dumps({
        "benchmark": "render", "scene": "libero_spatial/0", "size": [WIDTH, HEIGHT], "cpus": os.cpu_count(),
        "gl": os.environ.get("MUJOCO_GL"), "render_settings": "no MSAA, no reflections, visual geom groups",
        "replay_fps_highlighted": round(fps["replay_highlight"], 2),
        "replay_fps_plain": round(fps["replay_plain"], 2),
        "bare_renderer_fps": round(fps["bare"], 2),
        "highlight_overhead_ratio": round(fps["bare"] / fps["replay_highlight"], 3),
        "bare_renderer_fps_model_quality": round(fps["bare_model_quality"], 2),
        "mp4_export_s_300_steps": round(export_s, 2), "mp4_bytes": mp4_bytes,
        "targets": {"replay_fps_min": 10, "overhead_ratio_max": 1.3, "mp4_export_s_max": 40},
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
