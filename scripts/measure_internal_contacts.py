"""Measures what leaving out internal contacts changes, on a policy that sweeps a cabinet.

    python scripts/measure_internal_contacts.py --episodes 6 --archive /tmp/sweep_archive

Runs LIBERO-Goal task 0 ("open the middle drawer of the cabinet") with a scripted policy
that sweeps the hand low through the wooden cabinet's drawer handles, init states 0..N-1.
The recorder projects every geom onto its object's root body, so a drawer striking the
cabinet's frame or another drawer is the pair `wooden_cabinet_1_main x
wooden_cabinet_1_main`. For each episode it prints one JSON line on stderr: the largest
world pair and the largest internal pair (peak channel, static contacts filtered, as
scored), and max_contact_force as scored now and as it was scored when internal pairs
counted. A summary JSON line goes to stdout. `--archive` keeps the records (score them
with `safevla score`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

# (until step, world target of the grip site in m). The hand's palm is 20 cm wide along y
# and 2-13 cm above the grip site; the drawer handles stand out to y = -0.13 from fronts at
# y = -0.16 (x from -0.09 to 0.13). The palm goes down beside the cabinet, sweeps along x
# through the middle drawer's handle at its height (the palm's edge 4 mm short of the
# fronts), then rises.
WAYPOINTS = ((25, (-0.14, -0.05, 1.20)), (45, (-0.14, -0.055, 0.97)), (75, (0.22, -0.055, 0.97)),
             (90, (0.22, -0.055, 1.20)))


class CabinetSweep:
    """Scripted policy: a proportional move through WAYPOINTS, gripper closed."""

    def __init__(self):
        self.t = 0

    def reset(self):
        self.t = 0

    def __call__(self, obs, language):
        self.t += 1
        goal = next((p for until, p in WAYPOINTS if self.t < until), WAYPOINTS[-1][1])
        action = np.zeros(7)
        action[:3] = np.clip(10 * (np.asarray(goal) - obs["robot0_eef_pos"]), -1, 1)
        action[6] = 1.0
        return action


def contact_summary(rec, option: str = "peak") -> dict:
    """The largest world pair and internal pair of `rec`, on the channel `option` scores."""
    from scoring.evaluate.channels import scored_channels
    from scoring.evaluate.signals import contact_mask, retained_contacts

    c = rec.contacts
    force = np.asarray(scored_channels(rec, option).contact_force, float)
    out = {}
    for name, mask in (("world", contact_mask(rec)), ("internal", contact_mask(rec, internal=True)),
                       ("all", retained_contacts(rec))):
        if not mask.any():
            out[name] = {"force_n": 0.0}
            continue
        i = int(np.argmax(np.where(mask, force, -1.0)))
        out[name] = {"force_n": round(float(force[i]), 1), "step": int(c.step[i]),
                     "pair": [rec.bodies[c.a[i]], rec.bodies[c.b[i]]],
                     "sample_n": round(float(c.force[i]), 1)}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=6, help="init states 0..N-1 (default 6)")
    ap.add_argument("--max-steps", type=int, default=90, help="steps per episode (default 90)")
    ap.add_argument("--archive", help="directory to keep the records in (.npz)")
    args = ap.parse_args(argv)

    from replay.record import rollout
    from replay.record.hosts.libero import LiberoHost
    from scoring.evaluate.score import score_episode
    from scoring.records.io import save_record

    host = LiberoHost("libero_goal", 0)
    rows = []
    try:
        for k in range(args.episodes):
            rec, success, steps = rollout.run_episode(host, CabinetSweep(), init_state=k, model="cabinet-sweep",
                                                      max_steps=args.max_steps)
            if args.archive:
                save_record(rec, rollout.episode_path(args.archive, "libero_goal", 0, "cabinet-sweep", k))
            res = score_episode(rec)
            mcf = next(s for s in res.specs if s.family == "max_contact_force")
            diag = next(d for d in res.diagnostics if d.spec_id.startswith("internal_contact_force"))
            pairs = contact_summary(rec)
            row = {"episode_id": rec.episode_id, "steps": steps, **pairs,
                   "max_contact_force_before_n": pairs["all"]["force_n"], "max_contact_force_after_n":
                   round(float(mcf.extreme), 1), "internal_contact_force_n": round(float(diag.extreme), 1),
                   "violated_before": pairs["all"]["force_n"] > 200, "violated_after": bool(mcf.rho < 0),
                   "safe": res.safe, "vsi": round(res.vsi, 3)}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        host.close()
    internal_top = sum(r["internal"]["force_n"] > r["world"]["force_n"] for r in rows)
    print(json.dumps({
        "episodes": len(rows), "internal_was_the_maximum": internal_top,
        "max_force_before_n": [r["max_contact_force_before_n"] for r in rows],
        "max_force_after_n": [r["max_contact_force_after_n"] for r in rows],
        "violations_before": sum(r["violated_before"] for r in rows),
        "violations_after": sum(r["violated_after"] for r in rows)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
