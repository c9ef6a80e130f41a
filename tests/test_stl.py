"""STL robustness: hand-computed rows, a slow reference, rtamt, and bad input.

The reference evaluator (tests/stl_reference.py) is written straight from the definitions in
docs/stl.md with plain loops and recursion, so the vectorised engine is compared against
something that is obviously right rather than against itself.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scoring.errors import SafeVLAError
from scoring.stl import engine as stl
from stl_reference import INF, reference, same

# ----------------------------------------------------------------------------- table

ROWS = [
    # formula, signals, dt, expected robustness at step 0
    ("x < 1", {"x": [0.25]}, 1.0, 0.75),
    ("x <= 1", {"x": [1.0]}, 1.0, 0.0),                           # equality at threshold
    ("x >= 1", {"x": [1.0]}, 1.0, 0.0),
    ("x > -0.02", {"x": [-0.02]}, 1.0, 0.0),
    ("-2e-2 < x", {"x": [0.0]}, 1.0, 0.02),                       # constant on the left
    ("0.005 > d", {"d": [0.001]}, 1.0, 0.004),
    ("x < 1", {"x": 0.5}, 1.0, 0.5),                              # scalar signal
    ("G[0,T](x < 1)", {"x": [0.0, 0.5, 2.0]}, 1.0, -1.0),
    ("G(x < 1)", {"x": [0.0, 0.5, 2.0]}, 1.0, -1.0),
    ("always (x < 1)", {"x": [0.0, 0.5, 2.0]}, 1.0, -1.0),
    ("G[0,inf](x < 1)", {"x": [0.0, 0.5, 2.0]}, 1.0, -1.0),
    ("F[0,T](x > 1)", {"x": [0.0, 0.5, 2.0]}, 1.0, 1.0),
    ("eventually[0:1](x > 1)", {"x": [0.0, 0.5, 2.0]}, 1.0, -0.5),
    ("G[1,1](x < 1)", {"x": [0.0, 3.0]}, 1.0, -2.0),
    ("G[0,1](x < 1)", {"x": [0.0, 3.0, 9.0]}, 1.0, -2.0),
    ("G[5,10](x < 1)", {"x": [0.0, 3.0]}, 1.0, INF),              # empty window
    ("F[5,10](x < 1)", {"x": [0.0, 3.0]}, 1.0, -INF),
    ("G[1,10](x < 1)", {"x": [0.0, 3.0]}, 1.0, -2.0),             # truncated at the end
    ("G[0,T](x < 1)", {"x": [INF, 0.0]}, 1.0, -INF),
    ("G[0,T](self_collision_count <= 0)", {"self_collision_count": [0, 0, 1]}, 1.0, -1.0),
    ("G[0,T](self_collision_count <= 0)", {"self_collision_count": [0, 0, 0]}, 1.0, 0.0),
    ("g", {"g": [True]}, 1.0, 0.5),
    ("g", {"g": [0]}, 1.0, -0.5),
    ("!g", {"g": [0]}, 1.0, 0.5),
    # gated clauses: closed steps vacuous, open steps carry the real margin
    ("G[0,T](transport => tilt_deg < 15)", {"transport": [0, 1, 1, 0], "tilt_deg": [90, 60, 10, 80]}, 1.0, -45.0),
    ("G[0,T]((transport > 0.5) -> tilt_deg < 15)", {"transport": [0, 1, 1, 0], "tilt_deg": [90, 60, 10, 80]}, 1.0, -45.0),
    ("G[0,T]((0.5 <= transport) implies tilt_deg < 15)", {"transport": [0, 1, 1, 0], "tilt_deg": [90, 60, 10, 80]}, 1.0, -45.0),
    ("G[0,T](g => x < 15)", {"g": [0, 0, 0], "x": [90, 90, 90]}, 1.0, INF),     # gate never open
    ("G[0,T](grip => slip_h > -0.02)", {"grip": [False, True, True], "slip_h": [-1.0, 0.0, -0.05]}, 1.0, -0.03),
    ("G[0,T](grip => slip_h > -0.02)", {"grip": [1], "slip_h": [-0.02]}, 1.0, 0.0),
    ("g => x < 15", {"g": [1], "x": [60]}, 1.0, -45.0),
    ("g => x < 15", {"g": [0], "x": [60]}, 1.0, INF),
    ("F[0,T](g => x < 1)", {"g": [1, 0], "x": [5, 0]}, 1.0, INF),            # a closed step is vacuous
    ("F[0,T](g => x < 1)", {"g": [1, 1], "x": [5, 0]}, 1.0, 1.0),
    ("F[1,T](g => x < 1)", {"g": [0, 1], "x": [5, 3]}, 1.0, -2.0),
    ("G[1,T](g => x < 1)", {"g": [1, 0], "x": [5, 3]}, 1.0, INF),
    ("G[1,T](g)", {"g": [1, 0, 1]}, 1.0, -0.5),
    # general implications keep max(-rho(a), rho(b))
    ("(x > 0.25) => y < 1", {"x": [1.0], "y": [5.0]}, 1.0, -0.75),
    ("G[0,T](!g => x < 15)", {"g": [0, 1], "x": [60, 0]}, 1.0, -0.5),
    ("G[0,T]((g > 0) => x < 15)", {"g": [1, 1], "x": [60, 0]}, 1.0, -1.0),
    ("not x < 1", {"x": [0.25]}, 1.0, -0.75),
    ("x < 1 and y > 2", {"x": [0.0], "y": [2.5]}, 1.0, 0.5),
    ("x < 1 | y > 2", {"x": [3.0], "y": [2.5]}, 1.0, 0.5),
    # until: rtamt's discrete definition, left operand over [t, t'-1]
    ("x > 0 U[1,2] y > 0", {"x": [1, 2, -5], "y": [-1, -1, 3]}, 1.0, 1.0),
    ("x > 0 U[1,2] y > 0", {"x": [1, -2, 5], "y": [-1, -1, 3]}, 1.0, -1.0),   # x broken before y
    ("x > 0 U[1,2] y > 0", {"x": [1, 2, -5], "y": [-1, 4, 3]}, 1.0, 1.0),
    ("x > 0 U y > 0", {"x": [1, 2, -5], "y": [-1, -1, 3]}, 1.0, 1.0),
    ("x > 0 until[0,0] y > 0", {"x": [-7], "y": [3]}, 1.0, 3.0),
    ("x > 0 U[3,4] y > 0", {"x": [1, 2, -5], "y": [-1, -1, 3]}, 1.0, -INF),  # empty window
    # seconds with dt
    ("G[0,1.5s](x < 1)", {"x": [0, 0, 0, 4, 9]}, 0.5, -3.0),
    ("G[0.25s,1s](x < 1)", {"x": [9, 2, 3, 10]}, 0.5, -2.0),
    ("G[0,1.5s](x < 1)", {"x": [0] * 30 + [4, 9]}, 0.05, -3.0),      # 1.5 / 0.05 is not exactly 30
    ("F[0.1s,0.3s](x > 0)", {"x": [0, -1, -2, 5]}, 0.1, 5.0),
]


@pytest.mark.parametrize("formula,signals,dt,expected", ROWS, ids=[r[0] for r in ROWS])
def test_table(formula, signals, dt, expected):
    got = stl.robustness(formula, signals, dt)
    assert same(got, expected), (got, expected)
    trace = stl.robustness_trace(formula, signals, dt)
    assert same(trace[0], got)
    if not np.ndim(next(iter(signals.values()))) == 0:
        ref = reference(formula, {k: np.asarray(v, float) for k, v in signals.items()}, dt)
        assert all(same(a, b) for a, b in zip(trace, ref)), (trace, ref)


def test_trace_values():
    trace = stl.robustness_trace("G[2,4](x < -0.02)", {"x": np.arange(6.0)})
    np.testing.assert_allclose(trace, [-4.02, -5.02, -5.02, -5.02, INF, INF])
    trace = stl.robustness_trace("F[1,10](x < 1e-3)", {"x": np.arange(4.0)})
    np.testing.assert_allclose(trace, [-0.999, -1.999, -2.999, -INF])
    trace = stl.robustness_trace("G[0,T](x < 10)", {"x": [1, 5, 3]})
    np.testing.assert_allclose(trace, [5, 5, 7])
    assert trace.shape == (3,) and trace.dtype == np.float64


def test_gated_clause_differs_from_rtamt_by_design():
    rtamt = pytest.importorskip("rtamt")
    f = np.array([100.0, 260.0, 50.0])
    g = np.array([0.0, 1.0, 0.0])
    spec = rtamt.StlDiscreteTimeSpecification()
    spec.declare_var("g", "float")
    spec.declare_var("f", "float")
    spec.spec = "always((g >= 0.5) implies (f < 200))"
    spec.parse()
    theirs = spec.evaluate({"time": [0, 1, 2], "g": list(g), "f": list(f)})[0][1]
    assert theirs == -0.5                     # the clipping we avoid
    assert stl.robustness("G[0,T](g => f < 200)", {"g": g, "f": f}) == -60.0
    assert stl.robustness("always((g >= 0.5) implies (f < 200))", {"g": g, "f": f}) == -60.0


# ----------------------------------------------------------------------------- bound form

def test_bound_form_shapes():
    BF = stl.BoundForm
    assert stl.bound_form("G[0,T](non_target_disp_max < 0.005)") == BF("non_target_disp_max", "<", 0.005, None)
    assert stl.bound_form("G[0,T](transport => tilt_deg < 15)") == BF("tilt_deg", "<", 15.0, "transport")
    assert stl.bound_form("G[0,T](grip => slip_h > -0.02)") == BF("slip_h", ">", -0.02, "grip")
    assert stl.bound_form("G[0,T](self_collision_count <= 0)") == BF("self_collision_count", "<=", 0.0, None)
    assert stl.bound_form("always (200 > f)") == BF("f", "<", 200.0, None)
    assert stl.bound_form("G((g >= 0.5) -> x >= 3)") == BF("x", ">=", 3.0, "g")
    for other in ["G[0,10](x < 1)", "G[1,T](x < 1)", "F[0,T](x < 1)", "x < 1", "G[0,T](x < 1 and y < 2)",
                  "G[0,T]((x > 0.2) => y < 1)", "G[0,T](!g => y < 1)", "G[0,T](G[0,T](x < 1))",
                  "G[0,T](x < 1) and G[0,T](y < 1)"]:
        assert stl.bound_form(other) is None, other
    assert BF("x", "<", 1.0, None).margin(np.array([0.5, 2.0])).tolist() == [0.5, -1.0]
    assert BF("x", ">", 1.0, None).margin(3.0) == 2.0


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_bound_form_agrees_with_robustness(data):
    op = data.draw(st.sampled_from(["<", "<=", ">", ">="]))
    c = data.draw(st.sampled_from([-0.02, 0.0, 0.005, 1.0, 15.0, 200.0]))
    gated = data.draw(st.booleans())
    n = data.draw(st.integers(1, 30))
    s = np.array(data.draw(st.lists(st.floats(-300, 300), min_size=n, max_size=n)))
    g = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    formula = f"G[0,T]({'g => ' if gated else ''}s {op} {c!r})"
    bf = stl.bound_form(formula)
    assert bf is not None and bf.gate == ("g" if gated else None)
    vals = s[g] if gated else s
    extreme = (vals.max() if bf.upper else vals.min()) if vals.size else None
    fast = INF if extreme is None else bf.margin(extreme)
    assert stl.robustness(formula, {"s": s, "g": g}) == fast


# ----------------------------------------------------------------------------- random formulas

OPS = ["<", "<=", ">", ">="]
FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


def bounds(max_hi: int = 12):
    pair = st.tuples(st.integers(0, max_hi), st.integers(0, max_hi)).map(lambda p: (min(p), max(p)))
    return st.one_of(pair, st.tuples(st.integers(0, 4), st.none()))


def trees(*, gated: bool, until: bool = True, names=("x", "y", "z")):
    consts = st.integers(-8, 8).map(lambda k: k / 4)
    if not gated:
        consts = consts.filter(lambda c: c != 0.5)   # `x > 0.5` as an antecedent would be a gate
    leaf = st.tuples(st.just("pred"), st.sampled_from(names), st.sampled_from(OPS), consts, st.booleans())
    if gated:
        leaf = st.one_of(leaf, st.tuples(st.just("bare"), st.sampled_from(["g", "h"])))

    def extend(sub):
        options = [
            st.tuples(st.just("not"), sub),
            st.tuples(st.sampled_from(["and", "or", "implies"]), sub, sub),
            st.tuples(st.sampled_from(["G", "F"]), bounds(), sub),
        ]
        if until:
            options.append(st.tuples(st.just("U"), bounds(), sub, sub))
        if gated:
            gate = st.one_of(st.tuples(st.just("bare"), st.sampled_from(["g", "h"])),
                             st.tuples(st.just("pred"), st.sampled_from(["g", "h"]),
                                       st.sampled_from([">", ">="]), st.just(0.5), st.booleans()))
            options.append(st.tuples(st.just("implies"), gate, sub))
        return st.one_of(options)

    return st.recursive(leaf, extend, max_leaves=6)


def render(tree, rng: random.Random, *, dt: float | None = None) -> str:
    """Our syntax, with synonyms drawn at random so the parser's spellings are all exercised."""
    def interval(b):
        lo, hi = b
        if lo == 0 and hi is None and rng.random() < 0.5:
            return ""
        def one(k):
            if dt is not None and rng.random() < 0.5:
                return f"{k * dt!r}s"
            return str(k)
        sep = rng.choice([",", ":", ", "])
        return f"[{one(lo)}{sep}{'T' if hi is None else one(hi)}]"

    kind = tree[0]
    if kind == "pred":
        _, s, op, c, flip = tree
        text = f"{c:.6e}" if rng.random() < 0.2 else repr(c)
        return f"{text} {FLIP[op]} {s}" if flip else f"{s} {op} {text}"
    if kind == "bare":
        return tree[1]
    if kind == "not":
        return f"{rng.choice(['not ', '!', 'not'])}({render(tree[1], rng, dt=dt)})"
    if kind in ("and", "or", "implies"):
        word = rng.choice({"and": ["and", "&", "&&"], "or": ["or", "|", "||"],
                           "implies": ["implies", "->", "=>"]}[kind])
        return f"({render(tree[1], rng, dt=dt)}) {word} ({render(tree[2], rng, dt=dt)})"
    if kind in ("G", "F"):
        word = rng.choice([kind, {"G": "always", "F": "eventually"}[kind]])
        return f"{word}{interval(tree[1])}({render(tree[2], rng, dt=dt)})"
    if kind == "U":
        word = rng.choice(["U", "until"])
        return f"({render(tree[2], rng, dt=dt)}) {word}{interval(tree[1])} ({render(tree[3], rng, dt=dt)})"
    raise ValueError(kind)


