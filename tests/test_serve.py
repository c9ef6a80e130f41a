"""replay.record.serve: `safevla serve` speaks OpenPI's server side; our OpenPI client is its peer."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

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


def test_healthz_answers_200_as_openpis_server_does(serving):
    server, _ = serving
    with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=10) as answer:
        assert (answer.status, answer.read()) == (200, b"OK\n")
    with pytest.raises(urllib.error.HTTPError) as plain_get:  # any other path is the websocket
        urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=10)
    plain_get.value.close()  # an answer left open holds the server's shutdown 10 s
    assert plain_get.value.code == 426


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


# ----------------------------------------------------------------------------- concurrent clients

# LeRobot-shaped: per-episode state lives on the one policy object. reset() empties the queues;
# select_action queues the observation, and when no action is left runs a 50 ms forward pass on
# the newest queued observation (as SmolVLA's and Diffusion's `_queues` do). Column 0 of every
# action is the x that observation carried; column 1 counts the infer calls in progress.
SLOW_QUEUE_MODEL = '''
import collections, threading, time
import numpy as np

class SlowQueue:
    metadata = {"adapter": "python", "model_id": "slow-queue"}
    n_action_steps = 5

    def __init__(self):
        self.count_lock = threading.Lock()
        self.in_flight = 0
        self.reset()

    def reset(self):
        self.observations = collections.deque(maxlen=2)
        self.actions = collections.deque()

    def select_action(self, obs, in_flight):
        self.observations.append(obs)
        if not self.actions:
            time.sleep(0.05)  # the forward pass
            x = float(self.observations[-1]["observation/state"][0])
            self.actions.extend(np.array([x, in_flight, 0, 0, 0, 0, 0]) for _ in range(self.n_action_steps))
        return self.actions.popleft()

    def infer(self, obs):
        with self.count_lock:
            self.in_flight += 1
            in_flight = self.in_flight
        try:
            self.reset()  # every request starts a fresh chunk, as the LeRobot adapter does
            return {"actions": np.stack([self.select_action(obs, in_flight) for _ in range(self.n_action_steps)])}
        finally:
            with self.count_lock:
                self.in_flight -= 1
'''


def start_safevla_serve(policy: str, cwd, *args: str) -> tuple[subprocess.Popen, int]:
    """`safevla serve --policy POLICY --port 0` in a child process; returns it and its port."""
    proc = subprocess.Popen([sys.executable, "-m", "scoring.cli", "serve", "--policy", policy, "--host", "127.0.0.1",
                             "--port", "0", *args], cwd=cwd, stderr=subprocess.PIPE, text=True)
    seen, deadline = [], time.time() + 60
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        m = re.search(r"serving .* on ws://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep its log from blocking it
            return proc, int(m.group(1))
    proc.kill()
    pytest.fail("safevla serve did not start:\n" + "".join(seen[-30:]))


@pytest.fixture
def slow_queue_server(tmp_path):
    (tmp_path / "slow_queue_model.py").write_text(SLOW_QUEUE_MODEL)
    proc, port = start_safevla_serve("slow_queue_model:SlowQueue", tmp_path)
    yield port
    proc.terminate()
    proc.wait(timeout=30)


def test_concurrent_clients_each_get_answers_from_their_own_observations(slow_queue_server):
    """Three env workers' connections, 30 requests each, against one served slow model."""
    clients, requests = 3, 30
    start = threading.Barrier(clients)
    answers: dict[int, list] = {}

    def worker(c: int) -> None:
        policy = OpenPIPolicy(f"127.0.0.1:{slow_queue_server}", replan_steps=5, timeout_s=30)
        policy.reset()
        start.wait()
        got = []
        for i in range(requests):
            x = 1000.0 * (c + 1) + i
            request = {"observation/state": np.array([x, 0, 0, 0, 0, 0, 0, 0.0]), "prompt": f"client {c}"}
            got.append((x, policy.infer(request)))
        policy.close()
        answers[c] = got

    threads = [threading.Thread(target=worker, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert sorted(answers) == list(range(clients))
    crossed = sum(int(not (chunk[:, 0] == x).all()) for got in answers.values() for x, chunk in got)
    overlapping = max(int(chunk[:, 1].max()) for got in answers.values() for _, chunk in got)
    assert (crossed, overlapping) == (0, 1), f"{crossed} crossed answers, up to {overlapping} infer calls at once"


# ----------------------------------------------------------------------------- first run

ZERO_MODEL = '''
import numpy as np

class Zero:
    def infer(self, obs):
        return {"actions": np.zeros((5, 7))}
'''


def test_serves_from_a_fresh_home_without_a_terminal_and_closes_connections_cleanly(tmp_path):
    """`python -m replay.record.serve` (which logs each connection) as on a new machine: an
    empty HOME, stdin from /dev/null."""
    (tmp_path / "home").mkdir()
    (tmp_path / "zero_model.py").write_text(ZERO_MODEL)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("XDG_")}, "HOME": str(tmp_path / "home")}
    proc = subprocess.Popen([sys.executable, "-m", "replay.record.serve", "--policy", "zero_model:Zero",
                             "--host", "127.0.0.1", "--port", "0"],
                            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        while not (port := re.findall(r"on ws://127\.0\.0\.1:(\d+)", "".join(lines))):
            assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)
            time.sleep(0.1)
        for _ in range(3):  # how soon the server's socket goes after a client leaves varies
            client = OpenPIPolicy(f"127.0.0.1:{port[0]}", replan_steps=5, timeout_s=30)
            client.reset()
            assert client.infer({"observation/state": np.zeros(8), "prompt": "x"}).shape == (5, 7)
            client.close()
        while "".join(lines).count(" closed") + "".join(lines).count("Traceback") < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=5)
    log = "".join(lines)
    assert "connection from" in log and " closed" in log and "Traceback" not in log, log
