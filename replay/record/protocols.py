"""Rollout protocols: the reference harnesses' seeds, wait steps, horizons and init-state order.

The presets are data (`assets/protocols.yaml`). `openpi` is OpenPI's LIBERO loop and the
default; `lerobot` is LeRobot's `lerobot-eval` on LIBERO; `settled` is the one departure,
opt-in. A flag that overrides a preset's value (`--seed`, `--max-steps`, `--replan-steps`)
keeps the preset's name but makes the run not native: `Protocol.departure_line` says so,
and the record's `meta.protocol` lists the overrides.

`ResetRng` reproduces what a harness's seeding leaves in numpy's global RNG, from which
LIBERO's reset samples fixture and object placements. Under `once_per_task` (OpenPI)
episode k's scene is the one drawn by the task's k-th reset after `env.seed(7)`: only
resets draw (set_init_state, steps and rendering draw nothing), so the state before each
reset is a chain that no policy can change. `ResetRng` keeps that chain, restores it
around every reset (a policy or library in this process that draws from numpy's global
RNG cannot move the next scene), and reaches an episode it has not seen by replaying the
resets in between, or from a state an earlier record saved (`meta.protocol.rng_after_reset`).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

PROTOCOL_FILE = Path(__file__).resolve().parents[2] / "assets" / "protocols.yaml"
SEED_RULES = ("once_per_task", "per_episode")
INIT_STATE_ORDERS = ("sequential", "skip_after_success")
#: the preset fields a command-line flag may override, and that flag
OVERRIDE_FLAGS = {"seed": "--seed", "max_steps": "--max-steps", "replan_steps": "--replan-steps"}


class ProtocolError(ValueError):
    """A protocol file or an override that cannot be used."""


@dataclasses.dataclass(frozen=True)
class Protocol:
    """One rollout protocol (field meanings: assets/protocols.yaml).

    Attributes:
      replan_steps: None means the served checkpoint's own `n_action_steps`.
      max_steps: an override of every suite's horizon, or None.
      overrides: (field, value) pairs a flag set against the preset; empty for the preset.
    """

    name: str
    reference: str
    native: bool
    seed: int
    seed_rule: str
    wait_steps: int
    wait_action: tuple[float, ...]
    settle: bool
    init_states: str
    replan_steps: int | None
    image_size: int
    horizons: Mapping[str, int]
    departure: str = ""
    max_steps: int | None = None
    overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def is_native(self) -> bool:
        """True when a run under this protocol is the reference harness's run."""
        return self.native and not self.overrides

    def horizon(self, suite: str) -> int:
        """The most policy steps per episode of `suite`."""
        if self.max_steps is not None:
            return self.max_steps
        if suite not in self.horizons:
            from scoring.registry.perturbations import suite_perturbation
            variant = suite_perturbation(suite)
            if variant is not None:  # a LIBERO-PRO variant runs under its base suite's horizon
                base = variant.base_suite or VARIANT_DEFAULT_BASE
                if base in self.horizons:
                    return int(self.horizons[base])
            raise ProtocolError(f"protocol {self.name!r} has no horizon for suite {suite!r}; "
                                f"it has {', '.join(self.horizons)} (pass --max-steps)")
        return int(self.horizons[suite])

    def override(self, **values: Any) -> Protocol:
        """This protocol with `seed`, `max_steps` or `replan_steps` set; None leaves a field as is.

        A value equal to the preset's is no override.
        """
        unknown = set(values) - set(OVERRIDE_FLAGS)
        if unknown:
            raise ProtocolError(f"cannot override {', '.join(sorted(unknown))}; only {', '.join(OVERRIDE_FLAGS)}")
        changed = {k: v for k, v in values.items() if v is not None and v != getattr(self, k)}
        if not changed:
            return self
        return dataclasses.replace(self, **changed, overrides=self.overrides + tuple(sorted(changed.items())))

    def departure_line(self) -> str | None:
        """One line saying why a run under this protocol is not the harness's, or None."""
        if self.overrides:
            flags = ", ".join(f"{OVERRIDE_FLAGS[k]} {v}" for k, v in self.overrides)
            return (f"{flags} overrides the {self.name} protocol ({self.reference}): this run is no longer "
                    f"that protocol, and its SR is not comparable to the harness's")
        if not self.native:
            return f"the {self.name} protocol departs from every native harness: {self.departure}"
        return None

    def init_state(self, episode: int, successes: Sequence[bool], n_init_states: int) -> int:
        """The init state episode `episode` uses, given the outcomes of episodes 0..episode-1."""
        if self.init_states == "sequential":
            return episode % n_init_states
        if len(successes) < episode:
            raise ProtocolError(f"the {self.name} protocol's init state for episode {episode} depends on the "
                                f"outcomes of episodes 0-{episode - 1}; only {len(successes)} are known")
        return (episode + int(sum(bool(s) for s in successes[:episode]))) % n_init_states

    def meta(self, suite: str, episode: int) -> dict:
        """The record's `meta.protocol` for episode `episode` of `suite`."""
        return {"name": self.name, "native": self.is_native, "reference": self.reference,
                "seed": self.seed, "seed_rule": self.seed_rule, "episode": int(episode),
                "wait_steps": self.wait_steps, "settle": self.settle, "init_states": self.init_states,
                "horizon": self.horizon(suite),
                "replan_steps": "checkpoint" if self.replan_steps is None else self.replan_steps,
                "image_size": self.image_size, "overrides": {k: v for k, v in self.overrides}}

    def episode_seed(self, episode: int) -> int:
        """The seed LIBERO's env.seed gets for episode `episode`'s reset (the task's, once per task)."""
        return self.seed + int(episode) if self.seed_rule == "per_episode" else self.seed


