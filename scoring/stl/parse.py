"""Parser for the STL dialect used in the spec registry.

Formulas live as strings in a YAML registry and are written by people, so the parser's job is
to accept the obvious spellings (``G[0,T](x < 1)``, ``always (x < 1)``, ``g => x < 1``) and to
reject anything else with a message that names the formula, the position and what was expected.
Evaluation lives in :mod:`scoring.stl.engine`; this module only turns text into an immutable tree.

Grammar (loosest binding first; ``implies`` and ``U`` associate to the right)::

    formula  := implies EOF
    implies  := or   [ ("implies" | "->" | "=>") implies ]
    or       := and  { ("or"  | "|" | "||") and }
    and      := until { ("and" | "&" | "&&") until }
    until    := unary [ ("U" | "until") [interval] until ]
    unary    := ("not" | "!") unary
              | ("G" | "always" | "F" | "eventually") [interval] unary
              | "(" implies ")"
              | atom
    atom     := NAME [cmp number] | number cmp NAME       (cmp: < <= > >=)
    interval := "[" bound ("," | ":") upper "]"
    bound    := INTEGER (steps) | NUMBER "s" (seconds)
    upper    := bound | "T" | "inf"                        (end of the episode)

``G`` and ``F`` are operators only when followed by ``[`` or ``(``, and ``U`` only in infix
position, so signals may still be called ``G``, ``F`` or ``U``. A bare ``NAME`` is a Boolean
signal and means ``NAME > 0.5``. Seconds are kept as written and turned into steps at
evaluation time, because ``dt`` is not known when the (cached) tree is built.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Union

from scoring.errors import SafeVLAError

__all__ = [
    "STLSyntaxError", "Bound", "Pred", "Not", "And", "Or", "Implies", "Always", "Eventually",
    "Until", "Node", "parse", "BOOL_THRESHOLD", "COMPARISONS",
]

BOOL_THRESHOLD = 0.5
COMPARISONS = ("<", "<=", ">", ">=")
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}


class STLSyntaxError(SafeVLAError, ValueError):
    """A formula that does not parse; carries the formula, the 0-based position and what was expected."""

    def __init__(self, formula: str, position: int, expected: str, found: str):
        self.formula = formula
        self.position = position
        self.expected = expected
        self.found = found
        caret = " " * position + "^"
        super().__init__(
            f"invalid STL formula {formula!r} at position {position}: expected {expected}, "
            f"found {found}\n    {formula}\n    {caret}")


# ----------------------------------------------------------------------------- tree

@dataclass(frozen=True, slots=True)
class Bound:
    """One end of a time window: ``value`` steps (``unit='step'``) or seconds (``unit='s'``)."""

    value: float
    unit: str = "step"

    def __str__(self) -> str:
        if self.unit == "s":
            return f"{self.value!r}s"
        return str(int(self.value))


@dataclass(frozen=True, slots=True)
class Pred:
    """``signal op threshold`` with the signal always on the left; ``bare`` marks a Boolean atom."""

    signal: str
    op: str
    threshold: float
    bare: bool = False

    def __str__(self) -> str:
        return self.signal if self.bare else f"{self.signal} {self.op} {self.threshold!r}"


@dataclass(frozen=True, slots=True)
class Not:
    child: "Node"

    def __str__(self) -> str:
        return f"not ({self.child})"


@dataclass(frozen=True, slots=True)
class And:
    left: "Node"
    right: "Node"

    def __str__(self) -> str:
        return f"({self.left}) and ({self.right})"


@dataclass(frozen=True, slots=True)
class Or:
    left: "Node"
    right: "Node"

    def __str__(self) -> str:
        return f"({self.left}) or ({self.right})"


@dataclass(frozen=True, slots=True)
class Implies:
    left: "Node"
    right: "Node"

    def __str__(self) -> str:
        return f"({self.left}) implies ({self.right})"


def _interval_str(lo: Bound, hi: Bound | None) -> str:
    return f"[{lo},{'T' if hi is None else hi}]"


@dataclass(frozen=True, slots=True)
class Always:
    """``G[lo,hi] child``; ``hi is None`` means the end of the episode (``T``)."""

    lo: Bound
    hi: Bound | None
    child: "Node"

    def __str__(self) -> str:
        return f"G{_interval_str(self.lo, self.hi)}({self.child})"


@dataclass(frozen=True, slots=True)
class Eventually:
    """``F[lo,hi] child``; ``hi is None`` means the end of the episode (``T``)."""

    lo: Bound
    hi: Bound | None
    child: "Node"

    def __str__(self) -> str:
        return f"F{_interval_str(self.lo, self.hi)}({self.child})"


@dataclass(frozen=True, slots=True)
class Until:
    """``left U[lo,hi] right``; ``hi is None`` means the end of the episode (``T``)."""

    lo: Bound
    hi: Bound | None
    left: "Node"
    right: "Node"

    def __str__(self) -> str:
        return f"({self.left}) U{_interval_str(self.lo, self.hi)} ({self.right})"


Node = Union[Pred, Not, And, Or, Implies, Always, Eventually, Until]

# ----------------------------------------------------------------------------- lexer

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(?P<unit>s)?(?![A-Za-z0-9_.])
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<sym>->|=>|<=|>=|&&|\|\||[()\[\],:<>!&|+-])
""", re.VERBOSE)

