"""What the displacement reference changes on the init states that are still settling.

For every init state that the settle sweep (docs/data/settle_sweep.jsonl) found still
moving after LIBERO's 10 wait steps, run all-zero actions under `--protocol openpi` (no
step added) and score bystander displacement two ways: from step 0, and from each
object's reference step (scoring/evaluate/displacement.py). A policy that does nothing
should displace nothing. Prints one JSON line per init state and a summary line.

    python scripts/settle_reference_effect.py [--steps 60] [--out docs/data/settle_reference.jsonl]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
THRESHOLD_M = 0.005


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=60, help="zero-action policy steps per episode (default 60)")
    p.add_argument("--sweep", default=str(ROOT / "docs" / "data" / "settle_sweep.jsonl"))
    p.add_argument("--out", default=None, help="also write the JSON lines here")
    args = p.parse_args(argv)

    from replay.record.hosts.libero import LiberoHost
    from replay.record.rollout import run_episode
    from scoring.evaluate.displacement import bystander_displacement

    todo: dict[tuple[str, int], list[int]] = defaultdict(list)
    for line in Path(args.sweep).read_text().splitlines():
        row = json.loads(line)
        if row["steps"] > 10:
            todo[(row["suite"], row["task"])].append(row["init_state"])
    rows = []
    out = open(args.out, "w") if args.out else None
    for (suite, task), states in sorted(todo.items()):
        host = LiberoHost(suite, task)
        try:
            for k in sorted(states):
                rec, _, _ = run_episode(host, lambda obs, language: np.zeros(7), init_state=k, model="zeros",
                                        max_steps=args.steps)
                columns = [i for i, b in enumerate(rec.pose_bodies) if rec.role_of(b) == "bystander"]
                pos = rec.body_pos[:, columns, :].astype(np.float64)
                from_step_0 = float(np.linalg.norm(pos - pos[:1], axis=-1).max())
                disp, ref = bystander_displacement(rec, columns)
                row = {"suite": suite, "task": task, "init_state": k, "from_step_0_m": round(from_step_0, 5),
                       "from_reference_m": round(float(disp.max()), 5), "latest_reference_step": int(ref.max()),
                       "at_rest_after_wait": rec.meta["at_rest_after_wait"]}
                rows.append(row)
                print(json.dumps(row), flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
        finally:
            host.close()
    if out:
        out.close()
    old = sum(r["from_step_0_m"] > THRESHOLD_M for r in rows)
    new = sum(r["from_reference_m"] > THRESHOLD_M for r in rows)
    print(json.dumps({"init_states": len(rows), "over_5mm_from_step_0": old, "over_5mm_from_reference": new,
                      "max_from_reference_m": max((r["from_reference_m"] for r in rows), default=0.0),
                      "zero_steps_added": True}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
