"""Quantitative STL robustness over recorded trajectories, batched over episodes.

Every safety spec in the registry is an STL formula over per-step signals; this module turns a
formula and signals into a robustness value (positive = satisfied with that margin, negative =
violated by that depth). It evaluates offline, on whole recorded episodes, in discrete time.

Semantics (Appendix C of the paper; docs/stl.md has the full statement):

* ``s < c`` / ``s <= c`` have margin ``c - s``; ``s > c`` / ``s >= c`` have ``s - c``. A bare
  Boolean signal ``g`` means ``g > 0.5``.
* ``not`` negates, ``and`` is min, ``or`` is max, ``a implies b`` is ``max(-rho(a), rho(b))``.
* ``G[a,b]`` at step t is the min over ``[t+a, min(t+b, T-1)]`` (``F``: max); windows are
  truncated at the episode end, an empty window gives ``+inf`` for G and ``-inf`` for F.
  ``T`` as upper bound means the end of the episode. This is rtamt's offline discrete-time
  convention (checked in tests/test_stl.py).
* ``a U[lo,hi] b`` at t is ``max over t' in [t+lo, t+hi] of min(rho(b,t'), min over t'' in
  [t, t'-1] of rho(a,t''))`` (rtamt's discrete-time definition: ``a`` must hold from t up to,
  not including, t'); t' past the episode end does not count.
* GATED clauses, a deliberate difference from rtamt: in ``g => phi`` where the antecedent is a
  Boolean gate atom (``g``, ``g > 0.5`` or ``g >= 0.5``), steps with ``g < 0.5`` are vacuous
  (``+inf``) and steps with ``g >= 0.5`` carry ``rho(phi)`` unclipped. The plain rule
  ``max(-rho(g), rho(phi))`` would clip a 60-degree tilt to -0.5 and erase violation depth.
  An episode whose gate never opens is vacuously satisfied (``+inf``).

:func:`bound_form` recognises the scored-family shape ``G[0,T]([gate =>] s OP c)``; the scorer's
fast path built on it (threshold minus the worst gated value) must agree with :func:`robustness`.

All operators run in O(T) per episode on ``(N, T)`` arrays (sliding windows by van Herk /
Gil-Werman), except unbounded/bounded until, which uses an O(T log T) doubling scan.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np

from scoring.errors import SafeVLAError
from scoring.stl.parse import (
                               BOOL_THRESHOLD, Always, And, Bound, Eventually, Implies, Node, Not, Or, Pred,
                               STLSyntaxError, Until, parse,
                               )

__all__ = [
    "robustness", "robustness_trace", "robustness_batch", "parse", "bound_form", "BoundForm",
    "Node", "STLSyntaxError", "STLInputError", "UnknownSignalError", "signal_names",
]

_INF = math.inf


class STLInputError(SafeVLAError, ValueError):
    """Signals, lengths or dt that cannot be evaluated (NaN, length mismatch, dt <= 0, ...)."""


class UnknownSignalError(STLInputError, KeyError):
    """A formula names a signal that was not supplied; the message lists the available ones."""

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0]) if self.args else ""


# ----------------------------------------------------------------------------- bound form

@dataclass(frozen=True, slots=True)
class BoundForm:
    """The shape ``G[0,T](s OP c)`` or ``G[0,T](gate => s OP c)`` shared by every scored family.

    For such a formula ``robustness == margin(extreme)``, where ``extreme`` is the max of ``s``
    over steps with the gate open (``gate >= 0.5``, all steps if ``gate is None``) for
    ``<``/``<=``, the min for ``>``/``>=``; no open step gives ``+inf``. The scorer relies on
    this as a fast path and for threshold what-ifs, so it must agree with :func:`robustness`
    exactly (tests/test_stl.py checks it).
    """

    signal: str
    op: str
    threshold: float
    gate: str | None

    @property
    def upper(self) -> bool:
        """True for upper bounds (``<``, ``<=``): the worst step is the signal's maximum."""
        return self.op in ("<", "<=")

    def margin(self, extreme):
        """Robustness from the worst signal value; vectorises over arrays of extremes."""
        extreme = np.asarray(extreme, dtype=float)
        out = self.threshold - extreme if self.upper else extreme - self.threshold
        return float(out) if out.ndim == 0 else out


def _gate_signal(node: Node) -> str | None:
    """The gate's name if ``node`` is a Boolean gate atom (``g``, ``g > 0.5``, ``g >= 0.5``)."""
    if isinstance(node, Pred) and (node.bare or (
            node.op in (">", ">=") and node.threshold == BOOL_THRESHOLD)):
        return node.signal
    return None


