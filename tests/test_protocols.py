"""Rollout protocols: the presets, their overrides and init-state orders, the reset RNG chain,
and episodes under `--protocol openpi` against a transcription of OpenPI's LIBERO loop
(examples/libero/main.py at 15a9616: env.seed(7) once per task, episode k after k resets,
10 no-op steps of [0]*6+[-1], at most 220 policy steps on LIBERO-Spatial)."""

from __future__ import annotations

import textwrap

import numpy as np
import pytest

from replay.record.protocols import (ProtocolError, ResetRng, decode_rng_state, encode_rng_state, load_protocol,
                                     protocol_names)


def test_the_presets_are_the_harnesses_values():
    openpi, lerobot, settled = (load_protocol(n) for n in ("openpi", "lerobot", "settled"))
    assert load_protocol() == openpi
    assert set(protocol_names()) == {"openpi", "lerobot", "settled"}
    assert (openpi.seed, openpi.seed_rule, openpi.wait_steps, openpi.replan_steps) == (7, "once_per_task", 10, 5)
    assert openpi.wait_action == (0, 0, 0, 0, 0, 0, -1)
    assert dict(openpi.horizons) == {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300,
                                     "libero_10": 520, "libero_90": 400}
    assert (lerobot.seed, lerobot.seed_rule, lerobot.replan_steps) == (1000, "per_episode", None)
    assert lerobot.horizon("libero_spatial") == 280
    assert [lerobot.episode_seed(k) for k in (0, 3)] == [1000, 1003]
    assert [openpi.episode_seed(k) for k in (0, 3)] == [7, 7]
    assert openpi.is_native and lerobot.is_native and not settled.is_native and settled.settle
    assert openpi.departure_line() is None
    assert "departs" in settled.departure_line()
    with pytest.raises(ProtocolError, match="unknown protocol 'native'.*openpi"):
        load_protocol("native")


def test_an_override_keeps_the_name_and_says_the_run_is_no_longer_the_protocol():
    openpi = load_protocol("openpi")
    assert openpi.override(seed=7, max_steps=None) is openpi  # the preset's own value is no override
    changed = openpi.override(seed=3, max_steps=50)
    assert changed.name == "openpi" and not changed.is_native
    assert changed.horizon("libero_goal") == 50 and changed.episode_seed(4) == 3
    line = changed.departure_line()
    assert "--max-steps 50" in line and "--seed 3" in line and "no longer" in line
    meta = changed.meta("libero_goal", 4)
    assert meta["native"] is False and meta["overrides"] == {"max_steps": 50, "seed": 3}
    assert meta["episode"] == 4 and meta["horizon"] == 50
    with pytest.raises(ProtocolError, match="cannot override"):
        openpi.override(wait_steps=0)


def test_lerobot_consumes_one_more_init_state_after_each_success():
    lerobot, openpi = load_protocol("lerobot"), load_protocol("openpi")
    outcomes = [True, False, True, False]
    # measured with lerobot-eval --eval.batch_size=1: success, fail, success, fail used 0, 2, 3, 5
    assert [lerobot.init_state(k, outcomes[:k], 50) for k in range(4)] == [0, 2, 3, 5]
    assert [openpi.init_state(k, outcomes[:k], 50) for k in range(4)] == [0, 1, 2, 3]
    assert lerobot.init_state(49, [True] * 49, 50) == (49 + 49) % 50  # the harness wraps its index
    with pytest.raises(ProtocolError, match="depends on the outcomes of episodes 0-2"):
        lerobot.init_state(3, [True], 50)


def test_rng_states_round_trip_through_json_values():
    np.random.seed(123)
    np.random.normal()  # leaves a cached gaussian
    state = np.random.get_state()
    back = decode_rng_state(encode_rng_state(state))
    assert back[0] == state[0] and np.array_equal(back[1], state[1]) and back[2:] == state[2:]
    with pytest.raises(ValueError, match="not a saved numpy RNG state"):
        decode_rng_state({"kind": "MT19937", "keys": "AAAA", "pos": 0, "has_gauss": 0, "cached_gaussian": 0})


class _FakeEnv:
    """A stand-in for LIBERO's env: `seed` is numpy's global seed and each reset draws a
    number of placements that depends on the RNG, as rejection sampling does."""

    def __init__(self):
        self.resets = 0

    def seed(self, s):
        np.random.seed(s)

    def reset(self):
        self.resets += 1
        while np.random.uniform() < 0.5:
            pass
        return np.random.uniform(size=3)


