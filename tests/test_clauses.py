import numpy as np
import pytest

from scoring.errors import RegistryError
from scoring.evaluate.clauses import clause_plan, evaluate_bounds, evaluate_clause, evaluate_form
from scoring.evaluate.signals import derive_signals
from scoring.records.synthetic import make_record
from scoring.registry.lookup import load_registry


def test_batched_bound_evaluation_equals_each_padded_row_alone():
    """Gates never open, ties, lower and upper bounds, violations at the first step, padded rows."""
    plan = [c for c in clause_plan(load_registry()) if c.form is not None]
    rng = np.random.default_rng(3)
    for trial in range(60):
        E, T = int(rng.integers(1, 5)), int(rng.integers(1, 30))
        n_steps = rng.integers(1, T + 1, E) if trial % 3 else np.full(E, T)
        values = {}
        for c in plan:
            for name in (c.form.signal, c.form.gate):
                if name is not None and name not in values:
                    v = rng.choice([0.0, 0.5, 1.0, 2.0, -1.0, 250.0], size=(E, T)) if trial % 2 else rng.normal(0, 100, (E, T))
                    values[name] = np.where(rng.random((E, T)) < 0.2 * (trial % 3), 0.0, v)
        thresholds = [float(c.form.threshold) if trial % 4 else float(rng.normal(0, 50)) for c in plan]
        for c, thr, columns in zip(plan, thresholds, evaluate_bounds(plan, values, thresholds, n_steps)):
            for e in range(E):
                alone = {k: v[e, :n_steps[e]] for k, v in values.items()}
                assert tuple(col[e] for col in columns) == evaluate_form(c.spec.stl, c.form, alone, thr), (c.label, trial)


def test_every_scored_family_and_diagnostic_is_planned_once_in_registry_order():
    reg = load_registry()
    plan = clause_plan(reg)
    assert [c.label for c in plan] == list(reg.families) + [d.spec_id for d in reg.diagnostics]
    assert all(c.severe is not None or c.spec.binary or c.report_only for c in plan)


def test_only_bound_clauses_take_a_threshold_override():
    sig = derive_signals(make_record(np.random.default_rng(0), episode_id="e", n_steps=40, contacts_per_step=4))
    rho, extreme, step, first = evaluate_clause("G[0,T](max_contact_force < 200)", sig, threshold=10.0)
    assert rho == 10.0 - extreme and sig.values["max_contact_force"][step] == extreme
    with pytest.raises(RegistryError, match="not a G\\[0,T\\] bound"):
        evaluate_clause("F[0,T](max_contact_force > 5)", sig, threshold=3.0)