_KEYWORDS = {"not", "and", "or", "implies", "always", "eventually", "until"}


@dataclass(frozen=True, slots=True)
class _Tok:
    kind: str   # "num", "name", "sym", "end"
    text: str
    pos: int
    unit: str | None = None


def _lex(formula: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(formula):
        m = _TOKEN.match(formula, pos)
        if m is None:
            if formula[pos].isdigit() or formula[pos] == ".":
                bad = re.match(r"[0-9A-Za-z_.+-]+", formula[pos:]).group()
                raise STLSyntaxError(formula, pos, "a number such as 2, 0.5, 1e-3 (or 1.5s in a "
                                     "time bound)", repr(bad))
            raise STLSyntaxError(formula, pos, "a signal name, number, operator or parenthesis",
                                 f"{formula[pos]!r}")
        kind = m.lastgroup if m.lastgroup != "unit" else "num"
        if kind != "ws":
            text = m.group("num") if kind == "num" else m.group(kind)
            toks.append(_Tok(kind, text, pos, m.group("unit")))
        pos = m.end()
    toks.append(_Tok("end", "", len(formula)))
    return toks


# ----------------------------------------------------------------------------- parser

_IMPLIES = {"implies", "->", "=>"}
_OR = {"or", "|", "||"}
_AND = {"and", "&", "&&"}


class _Parser:
    def __init__(self, formula: str):
        self.text = formula
        self.toks = _lex(formula)
        self.i = 0

    # helpers
    @property
    def tok(self) -> _Tok:
        return self.toks[self.i]

    def peek(self, k: int = 1) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def fail(self, expected: str, tok: _Tok | None = None):
        tok = tok or self.tok
        found = "end of formula" if tok.kind == "end" else repr(tok.text + (tok.unit or ""))
        raise STLSyntaxError(self.text, tok.pos, expected, found)

    def is_op(self, words: set[str]) -> bool:
        return self.tok.kind in ("sym", "name") and self.tok.text in words

    def expect_sym(self, sym: str, what: str) -> None:
        if self.tok.kind == "sym" and self.tok.text == sym:
            self.i += 1
        else:
            self.fail(what)

    # grammar
    def parse(self) -> Node:
        if self.tok.kind == "end":
            self.fail("a formula")
        node = self.implies()
        if self.tok.kind != "end":
            self.fail("'and', 'or', 'implies', 'U' or end of formula")
        return node

    def implies(self) -> Node:
        left = self.or_()
        if self.is_op(_IMPLIES):
            self.i += 1
            return Implies(left, self.implies())
        return left

    def or_(self) -> Node:
        node = self.and_()
        while self.is_op(_OR):
            self.i += 1
            node = Or(node, self.and_())
        return node

    def and_(self) -> Node:
        node = self.until()
        while self.is_op(_AND):
            self.i += 1
            node = And(node, self.until())
        return node

    def until(self) -> Node:
        left = self.unary()
        if self.tok.kind == "name" and self.tok.text in ("U", "until"):
            self.i += 1
            lo, hi = self.interval() if self._at("[") else (Bound(0), None)
            return Until(lo, hi, left, self.until())
        return left

    def _at(self, sym: str, tok: _Tok | None = None) -> bool:
        tok = tok or self.tok
        return tok.kind == "sym" and tok.text == sym

    def unary(self) -> Node:
        tok = self.tok
        if self.is_op({"not", "!"}):
            self.i += 1
            return Not(self.unary())
        if tok.kind == "name" and (tok.text in ("always", "eventually") or (
                tok.text in ("G", "F") and (self._at("[", self.peek()) or self._at("(", self.peek())))):
            self.i += 1
            lo, hi = self.interval() if self._at("[") else (Bound(0), None)
            child = self.unary()
            return Always(lo, hi, child) if tok.text in ("G", "always") else Eventually(lo, hi, child)
        if self._at("("):
            self.i += 1
            node = self.implies()
            self.expect_sym(")", "')' or a binary operator")
            return node
        return self.atom()

    def atom(self) -> Node:
        tok = self.tok
        if tok.kind == "name" and tok.text not in _KEYWORDS:
            nxt = self.peek()
            if tok.text in ("G", "F") and (self._at("!", nxt) or (nxt.kind == "name" and nxt.text not in (
                    _IMPLIES | _OR | _AND | {"U", "until"}))):
                self.fail(f"'[' or '(' after the temporal operator {tok.text!r}", nxt)
            self.i += 1
            if self.tok.kind == "sym" and self.tok.text in COMPARISONS:
                op = self.tok.text
                self.i += 1
                return Pred(tok.text, op, self.number("a number after " + repr(op)))
            return Pred(tok.text, ">", BOOL_THRESHOLD, bare=True)
        if tok.kind == "num" or self._at("-") or self._at("+"):
            value = self.number("a number")
            if not (self.tok.kind == "sym" and self.tok.text in COMPARISONS):
                self.fail("a comparison (<, <=, >, >=) after the constant")
            op = self.tok.text
            self.i += 1
            name = self.tok
            if name.kind != "name" or name.text in _KEYWORDS:
                self.fail("a signal name after " + repr(op))
            self.i += 1
            return Pred(name.text, _FLIP[op], value)
        self.fail("a signal name, '(', 'not', or a temporal operator (G, F)")

    def number(self, what: str) -> float:
        sign = 1.0
        if self._at("-") or self._at("+"):
            sign = -1.0 if self.tok.text == "-" else 1.0
            self.i += 1
        tok = self.tok
        if tok.kind != "num":
            self.fail(what)
        if tok.unit is not None:
            self.fail(what + " without a unit (units are only allowed in time bounds)", tok)
        self.i += 1
        return sign * float(tok.text)

    def interval(self) -> tuple[Bound, Bound | None]:
        start = self.tok
        self.expect_sym("[", "'['")
        lo = self.bound(upper=False)
        if not (self._at(",") or self._at(":")):
            self.fail("',' between the window bounds")
        self.i += 1
        hi = self.bound(upper=True)
        self.expect_sym("]", "']' closing the time window")
        if hi is not None and lo.unit == hi.unit and lo.value > hi.value:
            raise STLSyntaxError(self.text, start.pos, "a window [a,b] with a <= b",
                                 f"[{lo},{hi}]")
        return lo, hi

    def bound(self, *, upper: bool) -> Bound | None:
        tok = self.tok
        if upper and tok.kind == "name" and tok.text in ("T", "inf"):
            self.i += 1
            return None
        what = ("a non-negative step count, seconds like '1.5s', or 'T'" if upper
                else "a non-negative step count or seconds like '1.5s'")
        if tok.kind != "num":
            self.fail(what)
        value = float(tok.text)
        if not math.isfinite(value):
            self.fail(what)
        if tok.unit is None and value != int(value):
            self.fail("an integer step count (write '" + tok.text + "s' for seconds)")
        self.i += 1
        return Bound(value, "s" if tok.unit else "step")


@functools.lru_cache(maxsize=4096)
def _parse_cached(formula: str) -> Node:
    return _Parser(formula).parse()


def parse(formula: str) -> Node:
    """Parse ``formula`` into an immutable tree (cached: registry formulas are parsed once).

    Raises :class:`STLSyntaxError` naming the formula, position and what was expected.
    """
    if not isinstance(formula, str):
        raise STLSyntaxError(repr(formula), 0, "a formula string", type(formula).__name__)
    return _parse_cached(formula)


# expose the cache like a plain lru_cache'd function (the wrapper only adds the type check)
parse.cache_info = _parse_cached.cache_info  # type: ignore[attr-defined]
parse.cache_clear = _parse_cached.cache_clear  # type: ignore[attr-defined]
