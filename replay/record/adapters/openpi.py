"""`--policy openpi://HOST:PORT`: a policy served by OpenPI's websocket policy server.

The protocol is OpenPI's (`openpi_client.websocket_client_policy` against
`openpi.serving.websocket_policy_server`):
- on connect the server sends its metadata, a msgpack map;
- each request is one msgpack map of observations (numpy arrays in OpenPI's encoding,
  `replay.record.adapters.msgpack_numpy`), and the answer is a map whose `actions` is an
  (chunk, 7) array; a text frame instead of a binary one is the server's traceback.

The observation is the one OpenPI's LIBERO example (`examples/libero/main.py`) sends:
`observation/image` and `observation/wrist_image` (uint8 HxWx3, rotated 180 degrees to
match training preprocessing), `observation/state` (eef position, axis-angle, gripper
qpos: 8 float64) and `prompt`. The first `replan_steps` actions of a chunk are executed
before the next request (default 5, as in that example). The images go at the host's
camera size (256x256 by default, LIBERO's evaluation resolution); OpenPI's LIBERO
policies resize to their model's input on the server.

Connecting follows OpenPI's client: a server that refuses the connection may still be
loading its model, and the client retries (every `RETRY_S`; OpenPI's every 5 s) for up to
`wait_s` seconds (`--policy-wait`; OpenPI's waits forever). Answers may take `timeout_s`
(`--policy-timeout`); OpenPI's client has no receive timeout, and its server compiles the
model at its first request, so the default leaves minutes for that.

A server may ask for more of the robot's state in its metadata (`extra_observations`, a
list of keys of `EXTRA_OBSERVATIONS`): `safevla serve --policy lerobot:` asks for what
LeRobot's LIBERO env gives its processors besides OpenPI's 8 floats. OpenPI's servers ask
for nothing, and get exactly what OpenPI's example sends.
"""

from __future__ import annotations

import collections
import re
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from replay.record.adapters import PolicyServerError
from replay.record.observations import EEF_MAT, camera_image, proprio_state, rotate_180

DEFAULT_REPLAN_STEPS = 5
DEFAULT_TIMEOUT_S = 600.0  # a first request may include the model's JIT compile, several minutes
DEFAULT_WAIT_S = 0.0  # fail at once when nothing listens: a mistyped port is found before any wait
RETRY_S = 1.0
ACTION_DIM = 7
_ADDRESS = re.compile(r"^(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9_.\-]+):(?P<port>\d{1,5})/?$")
# request key -> the LIBERO observation it carries (float64, as robosuite gives it)
EXTRA_OBSERVATIONS = {"observation/eef_quat": "robot0_eef_quat", "observation/eef_mat": EEF_MAT,
                      "observation/gripper_qvel": "robot0_gripper_qvel",
                      "observation/joint_pos": "robot0_joint_pos", "observation/joint_vel": "robot0_joint_vel"}


def openpi_request(obs: Mapping[str, np.ndarray], language: str, extra: tuple[str, ...] = ()) -> dict:
    """The observation map of OpenPI's LIBERO example, from a LIBERO observation with both cameras,
    plus each of the `extra` keys (of `EXTRA_OBSERVATIONS`) whose value the observation has.

    One the host does not give is left out: the server knows which of its model's inputs
    need it, and says so (a LeRobot ACT reads no rotation matrix; XVLA's processor does).
    """
    request = {
        "observation/image": rotate_180(camera_image(obs, "agentview")),
        "observation/wrist_image": rotate_180(camera_image(obs, "wrist")),
        "observation/state": proprio_state(obs),
        "prompt": str(language),
    }
    for key in extra:
        if EXTRA_OBSERVATIONS[key] in obs:
            request[key] = np.asarray(obs[EXTRA_OBSERVATIONS[key]], dtype=np.float64)
    return request


