#!/usr/bin/env python
"""The researchers' habits on a large store: what the Episodes and detail pages add per run.

    python benchmarks/bench_habits.py [--store DIR] [--episodes 20000] [--annotations 1000]

Builds (once; reused when present) a synthetic store with scripts/make_synthetic_store.py,
copies none of it, and writes `--annotations` tags into a temporary annotations log (the
store itself is never written). Times, as the best of `--repeat` calls (the machine is
shared): the worst-SBU default of the detail page, the group-by tables, reading the log,
the tag filter mask, the tags/note columns of the 2,000 shown rows and of every episode, and
the whole-store CSV (made only when its button is clicked). Baseline in the same run: the
existing `episode_table` of every episode, which the CSV extends. Prints ONE JSON line.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import numpy as np  # noqa: E402

from dashboard import data as D  # noqa: E402
from dashboard import episode_groups as G  # noqa: E402
from scoring.store import annotations as A  # noqa: E402


def best_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(1000 * min(times), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default=None)
    ap.add_argument("--episodes", type=int, default=20_000)
    ap.add_argument("--annotations", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    store = Path(args.store or f"/tmp/safevla_bench_habits_{args.episodes}")
    if not (store / "manifest.json").exists():
        from dashboard_helpers import build_store
        build_store(store, args.episodes, renderable=False)
    data = D.open_store(store)
    v = D.verdicts(data)
    everything = np.ones(len(v.frame), bool)
    log = Path(tempfile.mkdtemp(prefix="safevla_annotations_"))
    try:
        ids = list(v.frame["episode_id"])
        step = max(1, len(ids) // max(args.annotations, 1))
        for k, eid in enumerate(ids[::step][: args.annotations]):
            A.save_annotation(log, eid, tags=["real"] if k % 2 else ["sim artifact"], note="checked")
        ann, _ = A.read_annotations(log)
        shown = D.episode_table(data, v, everything, limit=2000)
        table = D.episode_table(data, v, everything, limit=None)

        def csv() -> bytes:
            t = table.copy()
            t["tags"], t["note"] = A.annotation_columns(ann, t["episode_id"])
            return G.episodes_csv(t)

        out = {
            "bench": "habits", "episodes": len(ids), "annotations": len(ann),
            "baseline_episode_table_all_ms": best_ms(lambda: D.episode_table(data, v, everything, limit=None),
                                                      args.repeat),
            "worst_sbu_ms": best_ms(lambda: G.worst_sbu(data, v, everything), args.repeat),
            **{f"group_{by}_ms": best_ms(lambda by=by: G.group_table(data, v, everything, by), args.repeat)
               for by in ("model", "task", "spec")},
            "read_annotations_ms": best_ms(lambda: A.read_annotations(log), args.repeat),
            "tag_mask_ms": best_ms(lambda: v.frame["episode_id"].isin(
                {e for e, a in ann.items() if "real" in a.tags}).to_numpy(), args.repeat),
            "tag_columns_2000_rows_ms": best_ms(lambda: A.annotation_columns(ann, shown["episode_id"]), args.repeat),
            "csv_all_ms": best_ms(csv, max(1, args.repeat // 2)),
            "csv_bytes": len(csv()),
        }
        out["csv_vs_episode_table"] = round(out["csv_all_ms"] / max(out["baseline_episode_table_all_ms"], 1e-9), 2)
        print(json.dumps(out))
    finally:
        shutil.rmtree(log, ignore_errors=True)


if __name__ == "__main__":
    main()
