"""One writer per remote run store: a lease object, `STORE/.lease.json`.

Object stores reached through pyarrow have no flock and no conditional PUT. A run that
writes a remote store writes a lease (a random token, host, pid, time), waits SETTLE_S,
and reads it back: a run that does not read back its own token, or finds a live lease
of another run, is refused with StoreBusy (exit 4), or waits with `--wait`. The holder
renews the lease's time every quarter of its lifetime, so only a lease whose holder is
gone (killed, its machine lost) goes stale: after SAFEVLA_LEASE_SECONDS (6 h) another
run takes it over. docs/cluster.md says what this does and does not guarantee.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sys
import threading
import time
from collections.abc import Iterator

from scoring.errors import SafeVLAError
from scoring.store.lock import StoreBusy
from scoring.store.uri_mirror import Remote, delete

LEASE = ".lease.json"
LEASE_SECONDS_ENV = "SAFEVLA_LEASE_SECONDS"
SETTLE_S = 1.0  # between writing the lease and reading it back: a racing writer's PUT lands in between



def _read_lease(rem: Remote) -> dict | None:
    try:
        with rem.filesystem.open_input_stream(f"{rem.root}/{LEASE}") as src:
            lease = json.loads(src.read())
        return lease if isinstance(lease, dict) else {}
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}  # unreadable (a torn or foreign object): treated as expired and overwritten


def _live(lease: dict | None) -> bool:
    if lease is None:
        return False
    try:
        since = float(lease.get("since", 0) or 0)
    except (TypeError, ValueError):
        since = 0.0  # a foreign or torn lease: expired
    return time.time() - since < _ttl()


def _ttl() -> float:
    try:
        return float(os.environ.get(LEASE_SECONDS_ENV, 6 * 3600))
    except ValueError:
        raise SafeVLAError(f"{LEASE_SECONDS_ENV}={os.environ[LEASE_SECONDS_ENV]!r}: expected a number of seconds") \
            from None


def _write(rem: Remote, token: str) -> None:
    from scoring.store.uri import write_bytes
    lease = {"token": token, "host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}
    try:
        write_bytes(rem.filesystem, f"{rem.root}/{LEASE}", json.dumps(lease).encode())
    except OSError as exc:
        raise SafeVLAError(f"cannot write to {rem.uri} ({' '.join(str(exc).split())[:300]}); "
                           "check the credentials and that the bucket exists") from None


def _renew(rem: Remote, token: str, stop: threading.Event) -> None:
    """Rewrites the lease's time every quarter of its lifetime while the run holds it."""
    while not stop.wait(_ttl() / 4):
        try:
            if (_read_lease(rem) or {}).get("token") != token:
                return  # taken over (it had expired): nothing of ours to renew
            _write(rem, token)
        except SafeVLAError:
            pass  # a passing network error: the next round tries again


@contextlib.contextmanager
def store_lease(rem: Remote, *, wait: bool) -> Iterator[None]:
    """Holds `STORE/.lease.json` for the block, renewed while it runs (best effort: module docstring)."""
    token = secrets.token_hex(16)
    said = False
    while True:
        held = _read_lease(rem)
        if not _live(held):
            _write(rem, token)
            time.sleep(SETTLE_S)
            held = _read_lease(rem)
            if held and held.get("token") == token:
                break
        who = f"{(held or {}).get('host', 'unknown host')} pid {(held or {}).get('pid', 'unknown')}"
        if not wait:
            raise StoreBusy(f"run store {rem.uri!r} is being written by another `safevla score` ({who}); wait for "
                            f"it to finish, re-run with --wait, or use another --out (a killed run's lease "
                            f"{rem.uri}/{LEASE} expires {_ttl() / 3600:g} h after its last renewal, see "
                            f"{LEASE_SECONDS_ENV}; or delete it)")
        if not said:
            print(f"safevla score: waiting for {who} to finish writing {rem.uri!r} ...", file=sys.stderr)
            said = True
        time.sleep(5)
    stop = threading.Event()
    renewer = threading.Thread(target=_renew, args=(rem, token, stop), name="safevla-lease", daemon=True)
    renewer.start()
    try:
        yield
    finally:
        stop.set()
        renewer.join()
        if (_read_lease(rem) or {}).get("token") == token:
            delete(rem, LEASE)