@functools.lru_cache(maxsize=4096)
def bound_form(formula: str) -> BoundForm | None:
    """Recognise ``G[0,T](s OP c)`` / ``G[0,T](gate => s OP c)``; None for any other shape."""
    node = parse(formula)
    if not (isinstance(node, Always) and node.lo.value == 0 and node.hi is None):
        return None
    body, gate = node.child, None
    if isinstance(body, Implies):
        gate = _gate_signal(body.left)
        if gate is None:
            return None
        body = body.right
    if not isinstance(body, Pred):
        return None
    return BoundForm(body.signal, body.op, body.threshold, gate)


@functools.lru_cache(maxsize=4096)
def _names(node: Node) -> tuple[str, ...]:
    if isinstance(node, Pred):
        return (node.signal,)
    kids = [getattr(node, f) for f in ("child", "left", "right") if hasattr(node, f)]
    return tuple(dict.fromkeys(n for k in kids for n in _names(k)))


def signal_names(formula: str) -> tuple[str, ...]:
    """Signals a formula reads, in order of first appearance."""
    return _names(parse(formula))


# ----------------------------------------------------------------------------- inputs

@dataclass(frozen=True, slots=True)
class _Env:
    """Validated signals as float arrays of shape (N, T); ``valid`` (N, T) is None if not ragged."""

    arrays: dict
    valid: np.ndarray | None
    n: int
    t: int
    dt: float


def _check_dt(dt) -> float:
    try:
        dt = float(dt)
    except (TypeError, ValueError):
        raise STLInputError(f"dt must be a positive number of seconds, got {dt!r}") from None
    if not (math.isfinite(dt) and dt > 0):
        raise STLInputError(f"dt must be a positive number of seconds, got {dt!r}")
    return dt


def _prepare(node: Node, formula: str, signals: Mapping, dt, lengths, *, batched: bool) -> _Env:
    dt = _check_dt(dt)
    if not isinstance(signals, Mapping):
        raise STLInputError(f"signals must be a mapping of name -> array, got {type(signals).__name__}")
    want_ndim = 2 if batched else 1
    arrays, shapes = {}, {}
    for name in _names(node):
        if name not in signals:
            raise UnknownSignalError(
                f"formula {formula!r} uses signal {name!r}, which is not among the available "
                f"signals: {sorted(map(str, signals)) or '(none)'}")
        try:
            a = np.asarray(signals[name], dtype=np.float64)
        except (TypeError, ValueError):
            raise STLInputError(f"signal {name!r} is not numeric (formula {formula!r})") from None
        if a.ndim not in (0, want_ndim):
            want = "(N, T) episodes x steps" if batched else "(T,) one value per step"
            raise STLInputError(f"signal {name!r} has shape {a.shape}; expected a scalar or {want}")
        arrays[name] = a
        if a.ndim:
            shapes[name] = a.shape
    if len(set(shapes.values())) > 1:
        raise STLInputError(f"signals of formula {formula!r} differ in shape: "
                            + ", ".join(f"{k} {v}" for k, v in shapes.items()))
    shape = next(iter(shapes.values()), (1,) * want_ndim)
    n, t = (shape if batched else (1, shape[0]))
    if t == 0:
        raise STLInputError(f"signals of formula {formula!r} are empty (0 steps)")

    valid = None
    if lengths is not None:
        if not batched:
            raise STLInputError("lengths is only meaningful for batched evaluation")
        lengths = np.asarray(lengths)
        if lengths.shape != (n,) or not (np.issubdtype(lengths.dtype, np.integer) or (
                np.issubdtype(lengths.dtype, np.floating) and np.all(lengths == np.round(lengths)))):
            raise STLInputError(f"lengths must be {n} integers (one per episode), got shape "
                                f"{lengths.shape} dtype {lengths.dtype}")
        lengths = lengths.astype(np.int64)
        bad = np.flatnonzero((lengths < 1) | (lengths > t))
        if bad.size:
            raise STLInputError(f"lengths must lie in [1, {t}]; episode {int(bad[0])} has "
                                f"length {int(lengths[bad[0]])}")
        if np.any(lengths < t):
            valid = np.arange(t)[None, :] < lengths[:, None]

    for name, a in arrays.items():
        a = np.broadcast_to(a, (n, t)) if batched or a.ndim == 0 else a[None, :]
        # min() propagates NaN, so one cheap pass clears the common case; padding may hold NaN,
        # so only then look for NaN at valid steps. Padding is never cleaned: every temporal
        # operator neutralises it first (_mask), and pointwise garbage stays at padded steps.
        if a.size and np.isnan(a.min()):
            nan = np.isnan(a) if valid is None else np.isnan(a) & valid
            if nan.any():
                ep, step = np.argwhere(nan)[0]
                where = f"episode {ep}, step {step}" if batched else f"step {step}"
                raise STLInputError(f"signal {name!r} is NaN at {where} (formula {formula!r})")
        arrays[name] = a
    return _Env(arrays, valid, n, t, dt)