class OpenPIPolicy:
    """A client of one OpenPI policy server; executes `replan_steps` actions of each chunk.

    One websocket connection per policy object, opened at the first episode and kept
    (as `openpi_client.WebsocketClientPolicy` does). Errors are `PolicyServerError`s that
    name the server.
    """

    adapter = "openpi"
    cameras = ("agentview", "wrist")

    def __init__(self, address: str, *, replan_steps: int | None = DEFAULT_REPLAN_STEPS,
                 timeout_s: float = DEFAULT_TIMEOUT_S, wait_s: float = DEFAULT_WAIT_S):
        self.uri = f"ws://{address}"
        # None: the served checkpoint's own `n_action_steps` (its metadata), else the whole chunk
        self.replan_steps = None if replan_steps is None else int(replan_steps)
        self.timeout_s = float(timeout_s)
        self.wait_s = float(wait_s)
        self.server_metadata: dict | None = None
        self.extra_observations: tuple[str, ...] = ()  # what the server's metadata asks for
        self.requests = 0
        self._ws = None
        self._plan: collections.deque = collections.deque()
        self._served_replan: int | None = None  # the server's n_action_steps, when its metadata says

    # ------------------------------------------------------------------ connection

    def _connect(self) -> None:
        from websockets.exceptions import InvalidHandshake, InvalidURI
        from websockets.sync.client import connect
        deadline, told = time.monotonic() + self.wait_s, False
        while True:
            try:
                ws = connect(self.uri, compression=None, max_size=None, open_timeout=self.timeout_s, close_timeout=1)
                break
            except (ConnectionRefusedError, ConnectionResetError) as exc:  # nothing listens yet: maybe loading
                left = deadline - time.monotonic()
                if left <= 0:
                    waited = (f"after waiting {self.wait_s:g} s (--policy-wait)" if self.wait_s > 0 else
                              "(--policy-wait SECONDS waits for a server that is still starting)")
                    raise PolicyServerError(f"policy server {self.uri} is not reachable {waited}: {_why(exc)}") from None
                if not told:
                    print(f"waiting up to {self.wait_s:g} s for policy server {self.uri} ({_why(exc)})",
                          file=sys.stderr, flush=True)
                    told = True
                time.sleep(min(RETRY_S, left))
            except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as exc:
                raise PolicyServerError(f"policy server {self.uri} is not reachable: {_why(exc)}") from None
        self._ws = ws
        metadata = self._receive("its metadata")
        if not isinstance(metadata, dict):
            self.close()
            raise PolicyServerError(f"policy server {self.uri} sent {type(metadata).__name__} as its metadata; "
                                    "expected a msgpack map (is it an OpenPI websocket policy server?)")
        asked = metadata.get("extra_observations", ())
        unknown = [k for k in asked if k not in EXTRA_OBSERVATIONS] if isinstance(asked, (list, tuple)) else [asked]
        if unknown:
            self.close()
            raise PolicyServerError(f"policy server {self.uri} asks for observation {unknown[0]!r}, which this client "
                                    f"cannot send; it can send {', '.join(EXTRA_OBSERVATIONS)}")
        self.server_metadata = metadata
        self.extra_observations = tuple(asked)
        served = metadata.get("n_action_steps")
        self._served_replan = served if isinstance(served, int) and not isinstance(served, bool) and served > 0 else None

    def _receive(self, what: str) -> Any:
        from websockets.exceptions import ConnectionClosed
        from replay.record.adapters.msgpack_numpy import unpackb
        try:
            raw = self._ws.recv(timeout=self.timeout_s)
        except TimeoutError:
            self.close()  # a late answer would be taken for the next request's
            raise PolicyServerError(f"policy server {self.uri} sent no {what} within {self.timeout_s:g} s "
                                    "(raise --policy-timeout for a slow model)") from None
        except ConnectionClosed as exc:
            self.close()
            raise PolicyServerError(f"policy server {self.uri} closed the connection while we waited for {what} "
                                    f"({_why(exc)})") from None
        if isinstance(raw, str):  # OpenPI's server sends its traceback as text, then closes
            self.close()
            last = raw.strip().splitlines()[-1] if raw.strip() else "(empty)"
            raise PolicyServerError(f"policy server {self.uri} failed on {what}: {last}")
        try:
            return unpackb(raw)
        except Exception as exc:  # noqa: BLE001 - any decoding failure is a malformed answer
            self.close()
            raise PolicyServerError(f"policy server {self.uri} sent {what} that is not OpenPI msgpack: "
                                    f"{type(exc).__name__}: {exc}") from None

    def close(self) -> None:
        if self._ws is not None:
            try:
                self._ws.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self._ws = None

    # ------------------------------------------------------------------ policy protocol

    def reset(self) -> None:
        self._plan.clear()
        if self._ws is None:
            self._connect()

    def __call__(self, obs: Mapping[str, np.ndarray], language: str) -> np.ndarray:
        if not self._plan:
            if self._ws is None:
                self._connect()  # its metadata says what to send
            self._plan.extend(self.infer(openpi_request(obs, language, self.extra_observations)))
        return self._plan.popleft()

    def infer(self, request: dict) -> np.ndarray:
        """Sends one request; returns the first `replan_steps` actions of the answer's chunk."""
        from websockets.exceptions import ConnectionClosed
        from replay.record.adapters.msgpack_numpy import packb
        if self._ws is None:
            self._connect()
        try:
            self._ws.send(packb(request))
        except ConnectionClosed as exc:
            self.close()
            raise PolicyServerError(f"policy server {self.uri} closed the connection ({_why(exc)})") from None
        self.requests += 1
        answer = self._receive(f"an answer to request {self.requests}")
        return self._chunk(answer)

    def _chunk(self, answer: Any) -> np.ndarray:
        where = f"policy server {self.uri}, answer to request {self.requests}"
        if not isinstance(answer, dict) or "actions" not in answer:
            keys = sorted(map(str, answer)) if isinstance(answer, dict) else type(answer).__name__
            raise PolicyServerError(f"{where}: expected a map with 'actions', got {keys}")
        try:
            chunk = np.asarray(answer["actions"], dtype=np.float64)
        except (TypeError, ValueError):
            raise PolicyServerError(f"{where}: 'actions' is not numeric") from None
        if chunk.ndim != 2 or chunk.shape[1] != ACTION_DIM:
            raise PolicyServerError(f"{where}: 'actions' has shape {chunk.shape}; expected (chunk, {ACTION_DIM})")
        replan = self.replan_steps or self._served_replan or chunk.shape[0]
        if chunk.shape[0] < replan:
            said = (f"--replan-steps {replan}" if self.replan_steps else f"the checkpoint's n_action_steps {replan}")
            raise PolicyServerError(f"{where}: a chunk of {chunk.shape[0]} actions is shorter than {said}")
        if not np.isfinite(chunk).all():
            raise PolicyServerError(f"{where}: 'actions' holds non-finite values")
        return chunk[:replan]