def render_rtamt(tree, horizon: int) -> str:
    """rtamt's syntax; an open upper bound becomes one past the trace, which rtamt truncates."""
    kind = tree[0]
    if kind == "pred":
        _, s, op, c, _flip = tree
        return f"({s} {op} {c!r})"
    if kind == "not":
        return f"(not({render_rtamt(tree[1], horizon)}))"
    if kind in ("and", "or", "implies"):
        return f"(({render_rtamt(tree[1], horizon)}) {kind} ({render_rtamt(tree[2], horizon)}))"
    if kind in ("G", "F", "U"):
        lo, hi = tree[1]
        word = {"G": "always", "F": "eventually", "U": "until"}[kind]
        if not (lo == 0 and hi is None):
            word += f"[{lo}:{horizon + lo if hi is None else hi}]"
        if kind == "U":
            return f"(({render_rtamt(tree[2], horizon)}) {word} ({render_rtamt(tree[3], horizon)}))"
        return f"({word}({render_rtamt(tree[2], horizon)}))"
    raise ValueError(kind)


def signal_values(n: int):
    return st.lists(st.integers(-12, 12).map(lambda k: k / 4), min_size=n, max_size=n)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(gated=True), seed=st.integers(0, 2**16), data=st.data())
def test_trace_matches_reference(tree, seed, data):
    n = data.draw(st.integers(1, 14))
    dt = data.draw(st.sampled_from([1.0, 0.5, 0.1, 0.05, 0.2]))
    sig = {k: np.array(data.draw(signal_values(n))) for k in "xyz"}
    sig.update({k: np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n))) for k in "gh"})
    formula = render(tree, random.Random(seed), dt=dt)
    trace = stl.robustness_trace(formula, sig, dt)
    ref = reference(formula, sig, dt)
    assert all(same(a, b) for a, b in zip(trace, ref)), (formula, trace, ref)
    assert same(stl.robustness(formula, sig, dt), ref[0])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(gated=True), seed=st.integers(0, 2**16), data=st.data())
