"""Connecting `--engine ray` to Ray: a private local instance, or a cluster by `--address`.

Two traps this module closes:

- `ray.init()` without an address joins whatever cluster the address file of an earlier
  `ray start` names (`/tmp/ray/ray_current_cluster`); when that head is dead, it waits
  for it for good. Without `--address` we pass `address="local"`, which always starts
  a private instance, and stop it at the end.
- `ray start --head` (Ray 2.60) enables token authentication and keeps the token in
  `~/.ray/auth_token`, but a driver given an explicit address does not send it unless
  `RAY_AUTH_MODE=token` is set. When the mode is unset we ask the head without a token
  (one GCS call); if it refuses and a token is at hand (`RAY_AUTH_TOKEN`,
  `RAY_AUTH_TOKEN_PATH` or `~/.ray/auth_token`) we turn token mode on with Ray's own
  helper, and if no token is at hand we say what to set.

A wrong address fails in seconds with one line (a TCP probe before `ray.init`, which
would otherwise retry for minutes), and so does a cluster whose nodes cannot import the
project. Ray is imported lazily.
"""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

from scoring.errors import SafeVLAError

PRIVATE = "local"  # ray.init's address for "start a new local instance, ignore any other"
REACH_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 300.0  # a worker process starting on a loaded node can take a minute
INSTALL_HINT = "pip install 'safevla-bench[ray,libero]' on every node, in the same versions as here"


def ray_module():
    try:
        import ray
    except ImportError as exc:
        raise SafeVLAError(f"--engine ray needs Ray ({exc}); pip install 'safevla-bench[ray]'") from None
    return ray


def token_available() -> bool:
    """A Ray auth token this process could send (where Ray itself looks for one)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(path).is_file() if path else (Path.home() / ".ray" / "auth_token").is_file()


def cluster_wants_token(address: str) -> bool:
    """True when the head at `address` rejects a client without a token (asked without one, in ms)."""
    try:
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:  # a Ray without token authentication
        return False
    try:
        with _quiet_stderr():  # Ray's C++ client logs the refusal it is asked to detect
            GcsClient(address=address)
    except AuthenticationError:
        return True
    except Exception:  # noqa: BLE001 - anything else is ray.init's to report
        return False
    return False


@contextlib.contextmanager
def _quiet_stderr():
    """File descriptor 2 to /dev/null for the block (C++ logging bypasses sys.stderr)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def use_token_if_needed(address: str) -> bool:
    """Turns on token mode for this process when RAY_AUTH_MODE is unset and the cluster wants a token.

    Only then: a driver in token mode cannot take results from the workers of a cluster
    started without authentication (seen with `ray.cluster_utils.Cluster`).
    """
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode is not None:
        return mode.lower() == "token"
    if not cluster_wants_token(address):
        return False
    if not token_available():
        raise SafeVLAError(
            f"the Ray cluster at {address} uses token authentication and no token is set here; copy the "
            "head's token (`ray get-auth-token` there) to ~/.ray/auth_token or RAY_AUTH_TOKEN, and set "
            "RAY_AUTH_MODE=token")
    # Ray's own switch: it also refreshes Ray's cached config, which the variable alone does not
    from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
    return bool(maybe_enable_token_auth_if_token_available(warn_if_disabled=False))


def split_address(address: str) -> tuple[str, int]:
    """'HOST:PORT' (optionally 'ray://HOST:PORT') -> (host, port), or a one-line error."""
    bare = address.split("://", 1)[-1]
    host, sep, port = bare.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SafeVLAError(f"--address expects HOST:PORT of a Ray head (e.g. 10.0.0.1:6379), got {address!r}")
    return host.strip("[]"), int(port)


def check_reachable(address: str, *, timeout: float = REACH_TIMEOUT_S) -> None:
    host, port = split_address(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise SafeVLAError(f"cannot reach a Ray cluster at {address} ({reason}); start one with "
                           f"`ray start --head --port {port}` or fix --address") from None


def connect(address: str | None = None, *, modules: tuple[str, ...] = ("scoring",), **init_kwargs) -> bool:
    """Connects to the cluster at `address`, or starts a private local instance; True if we started Ray here.

    An instance that is already up (tests, notebooks) is used as it is. `modules` must
    import on every node; a cluster where they do not gets a one-line error.
    """
    ray = ray_module()
    if ray.is_initialized():
        return False
    kwargs = {"include_dashboard": False, "log_to_driver": True, **init_kwargs}
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address and address not in ("local", "auto"):
        kwargs.pop("num_cpus", None)
        check_reachable(address)
        use_token_if_needed(address)
        try:
            ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ray.exceptions.RayError) as exc:
            raise SafeVLAError(_connect_failure(address, exc)) from None
        try:
            check_nodes_import(modules)
        except BaseException:
            ray.shutdown()
            raise
        return True
    if address == "auto":
        raise SafeVLAError("--address auto would join whatever cluster an old address file names; "
                           "give the head's HOST:PORT, or no --address for a private local instance")
    # Ray runs workers at nice 15 by default; env workers are the whole job here, so
    # give them normal priority like the local engine's processes
    os.environ.setdefault("RAY_worker_niceness", "0")
    ray.init(address=PRIVATE, **kwargs)
    return True


def _connect_failure(address: str, exc: BaseException) -> str:
    text = " ".join(str(exc).split())[:300]
    if os.environ.get("RAY_AUTH_MODE", "").lower() != "token" and not token_available():
        hint = ("if the cluster uses token authentication (the default of `ray start`), copy its token "
                "(`ray get-auth-token` on the head) to ~/.ray/auth_token or RAY_AUTH_TOKEN and set RAY_AUTH_MODE=token")
    else:
        hint = "check that the token here (RAY_AUTH_TOKEN or ~/.ray/auth_token) is the cluster's and that Ray versions match"
    return f"cannot connect to the Ray cluster at {address} ({text}); {hint}"


def _import_on_node(modules: tuple[str, ...]) -> tuple[str, str | None]:
    import importlib

    import ray
    node = ray.get_runtime_context().get_node_id()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported to the driver as one line
            return node, f"{type(exc).__name__}: {exc}"
    return node, None


def alive_nodes() -> list[dict]:
    ray = ray_module()
    return [n for n in ray.nodes() if n.get("Alive")]


def on_each_node(fn, *args, timeout: float = PROBE_TIMEOUT_S) -> dict[str, object]:
    """Runs `fn(*args)` once on every alive node (0 CPUs, pinned); {node id: result}."""
    ray = ray_module()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    task = ray.remote(fn)
    refs = {n["NodeID"]: task.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        n["NodeID"], soft=False)).remote(*args) for n in alive_nodes()}
    ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout)
    if len(ready) < len(refs):
        raise SafeVLAError(f"{len(refs) - len(ready)} of {len(refs)} Ray nodes did not start a worker process "
                           f"within {timeout:.0f} s; check `ray status` and the nodes' logs")
    out = {}
    for node, ref in refs.items():
        try:
            out[node] = ray.get(ref)
        except ray.exceptions.RayError as exc:
            out[node] = exc
    return out


def check_nodes_import(modules: tuple[str, ...]) -> None:
    """A one-line error unless every node's workers import `modules` (the project is installed there)."""
    if not modules:
        return
    for node, result in on_each_node(_import_on_node, tuple(modules)).items():
        problem = result[1] if isinstance(result, tuple) else " ".join(str(result).split())[:200]
        if problem:
            raise SafeVLAError(f"Ray node {node[:12]} cannot import {', '.join(modules)} ({problem}); {INSTALL_HINT}")
