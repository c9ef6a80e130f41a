"""What the ingestion guards cost: `score_archive` CPU time, this tree against a baseline commit.

The guards (int64 and Unicode checks, the npz size caps, duplicate staging and its
rename, the store lock) run on every episode, so they are measured where they would
show: one worker scoring 300 JSONL lines (converted, so each trajectory is staged and
moved into place) and 1,500 `.npz` files (referenced in place). CPU seconds of the
scoring process (user + system), not wall time: this machine is shared and its wall
times swing by 2x under other jobs' load, CPU time far less. The baseline is
`git archive REV` of this repository, run by the same interpreter; the runs alternate
(baseline, this tree, baseline, ...) and the best of `--repeat` is kept for each.

Prints one JSON line. Usage: python benchmarks/bench_ingest_guards.py [--baseline 5ce9484] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# one measurement, run in a fresh interpreter with PYTHONPATH at the tree under test
_MEASURE = r"""
import json, resource, sys
from scoring import score_archive  # the same name before and after the move to subpackages
paths, out = json.loads(sys.argv[1]), sys.argv[2]
before = resource.getrusage(resource.RUSAGE_SELF)
score_archive(paths, out, progress=False)
after = resource.getrusage(resource.RUSAGE_SELF)
print((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
"""


def ensure_inputs(cache: Path) -> tuple[list[str], list[str]]:
    """300 JSONL lines in one file and 1,500 .npz files: bench_score.py's synthetic episodes."""
    from scoring.records.io import load_record, record_to_json
    from scoring.records.synthetic import make_archive

    npz_dir = cache / "npz-1500"
    if not (npz_dir / ".complete").exists():
        shutil.rmtree(npz_dir, ignore_errors=True)
        make_archive(npz_dir, 1500, seed=0, n_steps=300, contacts_per_step=40)
        (npz_dir / ".complete").touch()
    files = sorted(str(p) for p in npz_dir.glob("*.npz"))
    jsonl = cache / "ingest-300.jsonl"
    if not jsonl.exists():
        with open(f"{jsonl}.tmp", "w") as fh:
            for f in files[:300]:
                fh.write(json.dumps(record_to_json(load_record(f))) + "\n")
        os.replace(f"{jsonl}.tmp", jsonl)
    return [str(jsonl)], files


def cpu_seconds(tree: Path, paths: list[str]) -> float:
    with tempfile.TemporaryDirectory(prefix="safevla-guards-") as tmp:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        out = subprocess.run([sys.executable, "-c", _MEASURE, json.dumps(paths), f"{tmp}/store"], env=env,
                             capture_output=True, text=True, check=True, cwd=tmp)
        return float(out.stdout.strip().splitlines()[-1])


def baseline_tree(rev: str, into: Path) -> Path:
    """The baseline commit's files (its C module source is not built: both trees decode JSONL with msgspec alone)."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="5ce9484", help="git revision to compare against (default: 5ce9484, before the ingestion guards)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "safevla-bench-guards"))
    args = ap.parse_args()
    cache = Path(args.cache)
    jsonl, npz = ensure_inputs(cache)
    with tempfile.TemporaryDirectory(prefix="safevla-baseline-") as tmp:
        base = baseline_tree(args.baseline, Path(tmp) / "tree")
        runs: dict[str, list[float]] = {}
        for _ in range(args.repeat):
            for which, tree in (("baseline", base), ("this", ROOT)):
                for name, paths in (("jsonl_300", jsonl), ("npz_1500", npz)):
                    runs.setdefault(f"{name}_{which}", []).append(round(cpu_seconds(tree, paths), 3))
    best = {k: min(v) for k, v in runs.items()}
    print(json.dumps({
        "bench": "ingest_guards", "baseline": args.baseline, "repeat": args.repeat,
        "jsonl_300_cpu_s": best["jsonl_300_this"], "jsonl_300_baseline_cpu_s": best["jsonl_300_baseline"],
        "jsonl_ratio": round(best["jsonl_300_this"] / best["jsonl_300_baseline"], 3),
        "npz_1500_cpu_s": best["npz_1500_this"], "npz_1500_baseline_cpu_s": best["npz_1500_baseline"],
        "npz_ratio": round(best["npz_1500_this"] / best["npz_1500_baseline"], 3),
        "all_runs_cpu_s": runs}))


if __name__ == "__main__":
    main()
