"""Measure what the paper's roles (destinations as bystanders) change on an existing archive.

Re-scores every record twice: as recorded (every LIBERO object of interest a target, the
old host's rule) and with destinations and receptacles turned into bystanders (the task
registry's `targets`, which `replay.record.hosts.libero.goal_targets` reproduces from the BDDL
goal). Gripper contact is recomputed from the recorded contact list for the new targets.
Nothing is re-simulated, so everything else the recorder measured stays as it was.

    .venv/bin/python scripts/roles_effect.py assets/demo/archive
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from scoring.evaluate.score import score_episode
from scoring.records.io import load_record
from scoring.registry.lookup import load_registry


def with_paper_roles(rec, targets: tuple[str, ...]):
    """`rec` with only `targets` (recorded body names) as targets; other targets become bystanders."""
    roles = tuple("bystander" if r == "target" and b not in targets else r for b, r in zip(rec.bodies, rec.roles))
    grip = rec.gripper_contact
    if rec.contacts is not None:
        role = np.array(roles + ("other",))
        a, b = role[rec.contacts.a], role[rec.contacts.b]
        hit = ((a == "gripper") & (b == "target")) | ((a == "target") & (b == "gripper"))
        grip = np.zeros(rec.n_steps, dtype=bool)
        grip[rec.contacts.step[hit]] = True
    return dataclasses.replace(rec, targets=targets, roles=roles, gripper_contact=grip)


def main(argv=None) -> int:
    root = Path((argv or sys.argv[1:] or ["assets/demo/archive"])[0])
    reg = load_registry()
    rows = []
    for path in sorted(root.rglob("*.npz")):
        rec = load_record(path)
        targets = tuple(f"{t}_main" for t in reg.task(rec.benchmark, rec.task_id).targets)
        missing = [t for t in targets if t not in rec.bodies]
        if missing:
            print(f"{path}: target body {missing[0]!r} not recorded; skipped", file=sys.stderr)
            continue
        for label, r in (("before", rec), ("after", with_paper_roles(rec, targets))):
            res = score_episode(r)
            disp = next(s for s in res.specs if s.family == "non_target_max_disp")
            rows.append({"suite": rec.suite, "model": rec.model, "roles": label, "safe": res.safe, "sbu": res.sbu,
                         "vsi": res.vsi, "disp_violated": disp.violated, "episode": rec.episode_id})
    df = pd.DataFrame(rows)
    out = (df.groupby(["suite", "model", "roles"], sort=True)
             .agg(n=("safe", "size"), safety=("safe", "mean"), sbu=("sbu", "mean"), vsi=("vsi", "mean"),
                  disp_violations=("disp_violated", "mean"))
             .unstack("roles"))
    lines = ["| suite | model | n | Safety before → after | SBU before → after | VSI before → after | "
             "bystander-disp violations before → after |", "|---|---|---|---|---|---|---|"]
    for (suite, model), r in out.iterrows():
        lines.append(f"| {suite} | {model} | {int(r[('n', 'after')])} | "
                     f"{100 * r[('safety', 'before')]:.0f}% → {100 * r[('safety', 'after')]:.0f}% | "
                     f"{100 * r[('sbu', 'before')]:.0f}% → {100 * r[('sbu', 'after')]:.0f}% | "
                     f"{r[('vsi', 'before')]:.3f} → {r[('vsi', 'after')]:.3f} | "
                     f"{100 * r[('disp_violations', 'before')]:.0f}% → {100 * r[('disp_violations', 'after')]:.0f}% |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
