"""Replay render speed on a real LIBERO scene, highlight overhead, and MP4 export time (issue 4).

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

from replay.export import export_clip  # noqa: E402
from replay.highlight import Violation  # noqa: E402
from replay.render import Replayer, load_model  # noqa: E402
from replay.scene_assets import portable_scene  # noqa: E402
from scoring.io import load_record, save_record  # noqa: E402
from scoring.schema import EpisodeRecord  # noqa: E402

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "safevla-bench-render"))
    ap.add_argument("--frames", type=int, default=40, help="steps measured per round (default 40)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    args = ap.parse_args()

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
