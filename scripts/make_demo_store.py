"""Regenerates the bundled demo: real LIBERO rollouts of the scripted profiles, then scoring.

    python scripts/make_demo_store.py [--fresh] [--workers 2] [--episodes 5] [--protocol openpi]

Records 3 profiles (careful, hasty, sloppy; scripted, not VLAs) x LIBERO-Spatial and
LIBERO-Object x 10 tasks x 5 episodes (300 episodes), the feasible LIBERO-Goal
pick-and-place tasks (60), and two LIBERO-PRO variants of LIBERO-Spatial, all 10 tasks:
libero_spatial_with_mug (a distractor mug) x 5 episodes and libero_spatial_swap (swapped
layout) x 3 (240), into assets/demo/archive, then scores the archive into
assets/demo/store with `safevla score`. Episodes follow a rollout protocol (OpenPI's
LIBERO loop by default, as `safevla rollout`). 600 episodes: about 55 minutes on 2 quiet
CPU cores with 2 workers (the 360 base episodes took 33; about 9 s to build each env,
1-2.5 s per LIBERO reset, 1.5-4 s per episode). Re-running resumes: recorded episodes are
skipped. Fails if assets/demo grows past 50 MB.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROFILES = ("careful", "hasty", "sloppy")
SUITES = ("libero_spatial", "libero_object")
# LIBERO-PRO variants of LIBERO-Spatial (assets/perturbations.yaml), all 10 tasks each: the
# distractor mug with 5 init states per task (as the base suite), the swapped layout with 3
# (5 would take assets/demo to 54 MB, past its 50 MB budget)
PERTURBED_SUITES = {"libero_spatial_with_mug": 5, "libero_spatial_swap": 3}
# LIBERO-Goal tasks a pick-and-place script can solve: 1 bowl on stove, 4 bowl on the
# cabinet, 6 cream cheese in the bowl, 8 bowl on the plate (the others open drawers,
# turn knobs, push, or insert a bottle into a rack)
GOAL_TASKS = (1, 4, 6, 8)
LIMIT_BYTES = 50 * 1000 * 1000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(ROOT / "assets" / "demo"), help="demo directory (default assets/demo)")
    p.add_argument("--episodes", type=int, default=5, help="episodes per task (default 5)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    p.add_argument("--no-goal", action="store_true", help="skip the LIBERO-Goal tasks")
    p.add_argument("--no-perturbed", action="store_true", help="skip the LIBERO-PRO variant suites")
    p.add_argument("--no-score", action="store_true", help="record only")
    p.add_argument("--fresh", action="store_true", help="delete the archive and store first")
    p.add_argument("--protocol", default=None, help="rollout protocol (default: openpi, as safevla rollout)")
    args = p.parse_args(argv)

    from replay.record.policies import load_policy
    from replay.record.protocols import load_protocol
    from replay.record.rollout import run_jobs

    out = Path(args.out)
    archive, store = out / "archive", out / "store"
    if args.fresh:
        shutil.rmtree(archive, ignore_errors=True)
        shutil.rmtree(store, ignore_errors=True)
    episodes = list(range(args.episodes))
    plan = [(suite, task) for suite in SUITES for task in range(10)]
    if not args.no_goal:
        plan += [("libero_goal", task) for task in GOAL_TASKS]
    plan = [(suite, task, episodes) for suite, task in plan]
    if not args.no_perturbed:
        plan += [(suite, task, episodes[:n]) for suite, n in PERTURBED_SUITES.items() for task in range(10)]
    jobs = []
    for profile in PROFILES:
        model, _ = load_policy(profile)
        kwargs = {"policy_spec": profile, "archive": str(archive), "protocol": load_protocol(args.protocol),
                  "model": model}
        jobs += [(suite, task, eps, kwargs) for suite, task, eps in plan]
    run_jobs(jobs, workers=args.workers)

    if not args.no_score and importlib.util.find_spec("scoring.store.write") is not None:
        cmd = [sys.executable, "-m", "scoring.cli", "score", str(archive), "--out", str(store),
               "--workers", str(args.workers)]
        print("+", " ".join(cmd), file=sys.stderr)
        rc = subprocess.call(cmd, cwd=ROOT)
        if rc != 0:
            print(f"scoring failed with exit code {rc}", file=sys.stderr)
            return rc
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"{out}: {size / 1e6:.1f} MB", file=sys.stderr)
    if size > LIMIT_BYTES:
        print(f"assets/demo is {size / 1e6:.1f} MB, over the 50 MB budget", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
