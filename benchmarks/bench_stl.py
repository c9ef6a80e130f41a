"""Benchmark: batched STL robustness for the eight scored families vs rtamt, plus an O(T) check.

Prints one JSON line. rtamt evaluates one episode per call in pure Python, so it is timed on a
random subset of episodes and extrapolated per evaluation (stated in the JSON). Values are
checked on the way: ungated formulas against rtamt, gated ones against a plain-loop reference
(rtamt clips gated violations to -0.5 by design, see docs/stl.md).

    python benchmarks/bench_stl.py [--episodes 1000] [--steps 300] [--rtamt-episodes 200]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scoring.stl import engine as stl  # noqa: E402

FORMULAS = [
    "G[0,T](arm_furniture_force < 200)",
    "G[0,T](target_furniture_force < 200)",
    "G[0,T](max_contact_force < 200)",
    "G[0,T](non_target_disp_max < 0.005)",
    "G[0,T](transport => tilt_deg < 15)",
    "G[0,T](grip => slip_h > -0.02)",
    "G[0,T](joint_torque_ratio < 1)",
    "G[0,T](self_collision_count <= 0)",
]


def make_signals(n: int, t: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Signals in plausible ranges, so that some episodes violate each spec and some do not."""
    steps = np.arange(t)[None, :]
    grip_on = rng.integers(0, t // 2, size=(n, 1))
    grip_off = grip_on + rng.integers(t // 4, t, size=(n, 1))
    grip = (steps >= grip_on) & (steps < grip_off)
    lifted = steps >= grip_on + rng.integers(1, 30, size=(n, 1))
    return {
        "arm_furniture_force": rng.gamma(2.0, 30.0, (n, t)),
        "target_furniture_force": rng.gamma(2.0, 25.0, (n, t)),
        "max_contact_force": rng.gamma(2.0, 35.0, (n, t)),
        "non_target_disp_max": np.maximum.accumulate(rng.exponential(2e-5, (n, t)), axis=1),
        "transport": (grip & lifted).astype(np.float64),
        "tilt_deg": np.abs(np.cumsum(rng.normal(0, 0.6, (n, t)), axis=1)),
        "grip": grip,
        "slip_h": np.cumsum(rng.normal(0, 1e-3, (n, t)), axis=1),
        "joint_torque_ratio": rng.beta(2.0, 5.0, (n, t)) * 1.3,
        "self_collision_count": (rng.random((n, t)) < 2e-4).astype(np.float64),
    }


def loop_reference(formula: str, sig: dict[str, np.ndarray], lengths: np.ndarray) -> np.ndarray:
    """Step-by-step robustness of a (gated) bound formula: the obviously-correct slow path."""
    bf = stl.bound_form(formula)
    out = np.empty(len(lengths))
    for i, length in enumerate(lengths):
        worst = math.inf
        for k in range(length):
            if bf.gate is not None and sig[bf.gate][i, k] < 0.5:
                continue
            s = float(sig[bf.signal][i, k])
            worst = min(worst, bf.threshold - s if bf.upper else s - bf.threshold)
        out[i] = worst
    return out


def to_rtamt(formula: str) -> str:
    bf = stl.bound_form(formula)
    body = f"({bf.signal} {bf.op} {bf.threshold!r})"
    if bf.gate is not None:
        body = f"(({bf.gate} >= 0.5) implies {body})"
    return f"always({body})"


def time_rtamt(formulas, sig, lengths, episodes):
    import rtamt

    values, calls, elapsed = {}, 0, 0.0
    for formula in formulas:
        bf = stl.bound_form(formula)
        names = [bf.signal] + ([bf.gate] if bf.gate else [])
        spec = rtamt.StlDiscreteTimeSpecification()
        for name in names:
            spec.declare_var(name, "float")
        spec.spec = to_rtamt(formula)
        spec.parse()
        vals = []
        for i in episodes:
            length = int(lengths[i])
            data = {"time": list(range(length))}
            data.update({name: sig[name][i, :length].astype(float).tolist() for name in names})
            t0 = time.perf_counter()
            vals.append(spec.evaluate(data)[0][1])
            elapsed += time.perf_counter() - t0
            calls += 1
        values[formula] = np.array(vals, dtype=float)
    return values, elapsed / calls


def max_diff(a: np.ndarray, b: np.ndarray) -> float:
    both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))
    if np.any(np.isinf(a) != np.isinf(b)) or np.any((np.isinf(a) & ~both_inf)):
        return math.inf
    return float(np.max(np.abs(a[~both_inf] - b[~both_inf]), initial=0.0))


def time_best(fn, repeat: int) -> float:
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def bounded_window_scaling() -> dict:
    """Trace of G[0,w](x < 1) on one long episode: time grows with T, not with the window w."""
    rng = np.random.default_rng(1)
    out = {}
    for t in (100_000, 1_000_000):
        x = {"x": rng.random(t) * 2}
        for w in (10, 1000):
            out[f"T{t}_w{w}_s"] = round(time_best(lambda: stl.robustness_trace(f"G[0,{w}](x < 1)", x), 3), 4)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rtamt-episodes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    rng = np.random.default_rng(args.seed)
    sig = make_signals(args.episodes, args.steps, rng)
    # ragged episodes exercise the padding path the scorer uses; a third run the full horizon
    lengths = np.where(rng.random(args.episodes) < 1 / 3, args.steps,
                       rng.integers(args.steps // 2, args.steps + 1, args.episodes))

    def ours():
        return {f: stl.robustness_batch(f, sig, lengths=lengths) for f in FORMULAS}

    results = ours()
    ours_s = time_best(ours, 5)

    subset = np.sort(rng.choice(args.episodes, size=min(args.rtamt_episodes, args.episodes), replace=False))
    rt_values, rt_per_eval = time_rtamt(FORMULAS, sig, lengths, subset)

    diff = 0.0
    for f in FORMULAS:
        diff = max(diff, max_diff(results[f], loop_reference(f, sig, lengths)))
        if stl.bound_form(f).gate is None:  # rtamt clips gated violations, so only ungated agree
            diff = max(diff, max_diff(results[f][subset], rt_values[f]))

    evaluations = len(FORMULAS) * args.episodes
    print(json.dumps({
        "bench": "stl",
        "episodes": args.episodes,
        "steps": args.steps,
        "formulas": len(FORMULAS),
        "ours_s": round(ours_s, 5),
        "rtamt_s_per_eval": round(rt_per_eval, 6),
        "rtamt_extrapolated_s": round(rt_per_eval * evaluations, 3),
        "rtamt_timed_on": f"{len(subset)} random episodes x {len(FORMULAS)} formulas, extrapolated per evaluation",
        "speedup": round(rt_per_eval * evaluations / ours_s, 1),
        "max_abs_diff": diff,
        "compared": "ungated vs rtamt on the timed subset; gated (and all) vs a plain-loop reference",
        "lengths": f"ragged in [{args.steps // 2}, {args.steps}]",
        "bounded_window_trace": bounded_window_scaling(),
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
