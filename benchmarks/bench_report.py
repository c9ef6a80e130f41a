"""`safevla report` cost by stage on a synthetic store.

Scores a synthetic archive (4 models x 4 LIBERO suites, 100-step episodes) into a
temporary store, then times each stage of `scoring.report.outputs.write_report`: the footnotes
(which read the trajectories of the torque-violating episodes), the long tables (with the
10,000-resample VSI bootstraps), the paper layouts, and metrics.json. The baseline is the
long tables alone, i.e. the report before the paper layouts existed.

Prints one JSON line. Usage: python benchmarks/bench_report.py [--episodes 4000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from scoring.records.synthetic import make_archive  # noqa: E402
from scoring.registry.lookup import load_registry  # noqa: E402
from scoring.report.metrics_json import encode, metrics_output  # noqa: E402
from scoring.report.outputs import notes_for, paper_tables, write_paper_tables  # noqa: E402
from scoring.report.readings import Reading  # noqa: E402
from scoring.report.tables import build_tables, write_tables  # noqa: E402
from scoring.store.write import load_store, score_archive  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--episodes", type=int, default=4000)
    args = ap.parse_args()
    reg = load_registry()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_archive(root / "arch", args.episodes, seed=1, n_steps=100, contacts_per_step=8)
        score_archive([root / "arch"], root / "store", progress=False)
        manifest, eps, specs = load_store(root / "store")
        times = {}
        t = time.perf_counter()
        notes = notes_for(root / "store", eps, specs, Reading(), registry=reg)
        times["footnotes_s"] = time.perf_counter() - t
        t = time.perf_counter()
        write_tables(build_tables(eps, specs, registry=reg), root / "report")
        times["long_tables_s"] = time.perf_counter() - t
        t = time.perf_counter()
        write_paper_tables(paper_tables(root / "store", eps, specs, registry=reg, notes=notes), root / "report/paper")
        times["paper_tables_s"] = time.perf_counter() - t
        t = time.perf_counter()
        (root / "report" / "metrics.json").write_bytes(encode(metrics_output(eps, specs, manifest=manifest)))
        times["metrics_json_s"] = time.perf_counter() - t
    total = sum(times.values())
    print(json.dumps({"bench": "report", "episodes": args.episodes, **{k: round(v, 2) for k, v in times.items()},
                      "total_s": round(total, 2), "ratio_vs_long_tables_only": round(total / times["long_tables_s"], 2)}))


if __name__ == "__main__":
    main()