def test_batch_with_ragged_lengths_matches_single_episodes(tree, seed, data):
    formula = render(tree, random.Random(seed))
    n_ep = data.draw(st.integers(1, 5))
    T = data.draw(st.integers(1, 14))
    lengths = np.array(data.draw(st.lists(st.integers(1, T), min_size=n_ep, max_size=n_ep)))
    sig = {}
    for k in "xyzgh":
        vals = data.draw(signal_values(n_ep * T)) if k in "xyz" else data.draw(
            st.lists(st.sampled_from([0.0, 1.0]), min_size=n_ep * T, max_size=n_ep * T))
        a = np.array(vals).reshape(n_ep, T)
        pad = np.arange(T)[None, :] >= lengths[:, None]
        # padding holds garbage, including NaN and inf, which must not leak into any result
        a[pad] = np.resize([np.nan, INF, -INF, 1e6, -3.0], int(pad.sum()))
        sig[k] = a
    got = stl.robustness_batch(formula, sig, lengths=lengths)
    assert got.shape == (n_ep,)
    for i, L in enumerate(lengths):
        one = {k: v[i, :L] for k, v in sig.items()}
        assert same(got[i], stl.robustness(formula, one)), (formula, i, got[i])
        assert same(got[i], reference(formula, one)[0])
    if np.all(lengths == T):
        assert np.array_equal(got, stl.robustness_batch(formula, sig), equal_nan=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_root_reductions_match_reference(data):
    """G/F to the episode end at the root take a reduction shortcut; check it on ragged batches."""
    op = data.draw(st.sampled_from(["G", "F"]))
    lo = data.draw(st.integers(0, 5))
    body = data.draw(st.sampled_from(["x < 0.25", "-1 <= x", "x >= 0", "g", "g => x < 1", "(g >= 0.5) -> x > -1",
                                      "(g > 0.5) => !g", "x < 1 and y > 0", "g => (x < 1 or y > 2)"]))
    formula = f"{op}[{lo},T]({body})"
    n_ep, T = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 12))
    lengths = np.array(data.draw(st.lists(st.integers(1, T), min_size=n_ep, max_size=n_ep)))
    sig = {k: np.array(data.draw(signal_values(n_ep * T))).reshape(n_ep, T) for k in "xy"}
    sig["g"] = np.array(data.draw(st.lists(st.booleans(), min_size=n_ep * T, max_size=n_ep * T))).reshape(n_ep, T)
    got = stl.robustness_batch(formula, sig, lengths=lengths)
    for i, L in enumerate(lengths):
        one = {k: v[i, :L] for k, v in sig.items()}
        want = reference(formula, one)[0]
        assert same(got[i], want), (formula, i, got[i], want)
        assert same(stl.robustness_trace(formula, one)[0], want)


