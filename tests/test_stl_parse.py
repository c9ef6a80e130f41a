"""STL parser: accepted spellings, precedence, round trip, and error messages that locate the problem."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.errors import SafeVLAError
from scoring.stl import engine as stl
from scoring.stl.parse import (
                               Always, And, Bound, Eventually, Implies, Not, Or, Pred, STLSyntaxError, Until, parse,
                               )

X = Pred("x", "<", 1.0)
Y = Pred("y", ">", 2.0)
G_ALL = (Bound(0), None)


@pytest.mark.parametrize("text,tree", [
    ("x < 1", X),
    ("1 > x", X),
    ("(((x < 1)))", X),
    ("x<1", X),
    ("x < 1e0", X),
    ("x < 1.", X),
    ("x > -0.02", Pred("x", ">", -0.02)),
    ("x >= +.5", Pred("x", ">=", 0.5)),
    ("-2E-3 <= x", Pred("x", ">=", -0.002)),
    ("g", Pred("g", ">", 0.5, bare=True)),
    ("G[0,T](x < 1)", Always(*G_ALL, X)),
    ("G(x < 1)", Always(*G_ALL, X)),
    ("always (x < 1)", Always(*G_ALL, X)),
    ("always x < 1", Always(*G_ALL, X)),
    ("G[0,inf](x < 1)", Always(*G_ALL, X)),
    ("G[0:T](x < 1)", Always(*G_ALL, X)),
    ("G[2,10](x < 1)", Always(Bound(2), Bound(10), X)),
    ("G[0,1.5s](x < 1)", Always(Bound(0), Bound(1.5, "s"), X)),
    ("F[1s,T](x < 1)", Eventually(Bound(1.0, "s"), None, X)),
    ("eventually[0:3](x < 1)", Eventually(Bound(0), Bound(3), X)),
    ("not x < 1", Not(X)),
    ("!(x < 1)", Not(X)),
    ("x < 1 and y > 2", And(X, Y)),
    ("x < 1 & y > 2", And(X, Y)),
    ("x < 1 && y > 2", And(X, Y)),
    ("x < 1 or y > 2", Or(X, Y)),
    ("x < 1 | y > 2", Or(X, Y)),
    ("x < 1 || y > 2", Or(X, Y)),
    ("x < 1 implies y > 2", Implies(X, Y)),
    ("x < 1 -> y > 2", Implies(X, Y)),
    ("x < 1 => y > 2", Implies(X, Y)),
    ("x < 1 U y > 2", Until(*G_ALL, X, Y)),
    ("x < 1 until[1,4] y > 2", Until(Bound(1), Bound(4), X, Y)),
    ("G[0,T](transport => tilt_deg < 15)",
     Always(*G_ALL, Implies(Pred("transport", ">", 0.5, bare=True), Pred("tilt_deg", "<", 15.0)))),
    # signals may be called G, F, U or T: operators are recognised by position
    ("G > 1 and U < 2", And(Pred("G", ">", 1.0), Pred("U", "<", 2.0))),
    ("G[0,T](T < 1)", Always(*G_ALL, Pred("T", "<", 1.0))),
])
def test_accepted_spellings(text, tree):
    assert parse(text) == tree


@pytest.mark.parametrize("text,tree", [
    ("x < 1 and y > 2 or x < 1", Or(And(X, Y), X)),
    ("x < 1 or y > 2 and x < 1", Or(X, And(Y, X))),
    ("x < 1 -> y > 2 -> x < 1", Implies(X, Implies(Y, X))),          # right associative
    ("x < 1 or y > 2 -> x < 1", Implies(Or(X, Y), X)),
    ("not x < 1 and y > 2", And(Not(X), Y)),
    ("always x < 1 and y > 2", And(Always(*G_ALL, X), Y)),
    ("G[0,5] x < 1 U y > 2", Until(*G_ALL, Always(Bound(0), Bound(5), X), Y)),
    ("x < 1 U y > 2 and x < 1", And(Until(*G_ALL, X, Y), X)),
])
def test_precedence(text, tree):
    assert parse(text) == tree


@pytest.mark.parametrize("text,position,expected", [
    ("G[0,T](x <)", 10, "a number after '<'"),
    ("G[0,T(x < 1)", 5, "']'"),
    ("G[0,1.5](x < 1)", 4, "integer step count"),
    ("G[5,2](x < 1)", 1, "a <= b"),
    ("G[T,5](x < 1)", 2, "step count"),
    ("G[-1,5](x < 1)", 2, "non-negative"),
    ("x < 1s", 4, "without a unit"),
    ("x < 1 y", 6, "end of formula"),
    ("x < 1 and", 9, "a signal name"),
    ("(x < 1", 6, "')'"),
    ("x < 1)", 5, "end of formula"),
    ("", 0, "a formula"),
    ("x < 1 $ 2", 6, "operator"),
    ("x < y", 4, "a number"),
    ("1 < 2", 4, "a signal name"),
    ("3 x", 2, "comparison"),
    ("x < 3e", 4, "a number"),
    ("and < 1", 0, "a signal name"),
    ("G x < 1", 2, "'[' or '(' after the temporal operator 'G'"),
])
def test_syntax_errors_name_formula_and_position(text, position, expected):
    with pytest.raises(STLSyntaxError) as e:
        parse(text)
    err = e.value
    assert err.formula == text and err.position == position, (err.position, str(err))
    assert expected in err.expected
    msg = str(err)
    assert repr(text) in msg and f"position {position}" in msg
    assert isinstance(err, ValueError) and isinstance(err, SafeVLAError)


def test_non_string_formula():
    with pytest.raises(STLSyntaxError, match="formula string"):
        parse(["x < 1"])


def test_parse_is_cached_and_shared():
    assert parse("G[0,T](x < 1)") is parse("G[0,T](x < 1)")
    assert stl.parse is parse
    assert parse.cache_info().hits >= 1


leaf = st.builds(Pred, st.sampled_from(["x", "y", "G", "U"]), st.sampled_from(["<", "<=", ">", ">="]),
                 st.floats(-1e6, 1e6, allow_nan=False)) | st.builds(
                     lambda s: Pred(s, ">", 0.5, bare=True), st.sampled_from(["g", "h"]))
bound = st.one_of(st.integers(0, 50).map(lambda k: Bound(float(k))),
                  st.floats(0, 10, allow_nan=False).map(lambda v: Bound(v, "s")))
window = st.tuples(bound, st.one_of(st.none(), bound)).filter(
    lambda w: w[1] is None or w[0].unit != w[1].unit or w[0].value <= w[1].value)
tree = st.recursive(leaf, lambda sub: st.one_of(
    st.builds(Not, sub), st.builds(And, sub, sub), st.builds(Or, sub, sub), st.builds(Implies, sub, sub),
    st.builds(lambda w, c: Always(*w, c), window, sub), st.builds(lambda w, c: Eventually(*w, c), window, sub),
    st.builds(lambda w, a, b: Until(*w, a, b), window, sub, sub)), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(tree)
def test_str_round_trips(node):
    assert parse(str(node)) == node
