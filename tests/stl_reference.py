"""A slow, obviously correct STL robustness evaluator for tests/test_stl.py to compare the
vectorised engine against: written straight from the definitions in docs/stl.md with plain
loops and recursion over the parsed formula, one time step at a time."""

from __future__ import annotations

import math

from scoring.stl import engine as stl
from scoring.stl.parse import Always, And, Eventually, Implies, Not, Or, Pred, Until

INF = math.inf


def ref_steps(value: float, unit: str, dt: float, *, upper: bool) -> int:
    """Smallest (lower bound) / largest (upper bound) step whose time lies inside the bound."""
    if unit == "step":
        return int(value)
    eps = 1e-9 * max(dt, value)
    guess = int(value / dt)
    ks = [k for k in range(max(0, guess - 2), guess + 3)
          if (k * dt <= value + eps if upper else k * dt >= value - eps)]
    return max(ks) if upper else min(ks)


def ref_is_gate(node) -> bool:
    return isinstance(node, Pred) and (node.bare or (node.op in (">", ">=") and node.threshold == 0.5))


def ref_rho(node, sig: dict, t: int, T: int, dt: float, memo: dict) -> float:
    key = (id(node), t)
    if key in memo:
        return memo[key]

    def rho(n, tt):
        return ref_rho(n, sig, tt, T, dt, memo)

    def window(n):
        lo = ref_steps(n.lo.value, n.lo.unit, dt, upper=False)
        hi = T - 1 if n.hi is None else ref_steps(n.hi.value, n.hi.unit, dt, upper=True)
        return range(t + lo, min(t + hi, T - 1) + 1)

    if isinstance(node, Pred):
        s = float(sig[node.signal][t])
        out = node.threshold - s if node.op in ("<", "<=") else s - node.threshold
    elif isinstance(node, Not):
        out = -rho(node.child, t)
    elif isinstance(node, And):
        out = min(rho(node.left, t), rho(node.right, t))
    elif isinstance(node, Or):
        out = max(rho(node.left, t), rho(node.right, t))
    elif isinstance(node, Implies):
        if ref_is_gate(node.left):
            out = rho(node.right, t) if float(sig[node.left.signal][t]) >= 0.5 else INF
        else:
            out = max(-rho(node.left, t), rho(node.right, t))
    elif isinstance(node, Always):
        out = min((rho(node.child, k) for k in window(node)), default=INF)
    elif isinstance(node, Eventually):
        out = max((rho(node.child, k) for k in window(node)), default=-INF)
    elif isinstance(node, Until):
        out = -INF
        for k in window(node):
            left = min((rho(node.left, j) for j in range(t, k)), default=INF)
            out = max(out, min(rho(node.right, k), left))
    else:
        raise TypeError(node)
    memo[key] = out
    return out


def reference(formula: str, sig: dict, dt: float = 1.0) -> list[float]:
    T = len(next(iter(sig.values())))
    node, memo = stl.parse(formula), {}
    return [ref_rho(node, sig, t, T, dt, memo) for t in range(T)]


def same(a, b, tol=1e-9) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= tol
