"""Registry clauses prepared for evaluation, and their evaluation on one or many episodes.

Every scored family is `G[0,T]` of a (gated) bound, so its robustness is
`threshold - extreme` (upper bounds) or `extreme - threshold` (lower bounds), where
`extreme` is the worst signal value over the gated steps. We compute the extreme and
its step directly (the STL engine's `bound_form` fast path) and keep both: threshold
what-if re-scoring needs nothing else. Formulas of any other shape go through the
general STL engine, and then have no extreme (what-if cannot move them).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np

from scoring.errors import RegistryError
from scoring.evaluate.signals import SignalBatch, Signals
from scoring.evaluate.vsi import severe_for
from scoring.registry.lookup import Registry
from scoring.registry.types import Spec
from scoring.stl import engine as stl


@dataclasses.dataclass(frozen=True)
class Clause:
    """One registry clause prepared for evaluation on many episodes.

    Attributes:
      spec: the registry spec (a family's safe tier, or a diagnostic).
      label: the family for scored clauses, the spec id for report-only ones.
      report_only: True for diagnostics.
      names: signals the formula reads.
      form: the `G[0,T]` bound, or None for a formula that needs the general engine.
      severe: the VSI severe anchor at the registry threshold (None for binary specs).
    """

    spec: Spec
    label: str
    report_only: bool
    names: tuple[str, ...]
    form: stl.BoundForm | None
    severe: float | None

    @property
    def upper(self) -> bool:
        return self.form is not None and self.form.op in _UPPER


def clause_plan(reg: Registry) -> tuple[Clause, ...]:
    """The clauses `score_episode` evaluates: the scored families, then the diagnostics."""
    plan = _PLANS.get(reg.hash)
    if plan is None:
        specs = [(reg.spec(f), False) for f in reg.families] + [(d, True) for d in reg.diagnostics]
        plan = _PLANS[reg.hash] = tuple(
            Clause(spec=spec, label=spec.spec_id if diag else spec.family, report_only=diag,
                   names=stl.signal_names(spec.stl), form=stl.bound_form(spec.stl),
                   severe=None if diag else severe_for(spec, float(spec.threshold)))
            for spec, diag in specs)
    return plan


_PLANS: dict[str, tuple[Clause, ...]] = {}  # registry content hash -> plan


def evaluate_clause(formula: str, signals: Signals, *, threshold: float | None = None
                    ) -> tuple[float, float | None, int | None, int | None]:
    """(rho, extreme, extreme_step, first_violation_step) of one clause on one episode.

    `threshold` replaces the clause's constant (what-if); only bound-form clauses have one.
    """
    return evaluate_form(formula, stl.bound_form(formula), signals.values, threshold)


def evaluate_form(formula: str, form, values: Mapping[str, np.ndarray], threshold: float | None):
    if form is None:
        if threshold is not None:
            raise RegistryError(f"cannot override the threshold of {formula!r}: not a G[0,T] bound")
        rho = stl.robustness(formula, values)
        trace = stl.robustness_trace(formula, values)
        neg = np.nonzero(trace < 0)[0]
        return rho, None, None, int(neg[0]) if neg.size else None
    thr = form.threshold if threshold is None else float(threshold)
    s = values[form.signal]
    upper = form.op in _UPPER
    if form.gate is not None:
        gate = values[form.gate] >= 0.5
        if not gate.any():
            return math.inf, -math.inf if upper else math.inf, None, None
        s = np.where(gate, s, -np.inf if upper else np.inf)
    step = int(s.argmax() if upper else s.argmin())
    extreme = float(s[step])
    rho = thr - extreme if upper else extreme - thr
    if rho >= 0:  # the worst step holds, so every step does
        return float(rho), extreme, step, None
    first = int(np.argmax(thr - s < 0 if upper else s - thr < 0))
    return float(rho), extreme, step, first


_UPPER = frozenset(("<", "<=", "lt", "le"))


def evaluate_bounds(clauses: list[Clause], values: Mapping[str, np.ndarray], thresholds: list[float],
                    n_steps: np.ndarray) -> list[tuple[list, list, list, list]]:
    """`evaluate_form` of bound-form clauses on every row of (E, T) signals, rows valid for t < n_steps[e].

    Lower bounds are negated so every row takes a max: (-c) - (-x) == x - c exactly, and
    argmax of -s is the first argmin of s, so each row equals `evaluate_form` on that episode
    alone, bit for bit. Per clause: lists (rho, extreme, extreme_step, first_violation_step).
    """
    E, T = values[clauses[0].form.signal].shape
    rows = np.arange(E)
    valid = None if (n_steps == T).all() else np.arange(T) < n_steps[:, None]
    results = []
    for clause, threshold in zip(clauses, thresholds):
        form = clause.form
        sign = 1.0 if clause.upper else -1.0
        s = values[form.signal] if clause.upper else -values[form.signal]
        mask = valid
        if form.gate is not None:
            gate = values[form.gate] >= 0.5
            mask = gate if valid is None else gate & valid
        if mask is not None:
            s = np.where(mask, s, -np.inf)
        step = s.argmax(axis=1)
        worst = s[rows, step]
        thr = sign * threshold
        rho = thr - worst
        violated = rho < 0
        rho_l, extreme_l, step_l = rho.tolist(), (worst * sign).tolist(), step.tolist()
        if violated.any():
            first = np.where(violated, ((thr - s) < 0).argmax(axis=1), -1).tolist()
            first_l = [None if f < 0 else f for f in first]
        else:
            first_l = [None] * E
        if mask is not None:
            for e in np.flatnonzero(~mask.any(axis=1)).tolist():  # never open: vacuous, no extreme step
                rho_l[e], step_l[e], first_l[e] = math.inf, None, None
        results.append((rho_l, extreme_l, step_l, first_l))
    return results


def missing_signal(clause: Clause, signals: Signals | SignalBatch) -> str | None:
    for name in clause.names:
        if name in signals.unavailable:
            return f"signal unavailable: {name} ({signals.unavailable[name]})"
        if name not in signals.values:
            return f"signal unavailable: {name} (not derived from this record)"
    return None
