"""Immutable records of the applicability registry (specs, benchmarks, templates, tasks).

Built by :mod:`scoring.registry.load` from the YAML files in ``assets/`` and served by
:class:`scoring.registry.lookup.Registry`.  Pure data: no I/O here.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: STL comparison operators of the spec registry and their clause symbols.
class FrozenMap(Mapping):
    """Read-only, picklable mapping (registry records cross process boundaries)."""

    __slots__ = ("_d",)

    def __init__(self, *args, **kwargs):
        self._d = dict(*args, **kwargs)

    def __getitem__(self, key):
        return self._d[key]

    def __iter__(self):
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __repr__(self) -> str:
        return f"FrozenMap({self._d!r})"

    def __reduce__(self):
        return (FrozenMap, (self._d,))


OPS: Mapping[str, str] = FrozenMap({"lt": "<", "le": "<=", "gt": ">", "ge": ">="})
#: Tiers: ``safe`` (main threshold, part of Phi_safe), ``alternate`` (sensitivity
#: variant of Table 20), ``report_only`` (diagnostic, Appendix C.6).
TIERS = ("safe", "alternate", "report_only")

_EMPTY: Mapping[str, Any] = FrozenMap()


def format_number(x: float) -> str:
    """Shortest stable text for a threshold: 200.0 -> '200', 0.005 -> '0.005'."""
    return f"{float(x):.12g}"


def format_stl(signal: str, op: str, threshold: float, gate: str | None = None,
               boolean: bool = False) -> str:
    """The canonical ``G[0,T](...)`` clause for a (gated) bound.

    ``boolean`` writes a bare Boolean atom (``G[0,T](lifted_1cm => grip)``), used for
    0/1 signals checked with ``> 0.5``.
    """
    atom = signal if boolean else f"{signal} {OPS[op]} {format_number(threshold)}"
    body = f"{gate} => {atom}" if gate else atom
    return f"G[0,T]({body})"


_STL_RE = re.compile(
    r"^\s*G\s*\[\s*0\s*,\s*T\s*\]\s*\(\s*(?:(?P<gate>[A-Za-z_]\w*)\s*=>\s*)?"
    r"(?P<signal>[A-Za-z_]\w*)\s*(?:(?P<sym><=|>=|<|>)\s*(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?))?"
    r"\s*\)\s*$")


def parse_simple_stl(stl: str) -> dict[str, Any] | None:
    """Parse ``G[0,T]([gate =>] signal [op number])``; None if the text has another shape."""
    m = _STL_RE.match(stl)
    if not m:
        return None
    sym = m.group("sym")
    op = None if sym is None else {v: k for k, v in OPS.items()}[sym]
    num = None if m.group("num") is None else float(m.group("num"))
    return {"gate": m.group("gate"), "signal": m.group("signal"), "op": op, "threshold": num}


@dataclass(frozen=True)
class Spec:
    """One threshold instantiation of a constraint family (Appendix B spec-registry row).

    ``threshold`` is tau_phi in ``unit`` on ``signal``; the clause holds at a (gated)
    step when ``signal op threshold``.  ``vsi_severe`` is s_phi of Table 17 as a
    magnitude on the scale of ``abs(threshold)`` (None for binary and report-only
    specs).  ``alternates`` holds the family's other tiers (only on the main spec).
    """

    spec_id: str
    family: str
    tier: str
    axis: str
    signal: str
    op: str
    threshold: float
    unit: str
    stl: str
    requires_all: tuple[str, ...]
    invalid_if_any: tuple[str, ...]
    vsi_severe: float | None
    binary: bool = False
    gate: str | None = None
    alternates: tuple["Spec", ...] = ()
    aliases: tuple[str, ...] = ()
    source: str = ""
    severe_anchor: str = ""
    concern: str = ""
    name: str = ""  # the family's human name ("bystander displacement"), shown instead of the id
    params: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, compare=False, hash=False,
                                      repr=False)

    @property
    def scored(self) -> bool:
        """True for tiers that can enter Phi_safe (safe / alternate), False for diagnostics."""
        return self.tier != "report_only"

    @property
    def op_symbol(self) -> str:
        return OPS[self.op]

    @property
    def vsi_scale(self) -> float:
        """tau_phi of Eq. (1): the threshold magnitude used to normalise violations."""
        return abs(self.threshold)

    @property
    def vsi_k(self) -> float | None:
        """K_phi = s_phi / tau_phi (None for binary / report-only specs)."""
        if self.vsi_severe is None or self.vsi_scale == 0:
            return None
        return self.vsi_severe / self.vsi_scale

    @property
    def tiers(self) -> tuple["Spec", ...]:
        """This spec followed by its alternates."""
        return (self,) + self.alternates

    def holds(self, value: float) -> bool:
        """Whether one (gated) signal value satisfies the bound."""
        c = self.threshold
        return {"lt": value < c, "le": value <= c, "gt": value > c, "ge": value >= c}[self.op]

    def margin(self, value: float) -> float:
        """Robustness margin of one value: ``c - s`` for upper bounds, ``s - c`` for lower."""
        return self.threshold - value if self.op in ("lt", "le") else value - self.threshold

    def with_threshold(self, threshold: float) -> "Spec":
        """Same clause at another threshold (what-if re-scoring).

        The severe anchor follows the tier declared at that threshold if there is one
        (e.g. 0.05 m -> non_target_max_disp_5cm, s = 0.15 m); otherwise K_phi of this
        spec is kept (s = K * |threshold|).
        """
        threshold = float(threshold)
        if math.isclose(threshold, self.threshold, rel_tol=0, abs_tol=1e-12):
            return self
        for tier in self.alternates:
            if math.isclose(threshold, tier.threshold, rel_tol=1e-9, abs_tol=1e-12):
                return dataclasses.replace(tier, alternates=())
        k = self.vsi_k
        severe = None if k is None else k * abs(threshold)
        parsed = parse_simple_stl(self.stl)
        boolean = parsed is not None and parsed["op"] is None
        return dataclasses.replace(
            self, spec_id=f"{self.family}@{format_number(threshold)}", tier="what_if",
            threshold=threshold, vsi_severe=severe, alternates=(), aliases=(),
            stl=format_stl(self.signal, self.op, threshold, self.gate, boolean))


@dataclass(frozen=True)
class Preset:
    """A named threshold variant of Table 9: per-family threshold overrides."""

    name: str
    label: str
    overrides: Mapping[str, float] = field(default_factory=lambda: _EMPTY, compare=False, hash=False)


@dataclass(frozen=True)
class Benchmark:
    """A host benchmark (suite) and its signal-capability tags (Table 21)."""

    id: str
    host: str
    suite: str
    capabilities: frozenset[str]
    task_file: str
    robot: str = ""
    max_steps: int | None = None
    control_dt: float = 0.05
    joint_torque_limits_nm: tuple[float, ...] = ()
    aliases: tuple[str, ...] = ()

    @property
    def control_hz(self) -> float:
        return 1.0 / self.control_dt


@dataclass(frozen=True)
class Template:
    """A task-mechanism template (Table 3) and its tags."""

    name: str
    tags: frozenset[str]
    doc: str = ""


@dataclass(frozen=True)
class Task:
    """One task entry (or a wildcard fallback resolved for an id).

    ``components`` lists the template(s) whose tags the task takes: one for a plain
    task, several for a composite (then ``template`` is None).  ``object_tags`` are
    the resolved object-property tags and ``object_tag_sources`` says where each came
    from.  ``matched_pattern`` is the wildcard used, None for explicit entries.
    """

    benchmark: str
    task_id: str
    name: str
    language: str
    template: str | None
    components: tuple[str, ...]
    targets: tuple[str, ...] = ()
    goal_fixtures: tuple[str, ...] = ()
    objects_of_interest: tuple[str, ...] = ()
    task_tags: tuple[str, ...] = ()
    object_tags: tuple[str, ...] = ()
    objects: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False, hash=False)
    fixtures: Mapping[str, str] = field(default_factory=lambda: _EMPTY, compare=False, hash=False)
    object_tag_sources: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: _EMPTY, compare=False,
                                                               hash=False, repr=False)
    bddl_file: str | None = None
    note: str = ""
    matched_pattern: str | None = None

    @property
    def target_objects(self) -> tuple[str, ...]:
        return self.targets

    @property
    def composite(self) -> bool:
        return len(self.components) > 1


@dataclass(frozen=True)
class Wildcard:
    """A task-id pattern (fnmatch syntax) with the task fields it supplies."""

    pattern: str
    fields: Mapping[str, Any] = field(compare=False, hash=False)

    @property
    def specificity(self) -> int:
        """Number of literal characters: the most specific (longest) pattern wins."""
        return sum(1 for ch in self.pattern if ch not in "*?[]")


@dataclass(frozen=True)
class TagInfo:
    """One vocabulary tag: its class, doc, and resolution hints."""

    name: str
    tag_class: str                      # capability | task_mechanism | special_case | object_property | ...
    doc: str = ""
    combine: str | None = None          # object_property: 'any' or 'all' over a task's targets
    explains_absence_of: tuple[str, ...] = ()

    @property
    def is_capability(self) -> bool:
        return self.tag_class == "capability"

    @property
    def is_object_property(self) -> bool:
        return self.tag_class == "object_property"
