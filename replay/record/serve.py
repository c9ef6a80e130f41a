"""`safevla serve`: serve a policy over OpenPI's websocket protocol, from any environment.

The counterpart of `--policy openpi://HOST:PORT` for models that cannot live next to the
LIBERO stack (robosuite 1.4, MuJoCo 3, numpy 2): a LeRobot checkpoint needs torch and
pins numpy and torch versions of its own. Run this in the model's environment, which needs
only numpy, msgpack, websockets and this package (no MuJoCo, no LIBERO):

    python -m replay.record.serve --policy lerobot:/ckpt/smolvla_libero --port 8000     # model's venv
    safevla rollout --suite libero_spatial --policy openpi://127.0.0.1:8000 ...  # LIBERO venv

The protocol is OpenPI's server side (`openpi.serving.websocket_policy_server`): the
metadata map first, then for each request map one answer map with `actions`; a failure is
sent as a text frame (the error) before the connection closes; `GET /healthz` answers 200.
The served object has OpenPI's policy interface, `infer(obs: dict) -> dict` with `actions`
(chunk, 7). Like OpenPI's server, it runs one `infer` at a time, whatever the number of
connections: one model object holds per-request state (LeRobot's observation and action
queues), and two env workers' requests interleaved inside it would answer each other.
"""

from __future__ import annotations

import argparse
import http
import logging
import sys
import threading
import traceback
from typing import Any

from scoring.errors import SafeVLAError

log = logging.getLogger("safevla.serve")


def load_served_policy(spec: str, **options: Any):
    """`lerobot:PATH` (a LeRobot checkpoint folder) or `module:Name` with `infer(obs) -> dict`."""
    kind, sep, rest = spec.partition(":")
    if kind == "lerobot" and sep and rest:
        from replay.record.adapters.lerobot import LeRobotServedPolicy
        return LeRobotServedPolicy(rest, **options)
    from replay.record.policy_files import import_policy_module
    module_part, sep, attr = spec.rpartition(":")
    if not sep:
        raise ValueError(f"--policy expects lerobot:PATH or module:Name (an object with infer(obs)), got {spec!r}")
    obj = getattr(import_policy_module(module_part), attr, None)
    if obj is None:
        raise ValueError(f"{module_part!r} has no attribute {attr!r}")
    obj = obj() if isinstance(obj, type) else obj
    if not callable(getattr(obj, "infer", None)):
        raise ValueError(f"{spec} has no infer(obs) -> dict method (OpenPI's policy interface)")
    return obj


class PolicyWebsocketServer:
    """Serves one policy object; one thread per connection, one `infer` at a time over all of them.

    Each connection's requests are answered in order, each from its own observation: the
    inference lock makes a request's whole `infer` (reset, queue, forward pass) atomic, so
    no connection sees another's policy state. Waiting for the lock is what OpenPI's
    server does too (its `infer` blocks its event loop).
    """

    def __init__(self, policy: Any, *, host: str = "0.0.0.0", port: int = 8000, metadata: dict | None = None):
        from websockets.sync.server import serve
        self.policy = policy
        self.metadata = dict(metadata or {})
        self._infer_lock = threading.Lock()
        self.server = serve(self._handle, host, port, compression=None, max_size=None, process_request=_health_check)
        self.port = self.server.socket.getsockname()[1]

    def _handle(self, ws) -> None:
        from websockets.exceptions import ConnectionClosed
        from websockets.frames import CloseCode
        from replay.record.adapters.msgpack_numpy import packb, unpackb
        peer = ws.remote_address  # the socket has no peer name any more once the connection is closed
        log.info("connection from %s opened", peer)
        try:
            ws.send(packb(self.metadata))
            for message in ws:
                try:
                    obs = unpackb(message)
                    with self._infer_lock:
                        answer = self.policy.infer(obs)
                    ws.send(packb(answer))
                except ConnectionClosed:
                    raise
                except Exception as exc:  # noqa: BLE001 - reported to the client, as OpenPI's server does
                    log.exception("inference failed")
                    ws.send(traceback.format_exc() + f"{type(exc).__name__}: {exc}")
                    ws.close(code=CloseCode.INTERNAL_ERROR,
                             reason="Internal server error. Traceback included in previous frame.")
                    return
        except ConnectionClosed:
            pass
        log.info("connection from %s closed", peer)

    def serve_forever(self) -> None:
        self.server.serve_forever()

    def close(self) -> None:
        self.server.shutdown()


def _health_check(connection, request):
    """`GET /healthz` answers 200, as OpenPI's server does (a load balancer's probe); other paths upgrade."""
    if request.path == "/healthz":
        return connection.respond(http.HTTPStatus.OK, "OK\n")
    return None


def add_serve_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve", help="serve a policy (e.g. a LeRobot checkpoint) over OpenPI's websocket protocol",
        description="Serve a policy over OpenPI's websocket protocol, for `safevla rollout --policy "
                    "openpi://HOST:PORT` (docs/libero.md). Runs in the model's own environment.")
    p.add_argument("--policy", required=True, help="lerobot:PATH (a LeRobot checkpoint folder saved with "
                                                  "save_pretrained) or module:Name with infer(obs) -> dict")
    p.add_argument("--host", default="0.0.0.0", help="interface to listen on (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000, OpenPI's)")
    p.add_argument("--device", default=None, help="torch device for lerobot: (default: the checkpoint's)")
    p.set_defaults(func=run_serve)
    return p


def run_serve(args) -> int:
    options = {"device": args.device} if args.device and args.policy.startswith("lerobot:") else {}
    try:
        policy = load_served_policy(args.policy, **options)
    except ImportError as exc:
        raise SafeVLAError(f"--policy {args.policy}: missing dependency ({exc}); lerobot: needs LeRobot and "
                           "torch in this environment (docs/libero.md)") from None
    except (ValueError, OSError) as exc:
        raise SafeVLAError(f"--policy {args.policy}: {exc}") from None
    metadata = dict(getattr(policy, "metadata", None) or {"policy": args.policy})
    server = PolicyWebsocketServer(policy, host=args.host, port=args.port, metadata=metadata)
    print(f"serving {args.policy} on ws://{args.host}:{server.port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m replay.record.serve`: the same as `safevla serve`, with no other subcommand's imports."""
    parser = argparse.ArgumentParser(prog="python -m replay.record.serve")
    sub = parser.add_subparsers(dest="command")
    add_serve_parser(sub)
    args = parser.parse_args(["serve", *(argv if argv is not None else sys.argv[1:])])
    logging.basicConfig(level=logging.INFO)
    try:
        return run_serve(args)
    except SafeVLAError as exc:
        print(f"safevla serve: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