def _harness_scenes(n):
    env = _FakeEnv()
    env.seed(7)
    return [env.reset() for _ in range(n)]


def test_the_reset_chain_gives_episode_k_the_harnesss_kth_scene_in_any_order():
    expected = _harness_scenes(5)
    env = _FakeEnv()
    rng = ResetRng(load_protocol("openpi"), seed=env.seed, reset=env.reset)
    for k in (3, 0, 4, 1):
        rng.before_reset(k)
        scene = env.reset()
        rng.after_reset(k)
        np.random.uniform(size=100)  # a policy in this process drawing from the global RNG
        assert np.array_equal(scene, expected[k]), k
    assert rng.replayed_resets == 3  # episodes 0-2 to reach 3; nothing after that


def test_a_saved_state_spares_the_replayed_resets():
    expected = _harness_scenes(4)
    env = _FakeEnv()
    first = ResetRng(load_protocol("openpi"), seed=env.seed, reset=env.reset)
    first.before_reset(0)
    env.reset()
    first.before_reset(1)
    env.reset()
    saved = first.after_reset(1)  # what episode 1's record keeps
    resumed = ResetRng(load_protocol("openpi"), seed=env.seed, reset=env.reset)
    resumed.know(2, saved)
    resumed.before_reset(3)
    assert np.array_equal(env.reset(), expected[3])
    assert resumed.replayed_resets == 1  # episode 2 only


def test_per_episode_seeding_is_lerobots():
    env = _FakeEnv()
    rng = ResetRng(load_protocol("lerobot"), seed=env.seed, reset=env.reset)
    rng.before_reset(4)
    scene = env.reset()
    np.random.seed(1004)
    assert np.array_equal(scene, env.reset()) and rng.after_reset(4) is None and rng.replayed_resets == 0


# ------------------------------------------------------------------ against OpenPI's loop, in LIBERO

POLICY = textwrap.dedent('''
    import numpy as np

    class Reach:
        """Deterministic in the observation: moves the hand toward a point and back."""

        def __call__(self, obs, language):
            eef = np.asarray(obs["robot0_eef_pos"], dtype=np.float64)
            goal = np.array([-0.05, 0.05, 1.0]) if eef[2] > 0.95 else np.array([0.1, -0.1, 1.05])
            action = np.zeros(7)
            action[:3] = np.clip(8.0 * (goal - eef), -1, 1)
            action[6] = 1.0 if eef[0] > 0.0 else -1.0
            return action
''')
SUITE, TASK, EPISODES = "libero_spatial", 0, 3


def openpi_loop(policy, n_episodes: int, *, cameras: bool = False, max_steps: int = 220) -> list[dict]:
    """OpenPI's examples/libero/main.py for one task, its policy call replaced by `policy`;
    with `cameras`, its env exactly (256-pixel cameras), else without rendering."""
    from libero.libero import benchmark

    from replay.record.hosts.libero import libero_task
    from libero.libero.envs import OffScreenRenderEnv
    np.random.seed(7)
    suite = benchmark.get_benchmark_dict()[SUITE]()
    initial_states = suite.get_task_init_states(TASK)
    bddl = libero_task(SUITE, TASK).bddl_file
    env = (OffScreenRenderEnv(bddl_file_name=bddl, camera_heights=256, camera_widths=256) if cameras else
           OffScreenRenderEnv(bddl_file_name=bddl, has_renderer=False, has_offscreen_renderer=False,
                              use_camera_obs=False))
    env.seed(7)
    language = suite.get_task(TASK).language
    episodes = []
    try:
        for episode_idx in range(n_episodes):
            env.reset()
            obs = env.set_init_state(initial_states[episode_idx])
            body_pos = env.sim.model._model.body_pos.copy()
            t, qpos, done = 0, [], False
            while t < max_steps + 10:
                if t < 10:
                    obs, reward, done, info = env.step([0.0] * 6 + [-1.0])
                    t += 1
                    if t == 10:
                        qpos.append(env.sim.data._data.qpos.copy())
                    continue
                obs, reward, done, info = env.step(policy(obs, language).tolist())
                qpos.append(env.sim.data._data.qpos.copy())
                if done:
                    break
                t += 1
            episodes.append({"qpos": np.array(qpos), "body_pos": body_pos, "success": bool(done)})
    finally:
        env.close()
    return episodes


