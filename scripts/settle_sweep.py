"""Sweep LIBERO init states through the settled-start protocol and tabulate how long each took.

Every (suite, task, init state) is reset exactly as `safevla rollout` resets episode k
(`LiberoHost.reset` under `--protocol settled`, which settles with `replay.record.settle`), and one JSON line per
init state goes to --out. Re-running skips lines already there, so an interrupted sweep
resumes. `--table` prints the Markdown table of docs/libero.md from that file.

`--reset soft` skips robosuite's model rebuild on every reset (`hard_reset = False`:
`sim.reset()` instead of recompiling the XML, about 2 s of each 2.5 s init state). LIBERO
still re-places fixtures and objects in `_reset_internal`, and `set_init_state` then sets
every joint, so the settle is the same physics; `--check` compares soft against hard
rows already in --out and reports any init state whose settle differs.

    nice -n 10 .venv/bin/python scripts/settle_sweep.py --out sweep.jsonl
    .venv/bin/python scripts/settle_sweep.py --out sweep.jsonl --table
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SUITES = ("libero_10", "libero_goal", "libero_spatial", "libero_object")


def done_keys(out: Path) -> set[tuple[str, int, int]]:
    if not out.exists():
        return set()
    rows = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return {(r["suite"], r["task"], r["init_state"]) for r in rows}


def sweep(out: Path, suites, tasks: list[int] | None, init_states: int | None, *, reset: str = "hard") -> None:
    from replay.record.hosts.libero import LiberoHost, _suite  # MuJoCo/LIBERO only when sweeping
    from replay.record.protocols import load_protocol
    done = done_keys(out)
    for suite in suites:
        n_tasks = _suite(suite).n_tasks
        for task in (tasks if tasks is not None else range(n_tasks)):
            n = len(_suite(suite).get_task_init_states(task))
            todo = [k for k in range(n if init_states is None else min(n, init_states)) if (suite, task, k) not in done]
            if not todo:
                continue
            t0 = time.time()
            host = LiberoHost(suite, task, protocol=load_protocol("settled"))
            host.env.env.hard_reset = reset == "hard"
            built = time.time() - t0
            try:
                for k in todo:
                    t1 = time.time()
                    host.reset(init_state=k)
                    s = host.start
                    row = {"suite": suite, "task": task, "init_state": k, "steps": s.steps, "settled": s.settled,
                           "linear_speed": s.linear_speed, "angular_speed": s.angular_speed,
                           "moving_body": s.moving_body, "seconds": round(time.time() - t1, 2), "reset": reset}
                    with out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
            finally:
                host.close()
            print(f"{suite} task {task}: {len(todo)} init states, build {built:.1f} s, "
                  f"total {time.time() - t0:.0f} s", file=sys.stderr, flush=True)


def compare(reference: Path, other: Path) -> dict:
    """Init states present in both files: how many agree on (steps, settled), and which do not."""
    def rows(path):
        return {(r["suite"], r["task"], r["init_state"]): r for r in map(json.loads, path.read_text().splitlines())}
    ref, oth = rows(reference), rows(other)
    both = sorted(set(ref) & set(oth))
    key = lambda r: (r["steps"], r["settled"])  # noqa: E731
    differ = [list(k) + [key(ref[k]), key(oth[k])] for k in both if key(ref[k]) != key(oth[k])]
    same_speeds = sum(ref[k]["linear_speed"] == oth[k]["linear_speed"] and
                      ref[k]["angular_speed"] == oth[k]["angular_speed"] for k in both)
    return {"compared": len(both), "agree": len(both) - len(differ), "bit_identical_final_speeds": same_speeds,
            "differ": differ}


def table(out: Path) -> str:
    """Markdown: one row per task that needed more than the standard 10 steps, plus per-suite totals."""
    import pandas as pd
    from replay.record.hosts.libero import SETTLE_STEPS
    df = pd.DataFrame([json.loads(line) for line in out.read_text().splitlines() if line.strip()])
    lines = ["| suite | task | init states swept | needing > 10 steps | max steps needed (settled) | never settled |",
             "|---|---|---|---|---|---|"]
    suites = [s for s in SUITES if s in set(df["suite"])]
    for suite in suites:
        for task, g in df[df["suite"] == suite].groupby("task", sort=True):
            ok = g[g["settled"]]
            longer = int((g["steps"] > SETTLE_STEPS).sum())
            lines.append(f"| {suite} | {task} | {len(g)} | {longer} | {int(ok['steps'].max()) if len(ok) else '-'} "
                         f"| {int((~g['settled']).sum())} |")
    summary = ["", "| suite | init states swept | needing > 10 steps | max steps needed (settled) | never settled |",
               "|---|---|---|---|---|"]
    for suite in suites:
        g = df[df["suite"] == suite]
        ok = g[g["settled"]]
        summary.append(f"| {suite} | {len(g)} | {int((g['steps'] > SETTLE_STEPS).sum())} | "
                       f"{int(ok['steps'].max()) if len(ok) else '-'} | {int((~g['settled']).sum())} |")
    return "\n".join(lines + summary)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, type=Path, help="JSONL file, appended to (resumes)")
    p.add_argument("--suites", default=",".join(SUITES), help=f"comma list (default {','.join(SUITES)})")
    p.add_argument("--tasks", default=None, help="comma list of task indices (default every task)")
    p.add_argument("--init-states", type=int, default=None, help="first N init states only (default all)")
    p.add_argument("--reset", choices=("hard", "soft"), default="hard",
                   help="hard: rebuild the model on every reset, as rollouts do (default); soft: skip the rebuild")
    p.add_argument("--table", action="store_true", help="print the Markdown table from --out and exit")
    p.add_argument("--check", type=Path, default=None,
                   help="compare this JSONL's rows (e.g. soft) with --out's (e.g. hard) per init state and exit")
    a = p.parse_args(argv)
    if a.table:
        print(table(a.out))
        return 0
    if a.check:
        print(json.dumps(compare(a.out, a.check)))
        return 0
    suites = [s for s in a.suites.split(",") if s]
    bad = [s for s in suites if s not in SUITES]
    if bad:
        p.error(f"--suites: unknown {bad[0]!r}; valid: {', '.join(SUITES)}")
    tasks = None if a.tasks is None else [int(t) for t in a.tasks.split(",")]
    sweep(a.out, suites, tasks, a.init_states, reset=a.reset)
    return 0


if __name__ == "__main__":
    sys.exit(main())
