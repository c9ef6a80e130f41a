"""Prints docs/scoring.md's perturbation tables: the spec families active per perturbation
family (against the base tasks), and the mean active spec count per runnable suite.

    python scripts/perturbation_tables.py

Reads the registry only (assets/perturbations.yaml, assets/tasks/*.yaml): no LIBERO needed.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scoring.registry import perturbations as pert  # noqa: E402

LIBERO_FAMILIES = ("max_contact_force", "non_target_max_disp", "held_object_tilt_world", "stable_grasp_maintained",
                   "joint_torque", "self_collision_free")
SHORT = {"max_contact_force": "MCF", "non_target_max_disp": "BD", "held_object_tilt_world": "tilt",
         "stable_grasp_maintained": "grasp", "joint_torque": "torque", "self_collision_free": "self-coll."}


def tables() -> str:
    """docs/scoring.md's tables: applicability per family, and mean active specs per suite (no LIBERO needed)."""
    from scoring.registry.lookup import active_specs, load_registry
    reg = load_registry()
    data = pert.load_perturbations()
    base_ids = {"libero_spatial": "libero-spatial", "libero_object": "libero-object", "libero_goal": "libero-goal",
                "libero_10": "libero-10"}

    def specs(bench, n):
        return [set(active_specs(bench, f"task_{i}")) for i in range(n)]
    out = ["| family | runnable suites | tasks | " + " | ".join(SHORT[f] for f in LIBERO_FAMILIES)
           + " | vs the base task |", "|---|---:|---:|" + "---:|" * len(LIBERO_FAMILIES) + "---|"]
    for fam in data.families:
        suites = [p for p in data.suites.values() if p.family == fam and p.runnable]
        if not suites:
            out.append(f"| {fam} | 0 | 0 |" + " - |" * len(LIBERO_FAMILIES) + " none runs |")
            continue
        counts = dict.fromkeys(LIBERO_FAMILIES, 0)
        gained, lost, same, unpaired, n = Counter(), Counter(), 0, 0, 0
        for p in suites:
            mine = specs(p.benchmark, p.n_tasks)
            n += len(mine)
            for f in LIBERO_FAMILIES:
                counts[f] += sum(f in a for a in mine)
            if p.task_map is None:
                unpaired += len(mine)
                continue
            theirs = specs(base_ids[p.base_suite], max(p.task_map) + 1)
            for i, j in enumerate(p.task_map):
                if mine[i] == theirs[j]:
                    same += 1
                gained.update(mine[i] - theirs[j])
                lost.update(theirs[j] - mine[i])
        diff = []
        if same:
            diff.append(f"{same} tasks the same")
        diff += [f"+{SHORT.get(f, f)} on {k}" for f, k in sorted(gained.items())]
        diff += [f"-{SHORT.get(f, f)} on {k}" for f, k in sorted(lost.items())]
        if unpaired:
            diff.append(f"{unpaired} tasks with no base task")
        out.append(f"| {fam} | {len(suites)} | {n} | " + " | ".join(str(counts[f]) for f in LIBERO_FAMILIES)
                   + f" | {'; '.join(diff)} |")
    out += ["", "| suite | family | tasks | tasks with 3 / 4 / 5 / 6 active | mean | base suite's mean |",
            "|---|---|---:|---|---:|---:|"]
    for p in data.suites.values():
        if not p.runnable:
            continue
        mine = specs(p.benchmark, p.n_tasks)
        hist = Counter(len(a) for a in mine)
        mean = sum(map(len, mine)) / len(mine)
        base = (sum(map(len, specs(base_ids[p.base_suite], 10))) / 10) if p.base_suite in base_ids else None
        out.append(f"| {p.suite} | {p.family} | {len(mine)} | {' / '.join(str(hist[k]) for k in (3, 4, 5, 6))} | "
                   f"{mean:.2f} | {'-' if base is None else f'{base:.2f}'} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(tables(), end="")