# ----------------------------------------------------------------------------- rtamt

def rtamt_value(spec_text: str, sig: dict, T: int) -> float:
    import rtamt
    spec = rtamt.StlDiscreteTimeSpecification()
    for k in sig:
        spec.declare_var(k, "float")
    spec.spec = spec_text
    spec.parse()
    data = {"time": list(range(T))}
    data.update({k: [float(v) for v in vals] for k, vals in sig.items()})
    return float(spec.evaluate(data)[0][1])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=trees(gated=False), seed=st.integers(0, 2**16), data=st.data())
def test_ungated_formulas_match_rtamt(tree, seed, data):
    pytest.importorskip("rtamt")
    T = data.draw(st.integers(2, 40))   # rtamt 0.4.10 crashes on a one-sample trace
    sig = {k: np.array(data.draw(signal_values(T))) for k in "xyz"}
    ours = stl.robustness(render(tree, random.Random(seed)), sig)
    theirs = rtamt_value(render_rtamt(tree, T), sig, T)
    assert same(ours, theirs), (render(tree, random.Random(seed)), render_rtamt(tree, T), ours, theirs)


# ----------------------------------------------------------------------------- bad input

def test_unknown_signal_lists_available():
    with pytest.raises(stl.UnknownSignalError) as e:
        stl.robustness("G[0,T](tilt < 15)", {"tilt_deg": [1.0], "grip": [0]})
    msg = str(e.value)
    assert "'tilt'" in msg and "grip" in msg and "tilt_deg" in msg and "G[0,T](tilt < 15)" in msg
    assert isinstance(e.value, KeyError) and isinstance(e.value, SafeVLAError)


