"""The LIBERO-PRO perturbation suites: which base suite each varies, how, and whether it runs.

Data: ``assets/perturbations.yaml`` (its ``suites`` section is generated from the installed
LIBERO package by scripts/make_perturbation_registry.py; its ``families`` with their
derivation rules are written by hand). Pure Python and PyYAML: no MuJoCo, no LIBERO import.

    >>> from scoring.registry.perturbations import suite_perturbation, variants_of
    >>> p = suite_perturbation("libero_spatial_with_mug")
    >>> p.base_suite, p.family, p.runnable
    ('libero_spatial', 'distractor', True)
    >>> [v.suite for v in variants_of("libero_spatial") if v.family == "swap"]
    ['libero_spatial_swap']

:func:`derive_entry` is the one function that turns a base task's registry entry into a
variant task's entry by its family's rule (``families.<name>.rule``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import yaml

from scoring.errors import RegistryError

__all__ = ["DEFAULT_FILE", "DerivationError", "Family", "Perturbations", "SuitePerturbation",
           "benchmark_id", "derive_entry", "load_perturbations", "suite_perturbation", "suite_name",
           "variants_of"]

DEFAULT_FILE = Path(__file__).resolve().parents[2] / "assets" / "perturbations.yaml"
BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90")


class DerivationError(RegistryError):
    """A family rule that cannot be applied to a base entry (e.g. a target with no counterpart)."""


@dataclass(frozen=True)
class SuitePerturbation:
    """One LIBERO suite that varies a base suite (or, with base_suite None, stands alone).

    ``task_map[i]`` is the base task index of variant task i (None when the tasks do not
    correspond). ``init_states_match``: episode k of variant task i starts from the
    configuration of base task ``task_map[i]`` episode k. ``runnable``: LIBERO ships what a
    rollout needs and the task registry has the suite's tasks; ``why_not`` says what is
    missing otherwise.
    """

    suite: str
    base_suite: str | None
    family: str
    init_states_match: bool
    task_map: tuple[int, ...] | None
    runnable: bool
    why_not: str = ""
    n_tasks: int = 0
    init_states: int = 0
    added_objects: tuple[str, ...] = ()
    family_from: str = ""

    @property
    def benchmark(self) -> str:
        """The scoring registry's benchmark id (the suite name with '-' for '_')."""
        return benchmark_id(self.suite)

    @property
    def pairing(self) -> str:
        """How base and variant episodes pair: 'init_state', 'task' or 'none'."""
        if self.task_map is None:
            return "none"
        return "init_state" if self.init_states_match else "task"


@dataclass(frozen=True)
class Family:
    """A perturbation family: what it changes and the rule that derives a variant's entry."""

    name: str
    doc: str
    rule: Mapping[str, Any]


@dataclass(frozen=True)
class Perturbations:
    path: Path
    families: Mapping[str, Family]
    suites: Mapping[str, SuitePerturbation]

    @property
    def rules(self) -> dict[str, Mapping[str, Any]]:
        return {n: f.rule for n, f in self.families.items()}

    def runnable(self) -> list[str]:
        return [s for s, p in self.suites.items() if p.runnable]


def benchmark_id(suite: str) -> str:
    return suite.replace("_", "-")


def suite_name(suite_or_benchmark: str) -> str:
    """A LIBERO suite name from itself or its benchmark id (libero-spatial-with-mug)."""
    return suite_or_benchmark.replace("-", "_")


_RULE_KEYS = {"mechanism": ("keep", "from_bddl"), "targets": ("keep", "via_goal", "from_bddl"),
              "object_tags": ("keep", "catalog"), "added_objects": ("bystander",)}


def _family(name: str, raw: Any, where: str) -> Family:
    if not isinstance(raw, dict) or "rule" not in raw:
        raise RegistryError(f"{where}: family {name!r} needs a 'doc' and a 'rule'")
    rule = dict(raw["rule"] or {})
    for k, v in rule.items():
        if k == "why":
            continue
        if k not in _RULE_KEYS:
            raise RegistryError(f"{where}: families.{name}.rule.{k}: unknown key; known: {', '.join(_RULE_KEYS)}")
        if v not in _RULE_KEYS[k]:
            raise RegistryError(f"{where}: families.{name}.rule.{k}: {v!r}; expected one of {', '.join(_RULE_KEYS[k])}")
    return Family(name=name, doc=str(raw.get("doc", "")), rule=rule)


def families_of(data: Mapping[str, Any], where: str = "perturbations.yaml") -> dict[str, Family]:
    """The `families` section of a parsed perturbations file, checked."""
    return {n: _family(n, f, where) for n, f in (data.get("families") or {}).items()}


@functools.lru_cache(maxsize=8)
def _load(path: Path) -> Perturbations:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as e:
        raise RegistryError(f"cannot read {path}: {e}") from None
    where = str(path)
    fams = families_of(data, where)
    suites = {}
    for name, row in (data.get("suites") or {}).items():
        fam = row.get("family")
        if fam not in fams:
            raise RegistryError(f"{where}: suites.{name}.family {fam!r} is not one of {', '.join(fams)}")
        tm = row.get("task_map")
        ist = row.get("init_states") or 0
        suites[name] = SuitePerturbation(
            suite=name, base_suite=row.get("base_suite"), family=fam,
            init_states_match=bool(row.get("init_states_match")),
            task_map=tuple(int(x) for x in tm) if tm is not None else None,
            runnable=bool(row.get("runnable")), why_not=str(row.get("why_not") or ""),
            n_tasks=int(row.get("n_tasks") or 0), init_states=ist if isinstance(ist, int) else min(ist),
            added_objects=tuple(row.get("added_objects") or ()), family_from=str(row.get("family_from") or ""))
    return Perturbations(path=path, families=fams, suites=suites)


