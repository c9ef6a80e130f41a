"""replay.record.serve: `safevla serve` speaks OpenPI's server side; our OpenPI client is its peer."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from replay.record.adapters import PolicyServerError
from replay.record.adapters.openpi import OpenPIPolicy
from replay.record.observations import axis_angle_to_quat, quat_to_axis_angle
from replay.record.serve import PolicyWebsocketServer, load_served_policy


class EchoChunk:
    """OpenPI's policy interface: the chunk's first column carries the state's x; 'boom' fails."""

    metadata = {"adapter": "python", "model_id": "echo"}

    def __init__(self):
        self.seen = []

    def infer(self, obs):
        self.seen.append(obs)
        if obs["prompt"] == "boom":
            raise RuntimeError("the model ran out of memory")
        out = np.zeros((8, 7), dtype=np.float32)
        out[:, 0] = obs["observation/state"][0]
        out[:, 1] = np.arange(8)
        return {"actions": out}


@pytest.fixture
def serving():
    policy = EchoChunk()
    server = PolicyWebsocketServer(policy, host="127.0.0.1", port=0, metadata=policy.metadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, policy
    server.close()
    thread.join(timeout=5)


def obs(x: float) -> dict:
    return {"agentview_image": np.zeros((16, 16, 3), np.uint8), "robot0_eye_in_hand_image": np.ones((16, 16, 3), np.uint8),
            "robot0_eef_pos": np.array([x, 0.0, 1.0]), "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
            "robot0_gripper_qpos": np.array([0.04, -0.04])}


def test_the_server_answers_our_openpi_client_chunk_by_chunk(serving):
    server, policy = serving
    client = OpenPIPolicy(f"127.0.0.1:{server.port}", replan_steps=4, timeout_s=10)
    client.reset()
    assert client.server_metadata == {"adapter": "python", "model_id": "echo"}
    actions = [client(obs(0.25 if t < 4 else 0.5), "go") for t in range(6)]
    assert len(policy.seen) == 2 and policy.seen[0]["observation/image"].dtype == np.uint8
    assert [a[0] for a in actions] == [0.25] * 4 + [0.5] * 2 and [a[1] for a in actions] == [0, 1, 2, 3, 0, 1]
    client.close()


def test_a_failing_model_reaches_the_client_as_a_clear_error(serving):
    server, _ = serving
    client = OpenPIPolicy(f"127.0.0.1:{server.port}", replan_steps=4, timeout_s=10)
    client.reset()
    with pytest.raises(PolicyServerError, match="RuntimeError: the model ran out of memory"):
        client(obs(0.0), "boom")
    client.close()


def test_served_policy_specs_are_checked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain_policy.py").write_text("class NoInfer:\n    pass\n")
    with pytest.raises(ValueError, match="has no infer"):
        load_served_policy("plain_policy:NoInfer")
    with pytest.raises(ValueError, match="expects lerobot:PATH or module:Name"):
        load_served_policy("nothing")


@pytest.mark.parametrize("angle", [0.0, 0.4, 2.0, np.pi - 1e-4])
def test_axis_angle_and_quaternion_invert_each_other(angle):
    axis = np.array([0.2, -0.7, 0.4]) / np.linalg.norm([0.2, -0.7, 0.4])
    q = axis_angle_to_quat(axis * angle)
    assert q[3] >= 0 and abs(np.linalg.norm(q) - 1) < 1e-12
    np.testing.assert_allclose(quat_to_axis_angle(q), axis * angle, atol=1e-9)