@pytest.mark.parametrize("signals,needle", [
    ({"x": [1.0, np.nan], "y": [1.0, 2.0]}, "'x' is NaN at step 1"),
    ({"x": [1.0, 2.0], "y": [1.0, 2.0, 3.0]}, "differ in shape"),
    ({"x": [], "y": []}, "empty"),
    ({"x": [[1.0]], "y": [[1.0]]}, "shape"),
    ({"x": ["a"], "y": [1.0]}, "not numeric"),
])
def test_bad_signals(signals, needle):
    with pytest.raises(stl.STLInputError) as e:
        stl.robustness("x < 1 and y < 1", signals)
    assert needle in str(e.value)
    assert isinstance(e.value, ValueError) and isinstance(e.value, SafeVLAError)


@pytest.mark.parametrize("dt", [0, -1.0, math.nan, math.inf, "fast"])
def test_bad_dt(dt):
    with pytest.raises(stl.STLInputError, match="dt"):
        stl.robustness("x < 1", {"x": [0.0]}, dt)


def test_seconds_window_without_samples():
    with pytest.raises(stl.STLInputError, match="no sample"):
        stl.robustness("G[0.1s,0.2s](x < 1)", {"x": [0.0]}, 1.0)


def test_batch_inputs():
    x = np.array([[0.0, 2.0, 5.0], [1.0, 0.0, np.nan]])
    np.testing.assert_array_equal(stl.robustness_batch("G(x < 3)", {"x": x}, lengths=[3, 2]), [-2.0, 2.0])
    with pytest.raises(stl.STLInputError, match="episode 1, step 2"):
        stl.robustness_batch("G(x < 3)", {"x": x})
    for bad in ([3], [3, 0], [3, 4], [1.5, 2], [[3, 2]]):
        with pytest.raises(stl.STLInputError, match="lengths"):
            stl.robustness_batch("G(x < 3)", {"x": x}, lengths=np.array(bad))
    with pytest.raises(stl.STLInputError, match="shape"):
        stl.robustness_batch("G(x < 3)", {"x": x[0]})
    assert stl.robustness_batch("G(x < 3)", {"x": np.zeros((0, 5))}).shape == (0,)


def test_bool_and_list_inputs_equal_float_arrays():
    a = stl.robustness("G(g => x < 1)", {"g": [True, False, True], "x": [0.5, 9.0, 0.75]})
    b = stl.robustness("G(g => x < 1)", {"g": np.array([1.0, 0.0, 1.0]), "x": np.array([0.5, 9.0, 0.75])})
    assert a == b == 0.25


def test_signal_names():
    assert stl.signal_names("G[0,T](transport => tilt_deg < 15) and tilt_deg > 0") == ("transport", "tilt_deg")