def load_perturbations(path: str | Path | None = None) -> Perturbations:
    """The perturbation data (cached per path)."""
    return _load(Path(path).resolve() if path is not None else DEFAULT_FILE)


def suite_perturbation(suite: str) -> SuitePerturbation | None:
    """The perturbation of a LIBERO suite (name or benchmark id); None for a base suite or an unknown name."""
    return load_perturbations().suites.get(suite_name(suite))


def variants_of(base_suite: str) -> list[SuitePerturbation]:
    """Every suite that varies `base_suite` (name or benchmark id; libero-long is libero_10), in file order."""
    base = suite_name(base_suite)
    base = "libero_10" if base == "libero_long" else base
    return [p for p in load_perturbations().suites.values() if p.base_suite == base]


# ----------------------------------------------------------------------------- the derivation rule
_MECHANISM = ("template", "components", "goal_fixtures", "tags")


def _goal_renaming(base_entry: Mapping, variant: Mapping) -> dict[str, str]:
    """Base instance -> variant instance, by the position each takes in the goal."""
    bg, vg = base_entry.get("goal") or [], variant.get("goal") or []
    if len(bg) != len(vg) or any(len(a) != len(b) or a[0] != b[0] for a, b in zip(bg, vg)):
        raise DerivationError(f"the goals of {base_entry.get('name')} and {variant.get('name')} do not align "
                              "predicate by predicate")
    return {a: b for p, q in zip(bg, vg) for a, b in zip(p[1:], q[1:])}


def _renamed(fixture: str, ren: Mapping[str, str]) -> str:
    """A goal fixture's new name: the renaming of a goal argument it owns (`<fixture>_<region>`)."""
    for a, b in ren.items():
        if a == fixture:
            return b
        if a.startswith(fixture + "_") and b.endswith(a[len(fixture):]):
            return b[:len(b) - len(a) + len(fixture)]
    return fixture


def derive_entry(base_entry: Mapping[str, Any], variant: Mapping[str, Any], rule: Mapping[str, Any]) -> dict:
    """A variant task's registry entry: its base task's entry changed by its family's `rule`.

    `variant` holds what LIBERO says of the variant task: name, language, bddl_file, objects,
    fixtures, objects_of_interest, and (for ``targets: via_goal``) both tasks' ``goal``
    predicates (the base's as ``variant['base_goal']``). Identity fields always come from
    the variant; the rule decides the rest:
    - ``mechanism: keep``: template / components, goal fixtures and task tags are the base's;
    - ``targets: keep`` (the same instances) or ``via_goal`` (the instance that takes the
      base target's place in the goal);
    - ``object_tags: keep`` (the base's explicit object tags) or ``catalog`` (dropped: the
      new targets' catalog tags apply);
    - ``added_objects: bystander``: objects the base task lacks must not be targets (the
      recorder then labels them bystanders: every non-target movable object is one).
    """
    if rule.get("mechanism") != "keep":
        raise DerivationError(f"rule {dict(rule)} does not derive from a base entry (mechanism: from_bddl)")
    out: dict[str, Any] = {k: variant[k] for k in ("name", "language", "bddl_file") if k in variant}
    for k in _MECHANISM:
        if k in base_entry and k != "goal_fixtures":
            out[k] = base_entry[k]
    targets = list(base_entry.get("targets") or [])
    how = rule.get("targets", "keep")
    ren: dict[str, str] = {}
    if how == "via_goal":
        ren = _goal_renaming({"name": base_entry.get("name"), "goal": variant.get("base_goal")}, variant)
        targets = [ren.get(t, t) for t in targets]
    elif how != "keep":
        raise DerivationError(f"targets: {how} does not derive from a base entry")
    objects = dict(variant.get("objects") or {})
    lost = [t for t in targets if t not in objects]
    if lost:
        raise DerivationError(f"{variant.get('name')}: base target(s) {', '.join(lost)} are not objects of the "
                              "variant task")
    added = [o for o in objects if o not in (base_entry.get("objects") or {})]
    wrong = (set(added) & set(targets)) - {ren[t] for t in base_entry.get("targets") or [] if t in ren}
    if rule.get("added_objects") == "bystander" and wrong:
        raise DerivationError(f"{variant.get('name')}: added object(s) {', '.join(sorted(wrong))} would be targets")
    out["targets"] = targets
    fixtures = dict(variant.get("fixtures") or {})
    if base_entry.get("goal_fixtures"):
        out["goal_fixtures"] = [_renamed(f, ren) for f in base_entry["goal_fixtures"]]
        lost = [f for f in out["goal_fixtures"] if f not in fixtures]
        if lost:
            raise DerivationError(f"{variant.get('name')}: goal fixture(s) {', '.join(lost)} are not fixtures of "
                                  "the variant task")
    if rule.get("object_tags", "keep") == "keep" and base_entry.get("object_tags"):
        out["object_tags"] = list(base_entry["object_tags"])
    out["objects_of_interest"] = list(variant.get("objects_of_interest") or [])
    out["objects"] = objects
    out["fixtures"] = fixtures
    note = [f"Derived from {base_entry.get('name')} by the '{variant.get('family', '')}' rule"
            if variant.get("family") else f"Derived from {base_entry.get('name')}"]
    if added:
        placed = {b: a for a, b in ren.items() if a in (base_entry.get("targets") or [])}
        note.append("new: " + ", ".join(f"{o} (target, in place of {placed[o]})" if o in placed else f"{o} (bystander)"
                                         for o in added))
    out["note"] = "; ".join(note) + "."
    return out
