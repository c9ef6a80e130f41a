"""LIBERO-PRO perturbation suites: the suite data, the derivation rule, rollout's suite list,
horizons, and one real recorded with_mug episode (its mug a bystander, bystander displacement
active)."""

from __future__ import annotations

import argparse

import pytest
import yaml

from scoring.registry import perturbations as pert
from scoring.registry.lookup import active_specs, load_registry

BASE = {"name": "pick_bowl", "language": "pick the bowl", "template": "pnp-basic",
        "targets": ["akita_black_bowl_1"], "objects": {"akita_black_bowl_1": "akita_black_bowl", "plate_1": "plate"},
        "fixtures": {"main_table": "table", "wooden_cabinet_1": "wooden_cabinet"},
        "goal_fixtures": ["wooden_cabinet_1"], "tags": [], "object_tags": ["fragile"]}
BASE_GOAL = [("on", "akita_black_bowl_1", "plate_1"), ("open", "wooden_cabinet_1_top_region")]


def rules():
    return pert.load_perturbations().rules


def variant(**over):
    v = {"name": "v", "language": "pick the bowl", "bddl_file": "x/v.bddl", "objects": dict(BASE["objects"]),
         "fixtures": dict(BASE["fixtures"]), "objects_of_interest": ["akita_black_bowl_1"],
         "goal": BASE_GOAL, "base_goal": BASE_GOAL}
    v.update(over)
    return v


# ----------------------------------------------------------------------------- the rule
def test_an_added_distractor_is_no_target_and_changes_nothing_else():
    v = variant(objects={**BASE["objects"], "libero_mug_yellow_1": "libero_mug_yellow"}, family="distractor")
    e = pert.derive_entry(BASE, v, rules()["distractor"])
    assert e["targets"] == ["akita_black_bowl_1"] and e["template"] == "pnp-basic"
    assert e["goal_fixtures"] == ["wooden_cabinet_1"] and e["object_tags"] == ["fragile"]
    assert "libero_mug_yellow_1" in e["objects"] and "new: libero_mug_yellow_1 (bystander)" in e["note"]


def test_an_added_object_that_would_be_a_target_is_refused():
    base = {**BASE, "targets": ["akita_black_bowl_1", "mug_1"]}
    v = variant(objects={**BASE["objects"], "mug_1": "libero_mug_yellow"})
    with pytest.raises(pert.DerivationError, match="mug_1 would be targets"):
        pert.derive_entry(base, v, rules()["distractor"])


def test_a_paraphrase_and_a_swap_change_nothing_physical():
    for fam, over in (("language", {"language": "lift the bowl and set it down"}), ("swap", {})):
        e = pert.derive_entry(BASE, variant(**over), rules()[fam])
        assert {k: e[k] for k in ("template", "targets", "goal_fixtures", "object_tags")} == \
            {k: BASE[k] for k in ("template", "targets", "goal_fixtures", "object_tags")}
        assert e["language"] == over.get("language", "pick the bowl")


def test_a_replaced_object_keeps_its_role_and_brings_its_catalog_tags():
    goal = [("on", "black_bowl_1", "yellow_plate_1"), ("open", "yellow_cabinet_1_top_region")]
    v = variant(objects={"black_bowl_1": "black_bowl", "yellow_plate_1": "yellow_plate"},
                fixtures={"main_table": "table", "yellow_cabinet_1": "yellow_cabinet"}, goal=goal)
    e = pert.derive_entry(BASE, v, rules()["object"])
    assert e["targets"] == ["black_bowl_1"] and e["goal_fixtures"] == ["yellow_cabinet_1"]
    assert "object_tags" not in e  # the new target's catalog tags apply, not the old explicit ones
    assert "black_bowl_1 (target, in place of akita_black_bowl_1), yellow_plate_1 (bystander)" in e["note"]


def test_the_rule_of_a_new_goal_does_not_derive_from_a_base_entry():
    with pytest.raises(pert.DerivationError, match="from_bddl"):
        pert.derive_entry(BASE, variant(), rules()["task"])


def test_every_rule_is_checked_when_loaded(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({"families": {"x": {"doc": "", "rule": {"targets": "guess"}}}, "suites": {}}))
    with pytest.raises(pert.RegistryError, match="targets: 'guess'"):
        pert.load_perturbations(path)


