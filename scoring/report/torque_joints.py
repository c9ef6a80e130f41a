"""Which joint carries each joint-torque violation (the statement next to torque figures).

robosuite clips the Panda's joints 1-5 at 80 N·m and 6-7 at 12 N·m, against datasheet
limits of 87 (joints 1-4) and 12 N·m (joints 5-7): only joint 5 can exceed its limit,
and the others saturate at a ratio of exactly 1.0 (safe). The run store keeps only the
episode's worst ratio, so the joint is read back from the trajectories of the violating
episodes (a few per cell; the others are never opened).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from scoring.errors import SafeVLAError
from scoring.evaluate.channels import joint_ratios, store_option
from scoring.evaluate.signals import scored_torque_limits
from scoring.registry.lookup import Registry, load_registry

JOINT_5 = 4  # 0-based index of the Panda's joint 5 (1-based numbering in the text)
# The clipping facts hold for LIBERO's robosuite Panda only; other hosts get the counts alone.
CLIPPED_HOSTS = ("libero",)
STATEMENT = ("Joint torque: LIBERO's simulator clips joints 1-5 at 80 N·m, so only joint 5 (datasheet 12 N·m) "
             "can exceed its limit; joints 1-4 (87 N·m) and 6-7 (clipped at their 12 N·m limit) saturate at "
             "exactly the limit, which is safe.")
# the same facts, for records that violate on other joints too (so were not clipped that way)
UNCLIPPED = ("Joint torque: LIBERO's simulator clips joints 1-5 at 80 N·m and 6-7 at their 12 N·m limit, "
             "which leaves only joint 5 (datasheet 12 N·m) able to exceed its limit; these records exceed it "
             "on other joints too, so their torques were not clipped that way.")


@dataclass(frozen=True)
class TorqueAttribution:
    """Torque violations (episodes) by the joint with the episode's worst ratio.

    Attributes:
      n_violations: episodes whose joint_torque clause is violated.
      by_joint: 1-based joint number -> violating episodes whose worst joint it is.
      unresolved: violating episodes whose trajectory could not be read.
    """

    n_violations: int = 0
    by_joint: dict[int, int] = field(default_factory=dict)
    unresolved: int = 0

    @property
    def joint5(self) -> int:
        return self.by_joint.get(JOINT_5 + 1, 0)

    def sentence(self, *, host: str | None = None) -> str:
        """The measured share of violations from joint 5, after the clipping facts when `host`
        (a registry host id) is one they hold for; they never precede other joints' violations
        as if those were impossible."""
        others = {j: k for j, k in sorted(self.by_joint.items()) if j != JOINT_5 + 1}
        lead = "Joint torque:" if host not in CLIPPED_HOSTS else UNCLIPPED if others else STATEMENT
        if not self.n_violations:
            return f"{lead} No torque violations in these episodes."
        resolved = self.n_violations - self.unresolved
        if not resolved:
            return (f"{lead} {self.n_violations} torque violation(s); the joint is unknown (trajectories "
                    "not available).")
        share = 100 * self.joint5 / resolved
        text = f"{lead} Joint 5 carries {self.joint5} of {resolved} torque violations ({share:.1f}%)"
        if others:
            text += "; other joints: " + ", ".join(f"joint {j}: {k}" for j, k in others.items())
        if self.unresolved:
            text += f"; {self.unresolved} with no readable trajectory"
        return text + "."


def violation_joints(store: str | Path, episodes: pd.DataFrame, spec_results: pd.DataFrame, *,
                     registry: Registry | None = None) -> pd.Series:
    """episode_id -> 1-based worst joint (NaN if unreadable), over the violated joint_torque rows."""
    from scoring.records.io import load_record  # only when there is something to attribute

    reg = registry or load_registry()
    rows = spec_results[(spec_results["family"] == "joint_torque") & spec_results["active"].astype(bool)
                        & (spec_results["rho"] < 0)]
    by_id = episodes.drop_duplicates("episode_id").set_index("episode_id", drop=False)
    joints = {}
    for eid in rows["episode_id"]:
        row = by_id.loc[eid] if eid in by_id.index else None
        rel, joint = (row.get("trajectory") if row is not None else None), None
        option = store_option(row)  # the torque channel the episode was scored on
        if isinstance(rel, str) and rel:
            try:
                joint = worst_joint(load_record(Path(rel) if Path(rel).is_absolute() else Path(store) / rel), reg,
                                    force_sampling=option)
            except (SafeVLAError, OSError):
                joint = None
        joints[eid] = np.nan if joint is None else joint + 1
    return pd.Series(joints, dtype=float, name="joint")


def attribution_of(joints: pd.Series) -> TorqueAttribution:
    """Counts of a `violation_joints` result (or any subset of it)."""
    known = joints.dropna().astype(int)
    return TorqueAttribution(n_violations=len(joints), by_joint={int(j): int(k) for j, k in
                                                                 known.value_counts().sort_index().items()},
                             unresolved=int(joints.isna().sum()))


def torque_attribution(store: str | Path, episodes: pd.DataFrame, spec_results: pd.DataFrame, *,
                       registry: Registry | None = None) -> TorqueAttribution:
    """Counts, over the violated joint_torque rows of `spec_results`, the worst joint of each."""
    return attribution_of(violation_joints(store, episodes, spec_results, registry=registry))


def worst_joint(record, registry: Registry, *, force_sampling: str = "peak") -> int | None:
    """0-based joint with the largest |torque| / limit over the episode (the scorer's limits), on the
    torque channel `force_sampling` scores (`scoring.evaluate.channels.joint_ratios`)."""
    ratio = joint_ratios(record, force_sampling, scored_torque_limits(record, registry))
    return None if ratio is None else int(np.argmax(ratio.max(axis=0)))