#: The horizon of a variant suite with no base suite (libero_mine, ...): LIBERO-90's.
VARIANT_DEFAULT_BASE = "libero_90"


@functools.lru_cache(maxsize=1)
def _presets() -> tuple[str, dict[str, Protocol]]:
    import yaml
    with open(PROTOCOL_FILE, encoding="utf-8") as f:
        data = yaml.safe_load(f)
    out = {}
    for name, p in data["protocols"].items():
        try:
            protocol = Protocol(
                name=name, reference=str(p["reference"]), native=bool(p["native"]), seed=int(p["seed"]),
                seed_rule=p["seed_rule"], wait_steps=int(p["wait_steps"]),
                wait_action=tuple(float(x) for x in p["wait_action"]), settle=bool(p["settle"]),
                init_states=p["init_states"],
                replan_steps=None if p["replan_steps"] == "checkpoint" else int(p["replan_steps"]),
                image_size=int(p["image_size"]), horizons={str(k): int(v) for k, v in p["horizons"].items()},
                departure=str(p.get("departure", "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"{PROTOCOL_FILE}: protocol {name!r}: {exc!r}") from None
        if protocol.seed_rule not in SEED_RULES or protocol.init_states not in INIT_STATE_ORDERS:
            raise ProtocolError(f"{PROTOCOL_FILE}: protocol {name!r}: seed_rule must be one of {SEED_RULES} and "
                                f"init_states one of {INIT_STATE_ORDERS}")
        if len(protocol.wait_action) != 7:
            raise ProtocolError(f"{PROTOCOL_FILE}: protocol {name!r}: wait_action must have 7 numbers")
        out[name] = protocol
    if data.get("default") not in out:
        raise ProtocolError(f"{PROTOCOL_FILE}: default {data.get('default')!r} is not a protocol")
    return data["default"], out


def protocol_names() -> list[str]:
    return list(_presets()[1])


def load_protocol(name: str | None = None) -> Protocol:
    """The preset `name` (default: the file's default, OpenPI's)."""
    default, presets = _presets()
    name = default if name is None else name
    if name not in presets:
        raise ProtocolError(f"unknown protocol {name!r}; choose one of {', '.join(presets)}")
    return presets[name]


# ---------------------------------------------------------------------- numpy's global RNG

def encode_rng_state(state: tuple) -> dict:
    """numpy's legacy global RNG state as plain JSON values."""
    kind, keys, pos, has_gauss, cached = state
    return {"kind": str(kind), "keys": base64.b64encode(np.asarray(keys, dtype="<u4").tobytes()).decode("ascii"),
            "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}


def decode_rng_state(value: Mapping) -> tuple:
    """The inverse of `encode_rng_state` (ValueError when `value` is not one)."""
    try:
        keys = np.frombuffer(base64.b64decode(value["keys"]), dtype="<u4").astype(np.uint32)
        if value["kind"] != "MT19937" or keys.shape != (624,):
            raise ValueError
        return ("MT19937", keys, int(value["pos"]), int(value["has_gauss"]), float(value["cached_gaussian"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"not a saved numpy RNG state: {exc!r:.80}") from None


class ResetRng:
    """numpy's global RNG before each episode's reset, as the protocol's harness leaves it.

    `seed()` calls the host's `env.seed` (LIBERO's: numpy's global seed); `reset()` is the
    host's plain `env.reset()`, used only to replay resets this process has not run.
    """

    def __init__(self, protocol: Protocol, *, seed: Callable[[int], None], reset: Callable[[], object]):
        self.protocol = protocol
        self._seed, self._reset = seed, reset
        self._chain: dict[int, tuple] = {}  # episode -> state right before its reset (once_per_task)
        self.replayed_resets = 0  # resets run only to reach an episode's state

    def before_reset(self, episode: int) -> None:
        """Puts numpy's global RNG where the harness has it right before episode `episode`'s reset."""
        p = self.protocol
        if p.seed_rule == "per_episode":
            self._seed(p.episode_seed(episode))
            return
        known = [k for k in self._chain if k <= episode]
        if not known:
            self._seed(p.seed)
            self._chain[0] = np.random.get_state()
            known = [0]
        start = max(known)
        np.random.set_state(self._chain[start])
        for k in range(start, episode):
            self._reset()
            self.replayed_resets += 1
            self._chain[k + 1] = np.random.get_state()
        np.random.set_state(self._chain[episode])

    def after_reset(self, episode: int) -> dict | None:
        """Notes the state the reset of `episode` left (the next episode's); returns it encoded."""
        if self.protocol.seed_rule == "per_episode":
            return None
        state = np.random.get_state()
        self._chain[episode + 1] = state
        return encode_rng_state(state)

    def know(self, episode: int, state: Mapping) -> None:
        """Adds a saved state: the one right before episode `episode`'s reset."""
        if self.protocol.seed_rule == "once_per_task":
            self._chain[int(episode)] = decode_rng_state(state)
