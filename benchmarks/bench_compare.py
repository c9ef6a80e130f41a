"""Paired comparison latency: 4 models x 5,000 shared keys = 20,000 episodes.

The episodes table is built directly (synthetic, LIBERO-like rates: SR 70-95 %, Safety
75-90 %, outcomes correlated across models through a shared per-key difficulty), then
`compare_models` runs the full comparison: per suite and overall, exact McNemar + Newcombe
for SR/Safety/SBU, 10,000-resample paired bootstraps for VSI, Holm, tiers, Kendall's tau.

Two stores are timed: `realistic` (VSI = 0 on safe episodes, as scored) and `dense`, the
worst case for the bootstrap, where every key has a non-zero VSI for some model (the
bootstrap shortcut for rows equal to the most common row then saves nothing).

Prints one JSON line. Usage: python benchmarks/bench_compare.py [--keys 5000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scoring.stats.compare import compare_models  # noqa: E402

MODELS = ("policy-a", "policy-b", "policy-c", "policy-d")
SUITES = ("libero-spatial", "libero-object", "libero-goal", "libero-10")
LIMIT_S = 1.0


def episodes_table(n_keys: int, *, dense: bool, seed: int = 0) -> pd.DataFrame:
    """`n_keys` (suite, task, init state, seed) keys, each run once by every model."""
    rng = np.random.default_rng(seed)
    i = np.arange(n_keys)
    suite = np.array(SUITES)[i % len(SUITES)]
    task = np.char.add("task_", ((i // len(SUITES)) % 10).astype(str))
    init = (i // (len(SUITES) * 10)) % 50
    ep_seed = i // (len(SUITES) * 10 * 50)
    latent = rng.random((n_keys, 2))
    sr, safety = (0.95, 0.90, 0.80, 0.70), (0.78, 0.85, 0.90, 0.75)
    frames = []
    for j, model in enumerate(MODELS):
        u = 0.6 * latent + 0.4 * rng.random((n_keys, 2))
        success, safe = u[:, 0] < sr[j], u[:, 1] < safety[j]
        depth = np.clip(rng.beta(2, 5, n_keys), 0, 1)
        vsi = depth * (1e-3 if dense else 0.0) + np.where(safe, 0.0, depth)
        frames.append(pd.DataFrame({
            "episode_id": np.char.add(f"{model}/", i.astype(str)), "model": model, "benchmark": suite,
            "suite": suite, "task_id": task, "seed": ep_seed, "init_state": init, "success": success,
            "safe": safe, "sbu": success & ~safe, "vsi": vsi,
            "worst_spec": np.where(safe, None, "non_target_max_disp"), "violating_step": np.where(safe, -1, 120)}))
    return pd.concat(frames, ignore_index=True)


def timed(episodes: pd.DataFrame, repeat: int) -> tuple[float, float]:
    """(median, min) seconds of a full 4-model comparison, after one warm-up run."""
    compare_models(episodes, MODELS, n_resamples=100)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        cmp = compare_models(episodes, MODELS, by="suite", n_resamples=10_000, seed=0)
        times.append(time.perf_counter() - t)
    if len(cmp.pairs) != (1 + len(SUITES)) * 4 * 6:  # groups x metrics x pairs: the full job ran
        raise RuntimeError(f"expected {(1 + len(SUITES)) * 24} pair rows, got {len(cmp.pairs)}")
    return statistics.median(times), min(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=5000, help="shared keys per model (default 5000)")
    ap.add_argument("--repeat", type=int, default=5, help="timed runs per store (default 5)")
    args = ap.parse_args()
    realistic = episodes_table(args.keys, dense=False)
    dense = episodes_table(args.keys, dense=True)
    med, best = timed(realistic, args.repeat)
    dense_med, dense_best = timed(dense, args.repeat)
    print(json.dumps({
        "bench": "compare", "episodes": len(realistic), "models": len(MODELS), "keys": args.keys,
        "groups": 1 + len(SUITES), "resamples": 10_000,
        "seconds": round(med, 3), "seconds_min": round(best, 3),
        "dense_vsi_seconds": round(dense_med, 3), "dense_vsi_seconds_min": round(dense_best, 3),
        "limit_seconds": LIMIT_S, "ok": bool(med < LIMIT_S and dense_med < LIMIT_S),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
