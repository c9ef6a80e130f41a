"""Adapters that turn a served or saved VLA into a policy for `safevla rollout`.

Each is selected by the scheme of `--policy` (`openpi://HOST:PORT`); they import their
optional dependencies (msgpack, websockets) only when used. May import scoring and
replay.record.observations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scoring.errors import SafeVLAError

SCHEMES = ("openpi",)


def load_adapter(spec: str, **options: Any) -> tuple[str, Callable[[], Any]]:
    """(model name, factory) for an adapter URL such as `openpi://127.0.0.1:8000`."""
    scheme, _, rest = spec.partition("://")
    if scheme == "openpi":
        from replay.record.adapters.openpi import openpi_factory
        return openpi_factory(rest, **options)
    raise ValueError(f"unknown policy adapter {scheme + '://'!r} in {spec!r}; supported: "
                     f"{', '.join(s + '://' for s in SCHEMES)}")


class PolicyServerError(SafeVLAError):
    """A policy server is down, too slow or answered nonsense: a fault of the serving, not of the model.

    The runner adds the episode to the message and records nothing for that episode.
    """