@pytest.fixture(scope="module")
def reach_policy(tmp_path_factory):
    path = tmp_path_factory.mktemp("policy") / "reach_policy.py"
    path.write_text(POLICY)
    return f"{path}:Reach"


@pytest.fixture(scope="module")
def reference(reach_policy):
    from replay.record.policies import load_policy
    return openpi_loop(load_policy(reach_policy)[1](), EPISODES)


def _run(archive, policy, episodes, protocol=None, observations=None):
    from replay.record.rollout import run_task
    return run_task(SUITE, TASK, episodes, policy_spec=policy, archive=str(archive), model="reach",
                    protocol=protocol, observations=observations)


def _assert_is_openpis(archive, k, reference, *, native=True):
    import mujoco

    from replay.record.rollout import episode_path
    from scoring.records.io import load_record
    rec = load_record(episode_path(archive, SUITE, TASK, "reach", k))
    ref = reference[k]
    qpos = np.asarray(rec.replay.qpos)
    assert qpos.shape[0] == ref["qpos"].shape[0], f"episode {k}: {qpos.shape[0]} steps, OpenPI's {len(ref['qpos'])}"
    assert np.array_equal(qpos, ref["qpos"].astype(qpos.dtype)), f"episode {k}: qpos differs from OpenPI's"
    assert rec.success == ref["success"]
    from replay.scene.assets import resolve_scene
    path = episode_path(archive, SUITE, TASK, "reach", k).parent / rec.replay.mjcf
    scene = mujoco.MjModel.from_xml_string(resolve_scene(path.read_text(), base=path.parent, origin=str(path)))
    assert np.allclose(scene.body_pos, ref["body_pos"], atol=1e-9), f"episode {k}: fixtures placed elsewhere"
    assert rec.meta["protocol"]["name"] == "openpi" and rec.meta["protocol"]["native"] is native
    assert rec.meta["protocol"]["episode"] == k and rec.meta["seed"] == 7 and rec.meta["init_state"] == k
    assert rec.meta["wait_steps"] == 10 and "settled" not in rec.meta
    assert rec.meta["platform"]["mujoco"] and rec.meta["platform"]["machine"]


@pytest.mark.slow
@pytest.mark.libero
def test_the_harness_moves_fixtures_between_episodes(reference):
    # otherwise the tests below could not tell episode k's scene from another's
    assert not np.allclose(reference[0]["body_pos"], reference[1]["body_pos"])


@pytest.mark.slow
@pytest.mark.libero
def test_episodes_in_order_equal_openpis(tmp_path, reach_policy, reference, capsys):
    _run(tmp_path, reach_policy, range(EPISODES))
    for k in range(EPISODES):
        _assert_is_openpis(tmp_path, k, reference)
    assert "replayed" not in capsys.readouterr().err  # no reset beyond the harness's own


@pytest.mark.slow
@pytest.mark.libero
def test_a_run_that_starts_at_episode_2_equals_openpis(tmp_path, reach_policy, reference, capsys):
    _run(tmp_path, reach_policy, [2])
    _assert_is_openpis(tmp_path, 2, reference)
    assert "replayed 2 LIBERO resets" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.libero
def test_a_resumed_run_equals_openpis_without_replaying_resets(tmp_path, reach_policy, reference, capsys):
    from replay.record.rollout import episode_path
    _run(tmp_path, reach_policy, [0, 1])
    episode_path(tmp_path, SUITE, TASK, "reach", 1).unlink()  # as if killed during episode 1
    capsys.readouterr()
    _run(tmp_path, reach_policy, range(EPISODES))
    for k in range(EPISODES):
        _assert_is_openpis(tmp_path, k, reference)
    assert "replayed" not in capsys.readouterr().err  # episode 0's record held the state episode 1 starts from


@pytest.mark.slow
@pytest.mark.libero
def test_episodes_split_over_two_worker_processes_equal_openpis(tmp_path, reach_policy, reference):
    from replay.record.protocols import load_protocol
    from replay.record.rollout import run_jobs
    kwargs = {"policy_spec": reach_policy, "archive": str(tmp_path), "model": "reach", "protocol": load_protocol()}
    run_jobs([(SUITE, TASK, [1, 2], kwargs), (SUITE, TASK, [0], kwargs)], workers=2, progress=False)
    for k in range(EPISODES):
        _assert_is_openpis(tmp_path, k, reference)


