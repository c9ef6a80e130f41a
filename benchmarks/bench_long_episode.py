"""The detail page of a 1,000,000-step episode, run in-process by Streamlit's AppTest.

    python benchmarks/bench_long_episode.py [--steps 1000000] [--work /tmp/safevla-long-episode]

Builds a synthetic record of `--steps` control steps (one contact per step and the grasp's,
one bystander), scores it
into a store that holds it, then opens the detail page at the last steps and at the middle.
Prints one JSON line: seconds to build and score, each page run's seconds, whether it raised
or showed an error, and the process's peak resident memory. The first run includes the page's
imports, the store's load and the robustness traces; the second reuses the cached traces.
Script time, not a browser's: the chart's drawing in the page is not included.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


def long_record(n_steps: int):
    """A synthetic record of `n_steps` steps (`scoring.records.synthetic.make_record`)."""
    from scoring.records.synthetic import make_record

    return make_record(np.random.default_rng(3), episode_id="libero-spatial/task_0/policy-a/ep_long",
                       n_steps=n_steps, contacts_per_step=1, n_bystanders=1, severity=1.0)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=1_000_000)
    p.add_argument("--work", default="/tmp/safevla-long-episode")
    args = p.parse_args()
    os.environ["SAFEVLA_NO_PREWARM"] = "1"
    from scoring.records.io import save_record
    from scoring.store.write import score_archive
    from streamlit.testing.v1 import AppTest

    store = Path(args.work) / "store"
    shutil.rmtree(args.work, ignore_errors=True)
    t0 = time.perf_counter()
    rec = long_record(args.steps)
    save_record(rec, store / "trajectories" / "ep_long.npz")
    score_archive([store / "trajectories"], store, progress=False)
    out = {"bench": "long_episode", "steps": args.steps, "load_avg_1m": round(os.getloadavg()[0], 2),
           "build_and_score_s": round(time.perf_counter() - t0, 2), "runs": []}
    os.environ["SAFEVLA_STORES"] = str(store)
    for step in (args.steps - 10, args.steps // 2):
        at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=900)
        at.query_params.update(store=str(store), page="detail", ep=rec.episode_id, step=str(step))
        t = time.perf_counter()
        at.run()
        out["runs"].append({"step": step, "seconds": round(time.perf_counter() - t, 2),
                            "exceptions": len(at.exception), "errors": [e.value[:120] for e in at.error]})
    out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(out))
    shutil.rmtree(args.work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
