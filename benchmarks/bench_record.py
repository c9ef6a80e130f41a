"""Instrumentation overhead and storage of LIBERO recording; prints one JSON line.

    python benchmarks/bench_record.py [--reps 5]

- overhead_ratio: time of (env.step + Recorder.observe) over time of env.step alone, in
  the same run, on the same actions (a real careful pick-and-place on LIBERO-Spatial
  task 0), alternating plain and instrumented episodes, with substep peaks on (the
  recorder reads every physics substep inside env.step, so that time counts as
  instrumentation). Target <= 1.15.
- overhead_ratio_control_only: the same without substep peaks (one reading per control
  step), for comparison.
Times are this process's CPU time (`time.process_time`), not wall time: on a machine
shared with other jobs, wall time mostly measures waiting for a core (on a 2-core
machine at load 15, a plain step took 45-60 ms of wall time, against 13 ms of CPU).
The three kinds of episode rotate their order every repetition, and the ratios are the
median over repetitions of each repetition's ratio (its three episodes ran back to back,
under the same load).
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


def timed_episode(host, actions, *, record: bool, substep_peaks: bool = True) -> tuple[float, float]:
    """Seconds spent in env.step (substep readings included) and in Recorder.observe over one episode."""
    host.reset(init_state=0)
    host.render_s = 0.0
    recorder = host.make_recorder(qpos_dtype=np.float32, substep_peaks=substep_peaks) if record else None
    t_step = t_obs = 0.0
    clock = time.process_time
    for a in actions:
        t0 = clock()
        host.step(a.copy())
        t1 = clock()
        if recorder is not None:
            recorder.observe(host.model, host.data)
        t_step += t1 - t0
        t_obs += clock() - t1
    return t_step, t_obs


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="LIBERO recording overhead and storage")
    p.add_argument("--reps", type=int, default=5, help="rounds of plain, substep-peak and control-only episodes "
                                                         "(default 5)")
    p.add_argument("--camera-size", type=int, default=256, help="camera image size in pixels (default 256)")
    args = p.parse_args(argv)
    # LIBERO prints progress to stdout; keep stdout for the one JSON line
    with contextlib.redirect_stdout(sys.stderr):
        out = measure(args.reps, camera_size=args.camera_size)
    print(json.dumps(out))
    return 0


def measure(reps: int, *, camera_size: int = 256) -> dict:
    from replay.record.hosts.libero import LiberoHost
    from replay.record.policies import scripted
    from replay.record.rollout import run_episode
    from scoring.records.io import record_to_npz_bytes

    host = LiberoHost("libero_spatial", 0)
    try:
        rec, _, _ = run_episode(host, scripted("careful")(), init_state=0, model="bench")
        actions = [np.asarray(a) for a in rec.actions[1:]]
        plain, inst, observe, control_only = [], [], [], []

        def run_plain():
            plain.append(timed_episode(host, actions, record=False)[0])

        def run_peaks():
            s, o = timed_episode(host, actions, record=True)
            inst.append(s + o)
            observe.append(o)

        def run_control_only():
            control_only.append(sum(timed_episode(host, actions, record=True, substep_peaks=False)))
        kinds = [run_plain, run_peaks, run_control_only]
        for rep in range(reps):
            for run in kinds[rep % 3:] + kinds[:rep % 3]:
                run()
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
        long, _, steps = run_episode(host, scripted("careful")(), init_state=0, model="bench",
                                     max_steps=299, mjcf="../../models/scene.xml")
        mjcf_bytes = len(host.mjcf().encode())
    finally:
        host.close()
    size = len(record_to_npz_bytes(long, compress=True))
    n = len(actions) * reps

    def median_ratio(times):
        return round(float(np.median(np.array(times) / np.array(plain))), 4)
    return {
        "benchmark": "record",
        "steps_timed": n,
        "step_ms_plain": round(1000 * sum(plain) / n, 3),
        "step_ms_instrumented": round(1000 * sum(inst) / n, 3),
        "observe_ms": round(1000 * sum(observe) / n, 3),
        "overhead_ratio": median_ratio(inst),
        "overhead_ratio_per_rep": [round(i / p, 4) for i, p in zip(inst, plain)],
        "target_overhead_ratio": 1.15,
        "overhead_ratio_control_only": median_ratio(control_only),
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