def _steps(b: Bound, dt: float, *, upper: bool) -> int:
    """A bound in steps; seconds cover the samples whose time falls inside the window."""
    if b.unit == "step":
        return int(b.value)
    x = b.value / dt
    tol = 1e-9 * max(1.0, x)  # 1.5 / 0.05 is 29.999999999999996, which means 30
    return int(math.floor(x + tol)) if upper else int(math.ceil(x - tol))


def _window(node, env: _Env) -> tuple[int, int | None]:
    lo = _steps(node.lo, env.dt, upper=False)
    hi = None if node.hi is None else _steps(node.hi, env.dt, upper=True)
    if hi is not None and hi < lo:
        raise STLInputError(f"time window [{node.lo},{node.hi}] contains no sample at dt={env.dt}")
    return lo, hi


# ----------------------------------------------------------------------------- kernels

def _shift(x: np.ndarray, k: int, fill: float) -> np.ndarray:
    """y[:, t] = x[:, t+k], ``fill`` past the end."""
    if k == 0:
        return x
    out = np.full_like(x, fill)
    if k < x.shape[1]:
        out[:, :x.shape[1] - k] = x[:, k:]
    return out


def _sliding(x: np.ndarray, lo: int, hi: int | None, op: np.ufunc, neutral: float) -> np.ndarray:
    """y[:, t] = op over x[:, t+lo : t+hi+1], truncated at the end; ``neutral`` when empty.

    O(T) per row whatever the window width (van Herk / Gil-Werman: per-block prefix and suffix
    reductions, then one combine).
    """
    n, t = x.shape
    if lo >= t:
        return np.full_like(x, neutral)
    if hi is None or hi >= t - 1:
        suffix = op.accumulate(x[:, ::-1], axis=1)[:, ::-1]
        return _shift(suffix, lo, neutral)
    w = hi - lo + 1
    if w == 1:
        return _shift(x, lo, neutral)
    nb = -(-(t + w - 1) // w)
    buf = np.full((n, nb * w), neutral)
    buf[:, :t - lo] = x[:, lo:]
    blocks = buf.reshape(n, nb, w)
    prefix = op.accumulate(blocks, axis=2).reshape(n, nb * w)
    suffix = op.accumulate(blocks[:, :, ::-1], axis=2)[:, :, ::-1].reshape(n, nb * w)
    return op(suffix[:, :t], prefix[:, w - 1:w - 1 + t])


def _until_unbounded(phi: np.ndarray, psi: np.ndarray) -> np.ndarray:
    """u(t) = max(psi(t), min(phi(t), u(t+1))), u(T) = -inf, without a loop over time.

    Each step is the map x -> max(p, min(q, x)); such maps compose into the same form,
    (p1,q1)o(p2,q2) = (max(p1, min(q1,p2)), min(q1,q2)), so a doubling scan (log2 T passes)
    composes every suffix; steps past the end are the identity (-inf, +inf).
    """
    p, q = psi.copy(), phi.copy()
    k, t = 1, p.shape[1]
    while k < t:
        p[:, :-k] = np.maximum(p[:, :-k], np.minimum(q[:, :-k], p[:, k:]))
        q[:, :-k] = np.minimum(q[:, :-k], q[:, k:])
        k *= 2
    return p


def _mask(x: np.ndarray, env: _Env, fill: float) -> np.ndarray:
    """Neutralise padding before a temporal operator so windows end at each episode's end."""
    return x if env.valid is None else np.where(env.valid, x, fill)


def _eval(node: Node, env: _Env) -> np.ndarray:
    """Robustness at every step, shape (N, T); values at padded steps are meaningless."""
    if isinstance(node, Pred):
        s = env.arrays[node.signal]
        return node.threshold - s if node.op in ("<", "<=") else s - node.threshold
    if isinstance(node, Not):
        return -_eval(node.child, env)
    if isinstance(node, And):
        return np.minimum(_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, Or):
        return np.maximum(_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, Implies):
        a, b = _eval(node.left, env), _eval(node.right, env)
        if _gate_signal(node.left) is not None:
            return np.where(a >= 0, b, _INF)  # gate closed: vacuous, open: the real margin
        return np.maximum(-a, b)
    if isinstance(node, (Always, Eventually)):
        op, neutral = (np.minimum, _INF) if isinstance(node, Always) else (np.maximum, -_INF)
        lo, hi = _window(node, env)
        return _sliding(_mask(_eval(node.child, env), env, neutral), lo, hi, op, neutral)
    if isinstance(node, Until):
        return _until(node, env)
    raise TypeError(f"not an STL node: {node!r}")


def _until(node: Until, env: _Env) -> np.ndarray:
    # phi U[lo,hi] psi (t) = min( G[0,lo-1] phi (t), F[lo,hi] psi (t), (phi U psi)(t+lo) ):
    # min distributes over the max across t', and the unbounded until beyond t+hi can only
    # exceed the windowed one through a psi value that F[lo,hi] already caps (docs/stl.md).
    lo, hi = _window(node, env)
    phi = _mask(_eval(node.left, env), env, _INF)
    psi = _mask(_eval(node.right, env), env, -_INF)
    out = _shift(_until_unbounded(phi, psi), lo, -_INF)
    if lo > 0:
        out = np.minimum(out, _sliding(phi, 0, lo - 1, np.minimum, _INF))
    if hi is not None:
        out = np.minimum(out, _sliding(psi, lo, hi, np.maximum, -_INF))
    return out


def _eval_at_start(node: Node, env: _Env) -> np.ndarray:
    """Robustness at step 0, shape (N,); G/F to the episode end reduce without a full trace."""
    if not (isinstance(node, (Always, Eventually)) and node.hi is None):
        return _eval(node, env)[:, 0]
    is_g = isinstance(node, Always)
    neutral = _INF if is_g else -_INF
    lo, _ = _window(node, env)
    if lo >= env.t:
        return np.full(env.n, neutral)
    where = None if env.valid is None else env.valid[:, lo:]
    body = node.child
    if isinstance(body, Implies) and _gate_signal(body.left) is not None:
        # gated body: closed steps are vacuous (the neutral element of G), so drop them
        gate = _eval(body.left, env)[:, lo:] >= 0
        where = gate if where is None else where & gate
        if not is_g:  # F over a gated body: any closed step gives +inf
            closed = ~gate if env.valid is None else env.valid[:, lo:] & ~gate
            result = _reduce_at_start(body.right, env, lo, where, is_g)
            return np.where(closed.any(axis=1), _INF, result)
        body = body.right
    return _reduce_at_start(body, env, lo, where, is_g)


def _reduce_at_start(body: Node, env: _Env, lo: int, where, is_g: bool) -> np.ndarray:
    """min (G) or max (F) of rho(body) over steps lo.. where ``where`` (None: all) holds."""
    neutral = _INF if is_g else -_INF
    if isinstance(body, Pred):
        # min(c - s) == c - max(s) exactly (rounding is monotone) and skips a temporary
        s = env.arrays[body.signal][:, lo:]
        upper = body.op in ("<", "<=")
        op = np.maximum if upper == is_g else np.minimum
        ext = op.reduce(s, axis=1, where=True if where is None else where,
                        initial=-_INF if op is np.maximum else _INF)
        # with no step selected ext is the reduction's identity, which maps to G/F's neutral
        return body.threshold - ext if upper else ext - body.threshold
    op = np.minimum if is_g else np.maximum
    child = _eval(body, env)[:, lo:]
    return op.reduce(child, axis=1, where=True if where is None else where, initial=neutral)


# ----------------------------------------------------------------------------- public API

def robustness(formula: str, signals: Mapping[str, np.ndarray], dt: float = 1.0) -> float:
    """Robustness of one episode at step 0. Signals: name -> (T,) array (bool ok) or scalar."""
    node = parse(formula)
    env = _prepare(node, formula, signals, dt, None, batched=False)
    return float(_eval_at_start(node, env)[0])


def robustness_trace(formula: str, signals: Mapping[str, np.ndarray], dt: float = 1.0) -> np.ndarray:
    """Robustness at every step of one episode, shape (T,); ``trace[0] == robustness(...)``."""
    node = parse(formula)
    env = _prepare(node, formula, signals, dt, None, batched=False)
    return np.array(_eval(node, env)[0], dtype=np.float64)


def robustness_batch(formula: str, signals: Mapping[str, np.ndarray], *, dt: float = 1.0,
                     lengths: np.ndarray | None = None) -> np.ndarray:
    """Robustness at step 0 of N episodes padded to T steps, shape (N,).

    ``signals`` maps names to (N, T) arrays (or scalars). ``lengths[i]`` (1 <= lengths[i] <= T)
    is episode i's valid length: later steps are padding and never affect its result, and
    windows end at ``lengths[i]`` exactly as for the unpadded episode. ``None`` means all T.
    """
    node = parse(formula)
    env = _prepare(node, formula, signals, dt, lengths, batched=True)
    return np.asarray(_eval_at_start(node, env), dtype=np.float64)