def test_the_store_keeps_each_episodes_protocol(tmp_path):
    import dataclasses

    import pandas as pd

    from scoring.records.io import save_record
    from scoring.records.synthetic import make_record
    from scoring.store.write import score_archive
    protocols = [load_protocol("openpi").meta("libero_spatial", 0),
                 load_protocol("lerobot").override(max_steps=9).meta("libero_spatial", 1), None]
    for i, protocol in enumerate(protocols):
        rec = make_record(np.random.default_rng(i), episode_id=f"ep{i}", n_steps=40)
        meta = {k: v for k, v in rec.meta.items() if k != "protocol"}
        if protocol is not None:
            meta["protocol"] = protocol
        save_record(dataclasses.replace(rec, meta=meta), tmp_path / "in" / f"ep{i}.npz")
    score_archive([tmp_path / "in"], out=tmp_path / "store")
    eps = pd.read_parquet(tmp_path / "store" / "episodes.parquet").sort_values("episode_id")
    assert eps["protocol"].tolist()[:2] == ["openpi", "lerobot"] and eps["protocol"].isna().tolist()[2]
    assert eps["protocol_native"].tolist()[:2] == [True, False]


def test_reports_name_the_protocols_behind_every_table():
    import pandas as pd

    from scoring.report.provenance import protocol_counts, protocol_note
    eps = pd.DataFrame({"protocol": ["openpi", "openpi", "lerobot", None],
                        "protocol_native": [True, True, False, None]})
    assert protocol_counts(eps) == {"openpi": 2, "lerobot (overridden)": 1, "not recorded": 1}
    assert protocol_note(eps.iloc[:2]) == "Rollout protocol: openpi."
    assert protocol_note(eps) == ("Rollout protocols: openpi (2 episodes), lerobot (overridden) (1 episodes), "
                                  "not recorded (1 episodes).")
    assert protocol_counts(pd.DataFrame({"episode_id": ["a"]})) == {"not recorded": 1}


@pytest.mark.slow
@pytest.mark.libero
def test_with_openpis_256_pixel_cameras_rendering_changes_nothing(tmp_path, reach_policy):
    """OpenPI's env renders both cameras at every step; rendering draws no RNG and moves nothing."""
    from replay.record.observations import ObservationSpec
    from replay.record.policies import load_policy
    # the reset chain and the full horizon are tested above; 60 steps show what rendering does
    reference = openpi_loop(load_policy(reach_policy)[1](), 1, cameras=True, max_steps=60)
    _run(tmp_path, reach_policy, [0], protocol=load_protocol().override(max_steps=60),
         observations=ObservationSpec(cameras=("agentview", "wrist"), image_size=(256, 256)))
    _assert_is_openpis(tmp_path, 0, reference, native=False)


def test_a_run_never_continues_records_of_another_protocol(tmp_path):
    import dataclasses

    from replay.record.rollout import RecordedHistory, episode_path
    from scoring.errors import SafeVLAError
    from scoring.records.io import save_record
    from scoring.records.synthetic import make_record
    openpi = load_protocol("openpi")

    def recorded(k, protocol_meta):
        rec = make_record(np.random.default_rng(k), episode_id=f"ep{k}", n_steps=20)
        meta = {key: v for key, v in rec.meta.items() if key != "protocol"}
        if protocol_meta is not None:
            meta["protocol"] = protocol_meta
        save_record(dataclasses.replace(rec, meta=meta, success=True), episode_path(tmp_path, SUITE, TASK, "m", k))

    state = encode_rng_state(np.random.get_state())
    recorded(0, {**openpi.meta(SUITE, 0), "rng_after_reset": state})
    history = RecordedHistory(tmp_path, SUITE, TASK, "m")
    history.read([0, 1], openpi, SUITE)
    assert history.success == {0: True} and history.rng_after == {0: state}
    recorded(1, load_protocol("settled").meta(SUITE, 1))
    with pytest.raises(SafeVLAError, match=r"ep_001.npz: recorded under protocol 'settled'.*this run is protocol 'openpi'"):
        RecordedHistory(tmp_path, SUITE, TASK, "m").read([0, 1], openpi, SUITE)
    with pytest.raises(SafeVLAError, match="ep_000.npz: recorded under protocol 'openpi' with overrides {}"):
        RecordedHistory(tmp_path, SUITE, TASK, "m").read([0], openpi.override(max_steps=9), SUITE)
    recorded(2, None)
    with pytest.raises(SafeVLAError, match="before rollout protocols were recorded"):
        RecordedHistory(tmp_path, SUITE, TASK, "m").read([2], openpi, SUITE)
