"""Measured effect of each reading of the paper's ambiguities on a run store.

    .venv/bin/python scripts/ambiguity_effects.py [STORE]     (default: assets/demo/store)

Prints Markdown: per suite (over all its episodes) n, Safety, SBU and VSI under the
default reading and under each alternative (LIBERO-Goal applicability `paper-tables`,
VSI saturation `anchor`), the episodes whose verdict flips, and the joint attribution
of the torque violations. docs/scoring.md quotes its output for the demo store; re-run
it after the demo store is regenerated.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scoring.registry.lookup import load_registry  # noqa: E402
from scoring.report.paper_layout import ordered_suites, suite_info, with_canonical_benchmark  # noqa: E402
from scoring.report.readings import Reading, apply_reading  # noqa: E402
from scoring.report.torque_joints import torque_attribution  # noqa: E402
from scoring.stats.metrics import aggregate  # noqa: E402
from scoring.store.write import load_store  # noqa: E402

READINGS = {"default (appendix-d, eq1)": Reading(),
            "applicability paper-tables": Reading(applicability="paper-tables"),
            "VSI saturation anchor": Reading(vsi_saturation="anchor")}


def effects(store: Path) -> str:
    reg = load_registry()
    _, episodes, specs = load_store(store)
    base = None
    lines = ["| reading | suite | n | Safety % | SBU % | VSI | verdicts flipped | VSI changed |",
             "|:---|:---|---:|---:|---:|---:|---:|---:|"]
    for name, reading in READINGS.items():
        eps, _ = apply_reading(episodes, specs, reading, registry=reg)
        eps = with_canonical_benchmark(eps, reg)
        base = eps if base is None else base
        diff = eps.assign(flip=eps["safe"].to_numpy() != base["safe"].to_numpy(),
                          moved=abs(eps["vsi"].to_numpy() - base["vsi"].to_numpy()) > 1e-12)
        agg = aggregate(eps, by=("benchmark",), ci=False).set_index("benchmark")
        for bench in ordered_suites(agg.index):
            row, sel = agg.loc[bench], diff[diff["benchmark"] == bench]
            lines.append(f"| {name} | {suite_info(bench)['name']} | {int(row['n'])} | {100 * row['safety']:.1f} | "
                         f"{100 * row['sbu']:.1f} | {row['vsi']:.3f} | {int(sel['flip'].sum())} | "
                         f"{int(sel['moved'].sum())} |")
    torque = torque_attribution(store, episodes, specs, registry=reg)
    by_model = pd.Series(dtype=int)
    if torque.n_violations:
        viol = specs[(specs["family"] == "joint_torque") & specs["active"] & (specs["rho"] < 0)]
        by_model = episodes.set_index("episode_id").loc[viol["episode_id"], "model"].value_counts().sort_index()
    hosts = set(with_canonical_benchmark(episodes, reg)["host"])
    lines += ["", f"Torque: {torque.sentence(host=hosts.pop() if len(hosts) == 1 else None)}",
              "Torque violations per model: " + (", ".join(f"{m} {k}" for m, k in by_model.items()) or "none")]
    return "\n".join(lines)


if __name__ == "__main__":
    print(effects(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "assets" / "demo" / "store"))
