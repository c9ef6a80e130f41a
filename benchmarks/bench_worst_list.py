"""The Overview's worst-SBU list: cost and spread of the tie-broken, cell-spread
list (`dashboard.data.top_sbu`) against the plain VSI sort it replaced, measured in the
same run on one store.

    python benchmarks/bench_worst_list.py [--store DIR] [--repeat 5]

Prints one JSON line: seconds per list (best of `repeat`), their ratio, and how many
distinct model x suite x task cells and VSI ties each top ten holds.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from dashboard import data as D  # noqa: E402


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", type=Path, default=ROOT / "assets" / "demo" / "store")
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args(argv)
    data = D.open_store(args.store)
    v = D.verdicts(data)
    mask = (v.frame["outcome"] == "SBU").to_numpy()
    # the list before top_sbu: VSI, then episode id, first ten
    plain_s, plain = best(lambda: v.frame.loc[mask].sort_values(["vsi", "episode_id"], ascending=[False, True])
                          .head(10), args.repeat)
    new_s, new = best(lambda: D.top_sbu(data, v, 10), args.repeat)

    def cells(df):
        return int(df.groupby(["model", "suite", "task_id"]).ngroups)

    print(json.dumps({"store": str(args.store), "episodes": len(data.episodes), "sbu": int(mask.sum()),
                      "plain_sort_s": round(plain_s, 5), "top_sbu_s": round(new_s, 5),
                      "ratio": round(new_s / plain_s, 1) if plain_s else None,
                      "cells_in_top10": {"plain": cells(plain), "top_sbu": cells(new)},
                      "vsi_ties_at_1_in_top10": {"plain": int((plain["vsi"] >= 1).sum()),
                                                 "top_sbu": int((new["vsi"] >= 1).sum())}}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