def _why(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def openpi_factory(address: str, *, replan_steps: int | None = DEFAULT_REPLAN_STEPS,
                   timeout_s: float = DEFAULT_TIMEOUT_S,
                   wait_s: float = DEFAULT_WAIT_S, **_other: Any) -> tuple[str, Callable[[], OpenPIPolicy]]:
    """(model name, factory) for `openpi://HOST:PORT`; validates the address and options."""
    m = _ADDRESS.match(address)
    if m is None or not 0 < int(m["port"]) < 65536:
        raise ValueError(f"openpi://{address}: expected openpi://HOST:PORT, e.g. openpi://127.0.0.1:8000")
    if replan_steps is not None and int(replan_steps) < 1:
        raise ValueError(f"--replan-steps expects a positive integer, got {replan_steps}")
    if not float(timeout_s) > 0:
        raise ValueError(f"--policy-timeout expects a positive number of seconds, got {timeout_s}")
    if not float(wait_s) >= 0:
        raise ValueError(f"--policy-wait expects a number of seconds, 0 or more, got {wait_s}")
    host, port = m["host"], int(m["port"])

    def make() -> OpenPIPolicy:
        return OpenPIPolicy(f"{host}:{port}", replan_steps=replan_steps, timeout_s=timeout_s, wait_s=wait_s)
    make.cameras = OpenPIPolicy.cameras
    make.provenance = {"adapter": "openpi", "model_id": f"openpi://{host}:{port}",
                       "replan_steps": None if replan_steps is None else int(replan_steps)}
    return f"openpi-{host.strip('[]').replace(':', '_')}-{port}", make
