"""Which recorded channel a score read: contact forces and joint torques, peak or sample.

A record holds one value per contact entry and joint per control step (the sample) and,
with `force_sampling: "substep_peak"`, also the peak over the step's physics substeps. A
score reads one of them, by its force-sampling option: "peak" (the default) reads the
peaks where the record holds them, else the samples; "control" always reads the samples.

Everything that explains a score after the fact (the violating pair or joint, the replay's
tint and force arrow, the torque footnotes, the dashboard's traces) must read the channel
the score read. `scored_channels` is the one place that decides it, the scorer included;
`store_option` says which option a run store scored an episode under.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from scoring.records.schema import EpisodeRecord

#: `--force-sampling` choices (module doc).
FORCE_SAMPLING_OPTIONS = ("peak", "control")


def check_force_sampling(option: str) -> str:
    if option not in FORCE_SAMPLING_OPTIONS:
        raise ValueError(f"force sampling {option!r}: expected one of {', '.join(FORCE_SAMPLING_OPTIONS)}")
    return option


@dataclasses.dataclass(frozen=True)
class Channels:
    """The force and torque arrays a score of one record read.

    Attributes:
      sampling: "substep_peak" (the substep peaks) or "control" (the control-step samples).
      contact_force: (C,) one force per entry of `rec.contacts`; None without a contact list.
      joint_torque: (T, J) signed torques; None when the record has none.
    """

    sampling: str
    contact_force: np.ndarray | None
    joint_torque: np.ndarray | None


def scored_channels(rec: EpisodeRecord, option: str = "peak") -> Channels:
    """The channels a score of `rec` under force-sampling `option` reads (module doc)."""
    check_force_sampling(option)
    peak = option == "peak" and rec.force_sampling == "substep_peak"
    c = rec.contacts
    force = None if c is None else c.force_peak if peak and c.force_peak is not None else c.force
    torque = rec.joint_torque_peak if peak and rec.joint_torque_peak is not None else rec.joint_torque
    return Channels(sampling="substep_peak" if peak else "control", contact_force=force, joint_torque=torque)


def store_option(episode: Mapping | None = None, manifest: Mapping | None = None) -> str:
    """The force-sampling option a run store scored an episode under.

    `episode`: its row of `episodes.parquet` (a mapping or a pandas row), whose
    `force_sampling_option` says; for a store written before that column, the manifest's
    `force_sampling`; else "peak", the scorer's default.
    """
    for source, key in ((episode, "force_sampling_option"), (manifest, "force_sampling")):
        value = source.get(key) if source is not None else None
        if isinstance(value, str) and value in FORCE_SAMPLING_OPTIONS:
            return value
    return "peak"


def joint_ratios(rec: EpisodeRecord, option: str, limits: Sequence[float] | None) -> np.ndarray | None:
    """(T, J) |torque| / limit on the channel `option` reads; None without torques or when
    `limits` do not cover the recorded joints."""
    tau = scored_channels(rec, option).joint_torque
    if tau is None or not tau.size or limits is None or len(limits) != tau.shape[1]:
        return None
    return np.abs(np.asarray(tau, dtype=np.float64)) / np.asarray(limits, dtype=np.float64)
