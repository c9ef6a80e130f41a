"""Instrumentation overhead and storage of LIBERO recording; prints one JSON line.

    python benchmarks/bench_record.py [--reps 3]

- overhead_ratio: time of (env.step + Recorder.observe) over time of env.step alone, in
  the same run, on the same actions (a real careful pick-and-place on LIBERO-Spatial
  task 0), alternating plain and instrumented episodes. Target <= 1.10.
- bytes_per_300_step_episode: the compressed .npz of a real 300-step episode (careful on
  LIBERO-Spatial task 4, which it does not solve, so it runs the whole horizon),
  replay state included. The scene MJCF is stored once per scene, reported apart.
  Target <= 150 KB.
- camera_ratio: env.step time with two 256x256 cameras (agentview + wrist, what a VLA
  such as pi0.5 sees) over env.step without cameras, same actions, episodes alternated
  in the same run; render_ms is the part of a camera step spent in robosuite's renderer
  (MuJoCo EGL on llvmpipe here: no GPU). --camera-size changes the size.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def timed_episode(host, actions, *, record: bool) -> tuple[float, float]:
    """Seconds spent in env.step and in Recorder.observe over one episode."""
    host.reset(init_state=0, seed=0)
    host.render_s = 0.0
    recorder = host.make_recorder(qpos_dtype=np.float32) if record else None
    t_step = t_obs = 0.0
    for a in actions:
        t0 = time.perf_counter()
        host.step(a.copy())
        t1 = time.perf_counter()
        if recorder is not None:
            recorder.observe(host.model, host.data)
        t_step += t1 - t0
        t_obs += time.perf_counter() - t1
    return t_step, t_obs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="LIBERO recording overhead and storage")
    p.add_argument("--reps", type=int, default=3, help="plain/instrumented episode pairs (default 3)")
    p.add_argument("--camera-size", type=int, default=256, help="camera image size in pixels (default 256)")
    args = p.parse_args(argv)
    # LIBERO prints progress to stdout; keep stdout for the one JSON line
    with contextlib.redirect_stdout(sys.stderr):
        out = measure(args.reps, camera_size=args.camera_size)
    print(json.dumps(out))
    return 0


def measure(reps: int, *, camera_size: int = 256) -> dict:
    from replay.hosts.libero import LiberoHost
    from replay.policies import scripted
    from replay.rollout import run_episode
    from scoring.io import record_to_npz_bytes

    host = LiberoHost("libero_spatial", 0)
    try:
        rec, _, _ = run_episode(host, scripted("careful")(), init_state=0, seed=0, model="bench")
        actions = [np.asarray(a) for a in rec.actions[1:]]
        plain, inst, observe = [], [], []
        for _ in range(reps):
            plain.append(timed_episode(host, actions, record=False)[0])
            s, o = timed_episode(host, actions, record=True)
            inst.append(s + o)
            observe.append(o)
        contacts_per_step = len(rec.contacts) / rec.n_steps
        cam_host = LiberoHost("libero_spatial", 0, cameras=("agentview", "wrist"),
                              image_size=(camera_size, camera_size))
        try:
            cams_off, cams_on, render = [], [], []
            for _ in range(reps):
                cams_off.append(timed_episode(host, actions, record=False)[0])
                cams_on.append(timed_episode(cam_host, actions, record=False)[0])
                render.append(cam_host.render_s)
        finally:
            cam_host.close()
    finally:
        host.close()

    host = LiberoHost("libero_spatial", 4)
    try:
        long, _, steps = run_episode(host, scripted("careful")(), init_state=0, seed=0, model="bench",
                                     max_steps=299, mjcf="../../models/scene.xml")
        mjcf_bytes = len(host.mjcf().encode())
    finally:
        host.close()
    size = len(record_to_npz_bytes(long, compress=True))
    n = len(actions) * reps
    return {
        "benchmark": "record",
        "steps_timed": n,
        "step_ms_plain": round(1000 * sum(plain) / n, 3),
        "step_ms_instrumented": round(1000 * sum(inst) / n, 3),
        "observe_ms": round(1000 * sum(observe) / n, 3),
        "overhead_ratio": round(sum(inst) / sum(plain), 4),
        "target_overhead_ratio": 1.10,
        "contacts_per_step": round(contacts_per_step, 1),
        "episode_steps": long.n_steps,
        "bytes_per_300_step_episode": size,
        "target_bytes": 150 * 1024,
        "mjcf_bytes_once_per_scene": mjcf_bytes,
        "camera_size": camera_size,
        "step_ms_cameras_off": round(1000 * sum(cams_off) / n, 3),
        "step_ms_cameras_on": round(1000 * sum(cams_on) / n, 3),
        "render_ms": round(1000 * sum(render) / n, 3),
        "camera_ratio": round(sum(cams_on) / sum(cams_off), 3),
    }


if __name__ == "__main__":
    sys.exit(main())
