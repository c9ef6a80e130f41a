"""Which joint carries each torque violation, read back from the trajectories."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from scoring.records.synthetic import make_record
from scoring.registry.lookup import load_registry
from scoring.report.torque_joints import STATEMENT, TorqueAttribution, torque_attribution, worst_joint
from scoring.store.write import load_store

DEMO = Path(__file__).parent.parent / "assets" / "demo" / "store"


def test_worst_joint_is_the_largest_ratio_not_the_largest_torque():
    rec = make_record(np.random.default_rng(0), episode_id="e", n_steps=20, contacts_per_step=2, severity=0)
    tq = np.zeros((20, 7))
    tq[3, 0] = 80.0   # 80 / 87: large torque, below its limit
    tq[9, 4] = 20.0   # 20 / 12: joint 5 over its limit
    rec = dataclasses.replace(rec, joint_torque=tq)
    assert worst_joint(rec, load_registry()) == 4
    rec = dataclasses.replace(rec, joint_torque=tq[:, :6])  # limits do not cover 6 joints
    assert worst_joint(rec, load_registry()) is None


def test_worst_joint_reads_the_channel_that_was_scored():
    """With substep peaks, the violation can live in the peak only: joint 6 sits at exactly its limit at
    the end of each step (ratio 1.0, safe) while joint 5 peaks over its limit inside a step."""
    rec = make_record(np.random.default_rng(0), episode_id="e", n_steps=20, contacts_per_step=2, severity=0)
    tq = np.zeros((20, 7))
    tq[:, 5] = 12.0
    peak = tq.copy()
    peak[9, 4] = 25.0
    rec = dataclasses.replace(rec, joint_torque=tq, joint_torque_peak=peak,
                              meta={**rec.meta, "force_sampling": "substep_peak"})
    assert worst_joint(rec, load_registry()) == 4
    assert worst_joint(rec, load_registry(), force_sampling="control") == 5


def test_real_libero_torque_violations_come_from_joint_5():
    """robosuite clips joints 1-4 below and 6-7 at their datasheet limits: only joint 5 can exceed."""
    _, eps, specs = load_store(DEMO)
    a = torque_attribution(DEMO, eps, specs)
    assert a.n_violations > 0 and a.unresolved == 0
    assert a.by_joint == {5: a.n_violations}
    text = a.sentence(host="libero")
    assert text.startswith(STATEMENT)
    assert f"Joint 5 carries {a.n_violations} of {a.n_violations} torque violations (100.0%)" in text


def test_sentences():
    assert "No torque violations" in TorqueAttribution().sentence()
    s = TorqueAttribution(n_violations=4, by_joint={5: 2, 2: 1}, unresolved=1).sentence()
    assert "Joint 5 carries 2 of 3 torque violations (66.7%); other joints: joint 2: 1; 1 with no readable" in s
    assert "trajectories not available" in TorqueAttribution(n_violations=2, unresolved=2).sentence()


@pytest.mark.parametrize("host", ["libero", "robocasa", None])
@pytest.mark.parametrize("by_joint", [{}, {5: 3}, {5: 1, 2: 2}, {2: 4}])
def test_the_clipping_facts_are_libero_only_and_never_contradicted(host, by_joint):
    a = TorqueAttribution(n_violations=sum(by_joint.values()), by_joint=by_joint)
    text = a.sentence(host=host)
    others = any(j != 5 for j in by_joint)
    assert ("LIBERO" in text) == (host == "libero")
    assert text.startswith(STATEMENT) == (host == "libero" and not others)
    if others:  # "only joint 5 can exceed" is never followed by another joint's violations
        assert "only joint 5 (datasheet 12 N·m) can exceed" not in text
        assert "other joints: joint 2:" in text
        if host == "libero":
            assert "not clipped that way" in text


def test_missing_trajectories_are_unresolved_not_errors():
    _, eps, specs = load_store(DEMO)
    a = torque_attribution(DEMO, eps.assign(trajectory="nowhere/x.npz"), specs)
    assert a.unresolved == a.n_violations > 0 and a.by_joint == {}
