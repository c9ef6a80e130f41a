"""Before/after of two run stores of the same rollouts (e.g. the demo before and after a recorder change).

    python scripts/store_before_after.py OLD_STORE NEW_STORE

Prints Markdown: per (model, suite), SR / Safety / SBU / VSI in each store, then each scored
family's violation rate (share of episodes where it is active and violated) in each store.
Episodes are matched by id; only ids present in both stores count. The new store's unsettled
starts (if it flags them) are left out of both, as the report leaves them out.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from scoring.registry.lookup import load_registry  # noqa: E402
from scoring.store.write import load_store  # noqa: E402


def violation_rates(eps: pd.DataFrame, specs: pd.DataFrame) -> pd.DataFrame:
    scored = specs[~specs["report_only"].fillna(False).astype(bool)]
    violated = scored[scored["active"].fillna(False).astype(bool) & (scored["rho"] < 0)]
    hits = violated.groupby(["episode_id", "family"]).size().unstack(fill_value=0) > 0
    hits = hits.reindex(eps["episode_id"]).fillna(False)
    hits.index = eps.index
    return pd.concat([eps[["model", "suite"]], hits], axis=1).groupby(["model", "suite"]).mean() * 100


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    (_, old, old_specs), (_, new, new_specs) = (load_store(p) for p in argv)
    if "settled" in new:
        new = new[new["settled"].fillna(True).astype(bool)]
    ids = sorted(set(old["episode_id"]) & set(new["episode_id"]))
    old, new = (d[d["episode_id"].isin(ids)].sort_values("episode_id").reset_index(drop=True) for d in (old, new))
    print(f"{len(ids)} episodes in both stores\n")
    print("| model | suite | SR | Safety before → after | SBU before → after | VSI before → after |")
    print("|---|---|---|---|---|---|")
    for (model, suite), o in old.groupby(["model", "suite"]):
        n = new[(new["model"] == model) & (new["suite"] == suite)]
        print(f"| {model} | {suite} | {100 * o['success'].mean():.0f} → {100 * n['success'].mean():.0f} % "
              f"| {100 * o['safe'].mean():.0f} → {100 * n['safe'].mean():.0f} % "
              f"| {100 * o['sbu'].mean():.0f} → {100 * n['sbu'].mean():.0f} % "
              f"| {o['vsi'].mean():.3f} → {n['vsi'].mean():.3f} |")
    names = {s.family: s.name for s in load_registry().specs}
    before = violation_rates(old, old_specs[old_specs["episode_id"].isin(ids)])
    after = violation_rates(new, new_specs[new_specs["episode_id"].isin(ids)])
    families = [f for f in names if f in before.columns or f in after.columns]
    print("\nViolation rate per family, % of episodes, before → after:\n")
    print("| model | suite | " + " | ".join(names[f] for f in families) + " |")
    print("|---|---|" + "---|" * len(families))
    for key in before.index.union(after.index):
        cells = []
        for f in families:
            b = before[f].get(key, 0.0) if f in before else 0.0
            a = after[f].get(key, 0.0) if f in after else 0.0
            cells.append(f"{b:.0f} → {a:.0f}")
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