# ----------------------------------------------------------------------------- the suite data
def test_suite_perturbation_and_variants_of():
    p = pert.suite_perturbation("libero_spatial_with_mug")
    assert (p.base_suite, p.family, p.runnable, p.task_map) == ("libero_spatial", "distractor", True, tuple(range(10)))
    assert p.added_objects == ("libero_mug_yellow",) and p.benchmark == "libero-spatial-with-mug"
    assert p.init_states_match is False and p.pairing == "task"  # LIBERO-PRO resampled the init states
    assert pert.suite_perturbation("libero-spatial-with-mug") == p
    assert pert.suite_perturbation("libero_spatial") is None
    swap = pert.suite_perturbation("libero_spatial_swap")
    assert swap.family == "swap" and swap.runnable
    env = pert.suite_perturbation("libero_spatial_env")
    assert not env.runnable and "no init states" in env.why_not
    names = [v.suite for v in pert.variants_of("libero_spatial")]
    assert "libero_spatial_with_mug" in names and "libero_spatial_swap" in names
    assert all(v.base_suite == "libero_10" for v in pert.variants_of("libero-long"))


def test_every_runnable_variant_is_a_registry_benchmark_with_all_its_tasks():
    reg = load_registry()
    data = pert.load_perturbations()
    for suite, p in data.suites.items():
        assert p.family in data.families
        if p.task_map is not None:
            assert len(p.task_map) == p.n_tasks and len(set(p.task_map)) == p.n_tasks
        if not p.runnable:
            assert p.why_not and p.benchmark not in reg.benchmarks
            continue
        assert p.benchmark in reg.benchmarks, suite
        for i in range(p.n_tasks):
            assert active_specs(p.benchmark, f"task_{i}")


def test_a_distractor_suite_keeps_its_base_tasks_specs_and_tracks_the_added_object():
    for i in range(10):
        assert active_specs("libero-spatial-with-mug", f"task_{i}") == active_specs("libero-spatial", f"task_{i}")
        assert "non_target_max_disp" in active_specs("libero-spatial-with-mug", f"task_{i}")
    task = load_registry().task("libero-spatial-with-mug", "task_0")
    assert task.objects["libero_mug_yellow_1"] == "libero_mug_yellow"
    assert "libero_mug_yellow_1" not in task.targets


def test_variants_run_under_their_base_suites_horizon():
    from replay.record.protocols import load_protocol
    for name in ("openpi", "lerobot"):
        proto = load_protocol(name)
        assert proto.horizon("libero_spatial_with_mug") == proto.horizon("libero_spatial")
        assert proto.horizon("libero_10_swap") == proto.horizon("libero_10")
        assert proto.horizon("libero_mine") == proto.horizon("libero_90")


def test_rollout_lists_the_suites_and_refuses_one_without_init_states(tmp_path):
    pytest.importorskip("mujoco")
    from replay.record import rollout_cli
    from scoring.errors import SafeVLAError
    listing = rollout_cli.suite_listing()
    assert "libero_spatial_with_mug" in listing.split("suites refused")[0]
    assert "  libero_spatial_env: no init states in the installed package" in listing
    p = argparse.ArgumentParser(prog="safevla")
    rollout_cli.add_rollout_parser(p.add_subparsers(dest="command"))
    args = p.parse_args(["rollout", "--suite", "libero_spatial_env", "--policy", "careful", "--out", str(tmp_path)])
    with pytest.raises(SafeVLAError, match="libero_spatial_env: does not run: no init states"):
        rollout_cli.run_rollout(args)


# ----------------------------------------------------------------------------- one real episode
@pytest.mark.libero
@pytest.mark.slow
def test_a_with_mug_episode_labels_the_mug_a_bystander_and_scores_its_displacement(tmp_path):
    pytest.importorskip("mujoco")
    pytest.importorskip("libero.libero")
    from scoring.cli.main import main
    from scoring.evaluate.score import score_episode
    from scoring.records.io import load_record
    argv = ["rollout", "--suite", "libero_spatial_with_mug", "--tasks", "0", "--episodes", "1", "--policy",
            "careful", "--out", str(tmp_path), "--max-steps", "20", "--no-progress"]
    assert main(argv) == 0
    rec = load_record(tmp_path / "libero_spatial_with_mug" / "task_0" / "scripted-careful" / "ep_000.npz")
    assert rec.benchmark == "libero-spatial-with-mug" and rec.meta["protocol"]["horizon"] == 20
    assert rec.role_of("libero_mug_yellow_1_main") == "bystander"
    assert rec.targets == ("akita_black_bowl_1_main",)
    result = score_episode(rec)
    assert "non_target_max_disp" in result.active_specs
