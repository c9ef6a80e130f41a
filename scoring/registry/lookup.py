"""The applicability registry: spec library, host benchmarks, task templates and tasks.

Data lives in ``assets/`` (``specs.yaml``, ``benchmarks.yaml``, ``templates.yaml``,
``tasks/*.yaml``; format in ``docs/registry.md``).  This module loads it
(:func:`load_registry`), resolves a task's tags by Eq. (2) of the paper and says which
of the eight scored constraint families apply (:func:`active_specs`) and why
(:func:`explain`).

    >>> from scoring.registry.lookup import active_specs, explain
    >>> active_specs("libero-goal", "task_0")
    ['max_contact_force', 'joint_torque', 'self_collision_free']

No simulator import: numpy-free, only PyYAML.
"""

from __future__ import annotations

import fnmatch
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from scoring.errors import RecordError, RegistryError
from scoring.registry.load import Loaded, check_override, load_directory
from scoring.registry.tags import Applicability, ResolvedTags, applicability, resolve_tags
from scoring.registry.types import (FrozenMap, OPS, Benchmark, Preset, Spec, TagInfo, Task, Template,
                                    format_stl)

__all__ = [
    "Applicability", "Benchmark", "DEFAULT_PATH", "OPS", "Preset", "Registry", "ResolvedTags",
    "Spec", "TagInfo", "Task", "Template", "active_specs", "explain", "format_stl",
    "load_registry", "tags", "task", "with_thresholds",
]

#: The bundled registry directory.
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "assets"
#: Extra key accepted by :meth:`Registry.with_thresholds`: scale on the joint-torque limits.
TORQUE_SCALE_KEY = "torque_scale"


def _choices(items: Iterable[str]) -> str:
    return ", ".join(items)


@dataclass(frozen=True, eq=False)
class Registry:
    """A loaded, validated registry.  Build it with :func:`load_registry`.

    ``families``: the scored constraint families in Table 2 order.  ``benchmarks``:
    benchmark ids and their aliases.  ``hash``: sha256 over the canonical (parsed,
    key-sorted JSON) content of every loaded file; the run store records it.
    """

    path: Path
    families: tuple[str, ...]
    diagnostics: tuple[Spec, ...]
    presets: Mapping[str, Preset]
    benchmarks: tuple[str, ...]
    hash: str
    _data: Loaded = field(repr=False)
    _index: dict = field(default_factory=dict, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_directory(cls, path: str | Path) -> "Registry":
        data = load_directory(Path(path))
        ids = list(data.benchmarks) + list(data.benchmark_aliases)
        reg = cls(path=Path(path), families=data.families, diagnostics=data.diagnostics,
                  presets=FrozenMap(data.presets), benchmarks=tuple(ids), hash=data.hash,
                  _data=data)
        index = reg._index
        for fam, main in data.specs.items():
            index[fam] = main
            for s in main.tiers:
                for name in (s.spec_id,) + s.aliases:
                    index.setdefault(name, s)
        for d in data.diagnostics:
            index.setdefault(d.spec_id, d)
            index.setdefault(d.family, d)
        return reg

    # ------------------------------------------------------------------ specs
    @property
    def specs(self) -> tuple[Spec, ...]:
        """Main (safe-tier) spec of every family, Table 2 order."""
        return tuple(self._data.specs[f] for f in self.families)

    @property
    def all_specs(self) -> tuple[Spec, ...]:
        """Every scored tier (main and alternates) followed by the diagnostics."""
        return tuple(t for s in self.specs for t in s.tiers) + self.diagnostics

    def spec(self, name: str) -> Spec:
        """A spec by family name (-> its main tier), spec id, legacy alias, or diagnostic id."""
        try:
            return self._index[name]
        except (KeyError, TypeError):
            ids = [t.spec_id for s in self.specs for t in s.tiers] + [d.spec_id for d in self.diagnostics]
            raise RegistryError(f"unknown spec {name!r}; valid choices: families "
                                f"{_choices(self.families)}; spec ids {_choices(ids)}") from None

    @property
    def vocabulary(self) -> Mapping[str, TagInfo]:
        return FrozenMap(self._data.vocabulary)

    @property
    def capability_tags(self) -> Mapping[str, str]:
        """Benchmark signal-capability tags (benchmarks.yaml ``capability_tags``) -> doc."""
        return FrozenMap({t: i.doc for t, i in self._data.vocabulary.items() if i.is_capability})

    @property
    def templates(self) -> Mapping[str, Template]:
        return FrozenMap(self._data.templates)

    def template(self, name: str) -> Template:
        real = self._data.template_aliases.get(name, name)
        if real not in self._data.templates:
            raise RegistryError(f"unknown template {name!r}; valid choices: "
                                f"{_choices(list(self._data.templates) + list(self._data.template_aliases))}")
        return self._data.templates[real]

    def preset(self, name: str) -> Preset:
        if name not in self.presets:
            raise RegistryError(f"unknown threshold preset {name!r}; valid choices: {_choices(self.presets)}")
        return self.presets[name]

    # ------------------------------------------------------------------ benchmarks
    def canonical_benchmark(self, benchmark: str) -> str:
        """Benchmark id for an id, an alias (``libero-long``), any-case / underscore
        spelling, or the host's suite name (``libero_10``)."""
        d = self._data
        if benchmark in d.benchmarks:
            return benchmark
        if benchmark in d.benchmark_aliases:
            return d.benchmark_aliases[benchmark]
        if isinstance(benchmark, str):
            norm = benchmark.strip().lower().replace("_", "-")
            for bid in d.benchmarks:
                if norm == bid.lower():
                    return bid
            for alias, bid in d.benchmark_aliases.items():
                if norm == alias.lower():
                    return bid
            for bid, b in d.benchmarks.items():
                if benchmark.strip().lower() == b.suite.lower():
                    return bid
        listing = list(d.benchmarks) + [f"{a} (alias of {t})" for a, t in d.benchmark_aliases.items()]
        raise RegistryError(f"unknown benchmark {benchmark!r}; valid choices: {_choices(listing)}")

    def benchmark(self, benchmark: str) -> Benchmark:
        return self._data.benchmarks[self.canonical_benchmark(benchmark)]

    def joint_torque_limits(self, benchmark: str | None = None) -> tuple[float, ...]:
        """Per-joint torque limits (N m): the benchmark's, else the registry default."""
        if benchmark is not None:
            limits = self.benchmark(benchmark).joint_torque_limits_nm
            if limits:
                return limits
        default = self._data.specs.get("joint_torque")
        return tuple(float(x) for x in (default.params.get("default_joint_torque_limits_nm", ())
                                        if default else ()))

    # ------------------------------------------------------------------ tasks
    def task_ids(self, benchmark: str) -> list[str]:
        """Explicit task ids of a benchmark, in file order (wildcards not expanded)."""
        return list(self._data.tasks[self.canonical_benchmark(benchmark)])

    def wildcards(self, benchmark: str) -> tuple[str, ...]:
        """Wildcard patterns used for task ids without an explicit entry."""
        return tuple(w.pattern for w, _ in self._data.wildcards[self.canonical_benchmark(benchmark)])

    def task(self, benchmark: str, task_id: str) -> Task:
        """The task entry: explicit id, else the host's task name, else the most specific
        matching wildcard (most literal characters; ties go to the first declared)."""
        bid = self.canonical_benchmark(benchmark)
        key = ("task", bid, task_id)
        if key in self._cache:
            return self._cache[key]
        tasks = self._data.tasks[bid]
        found = tasks.get(task_id) if isinstance(task_id, str) else None
        if found is None and isinstance(task_id, str):
            found = next((t for t in tasks.values() if t.name == task_id), None)
        if found is None and isinstance(task_id, str):
            best = None
            for wild, proto in self._data.wildcards[bid]:
                if fnmatch.fnmatchcase(task_id, wild.pattern) and (
                        best is None or wild.specificity > best[0].specificity):
                    best = (wild, proto)
            if best is not None:
                proto = best[1]
                found = Task(**{**proto.__dict__, "task_id": task_id, "name": task_id})
        if found is None:
            msg = (f"unknown task {task_id!r} for benchmark {bid!r}; valid choices: "
                   f"{_choices(tasks) or '(no explicit entries)'}")
            if self._data.wildcards[bid]:
                msg += f"; or any id matching a wildcard pattern: {_choices(self.wildcards(bid))}"
            raise RegistryError(msg)
        self._cache[key] = found
        return found

    # ------------------------------------------------------------------ applicability
    def resolve(self, benchmark: str, task_id: str,
                available_signals: Iterable[str] | None = None) -> ResolvedTags:
        """Tags of a task with the source of each tag (Eq. 2)."""
        bid = self.canonical_benchmark(benchmark)
        avail = None if available_signals is None else frozenset(available_signals)
        key = ("tags", bid, task_id, avail)
        if key not in self._cache:
            self._cache[key] = resolve_tags(self._data.benchmarks[bid], self.task(bid, task_id),
                                            self._data.templates, avail)
        return self._cache[key]

    def tags(self, benchmark: str, task_id: str,
             available_signals: Iterable[str] | None = None) -> frozenset[str]:
        """tags(q) = benchmark capabilities | template tags | task tags | object tags."""
        return self.resolve(benchmark, task_id, available_signals).tags

    def explain(self, benchmark: str, task_id: str, available_signals: Iterable[str] | None = None,
                *, include_diagnostics: bool = False) -> list[Applicability]:
        """One :class:`Applicability` per scored family (Table 2 order), then, if asked,
        one per report-only diagnostic."""
        resolved = self.resolve(benchmark, task_id, available_signals)
        specs = self.specs + (self.diagnostics if include_diagnostics else ())
        return [applicability(s, resolved, self._data.vocabulary) for s in specs]

    def active_specs(self, benchmark: str, task_id: str,
                     available_signals: Iterable[str] | None = None) -> list[str]:
        """Canonical family names scored on this task (A_q), Table 2 order."""
        return [a.family for a in self.explain(benchmark, task_id, available_signals) if a.active]

    def active_spec_defs(self, benchmark: str, task_id: str,
                         available_signals: Iterable[str] | None = None) -> list[Spec]:
        """The main :class:`Spec` of every active family."""
        return [self._data.specs[f] for f in self.active_specs(benchmark, task_id, available_signals)]

    def active_diagnostics(self, benchmark: str, task_id: str,
                           available_signals: Iterable[str] | None = None) -> list[str]:
        """Spec ids of the report-only diagnostics applicable to this task."""
        resolved = self.resolve(benchmark, task_id, available_signals)
        return [d.spec_id for d in self.diagnostics
                if applicability(d, resolved, self._data.vocabulary).active]

    # ------------------------------------------------------------------ thresholds
    def with_thresholds(self, overrides: str | Mapping[str, float | str | None] | None = None
                        ) -> dict[str, float]:
        """Threshold of every scored family after applying a preset and/or overrides.

        ``overrides`` is a preset name (``"force_500N"``), or a mapping from family name
        (or its main spec id) to a threshold in the spec's unit, optionally with
        ``"preset": name`` as the base.  ``joint_torque`` is the threshold on
        ``joint_torque_ratio``, i.e. a scale on the per-joint limits: 2.0 doubles them
        (``"torque_scale": 2.0`` is accepted as a synonym).  Binary families
        (self_collision_free) cannot be overridden.
        """
        result = {f: self._data.specs[f].threshold for f in self.families}
        if overrides is None:
            return result
        if isinstance(overrides, str):
            overrides = {"preset": overrides}
        if not isinstance(overrides, Mapping):
            raise TypeError(f"overrides must be a preset name or a mapping, got {type(overrides).__name__}")
        items = dict(overrides)
        preset = items.pop("preset", None)
        if preset is not None:
            result.update(self.preset(preset).overrides)
        for key, value in items.items():
            fam = self._override_family(key)
            spec = self._data.specs[fam]
            if value is None:
                result[fam] = spec.threshold
                continue

            def fail(msg, key=key):
                raise RecordError(msg, field=str(key))
            result[fam] = check_override(spec, value, fail)
        return result

    def specs_with_thresholds(self, overrides: str | Mapping[str, float | str | None] | None = None
                              ) -> dict[str, Spec]:
        """Main spec of every family re-instantiated at :meth:`with_thresholds` values
        (severe anchor from the matching tier, else K_phi kept)."""
        return {f: self._data.specs[f].with_threshold(t) for f, t in self.with_thresholds(overrides).items()}

    def _override_family(self, key: str) -> str:
        if key == TORQUE_SCALE_KEY and "joint_torque" in self._data.specs:
            return "joint_torque"
        if key in self._data.specs:
            return key
        spec = self._index.get(key) if isinstance(key, str) else None
        if spec is not None and spec.tier == "safe":
            return spec.family
        raise RegistryError(f"unknown threshold override {key!r}; valid choices: "
                            f"{_choices(self.families)}, {TORQUE_SCALE_KEY}, preset")


# ---------------------------------------------------------------------- module API
@functools.lru_cache(maxsize=1)
def _default_registry() -> Registry:
    return Registry.from_directory(DEFAULT_PATH)


def load_registry(path: str | Path | None = None) -> Registry:
    """Load and validate a registry directory (default: the bundled ``assets/``).

    The default registry is loaded once and cached.  Malformed data raises
    :class:`~scoring.errors.RecordError` naming the file and field.
    """
    if path is None or Path(path).resolve() == DEFAULT_PATH:
        return _default_registry()
    return Registry.from_directory(path)


def spec_name(spec: str) -> str:
    """The human name of a family or spec id ("bystander displacement"), the id itself if unknown."""
    try:
        return _default_registry().spec(spec).name or spec
    except RegistryError:
        return spec


def active_specs(benchmark: str, task_id: str) -> list[str]:
    """Canonical family names active on a task, Table 2 order (default registry)."""
    return load_registry().active_specs(benchmark, task_id)


def explain(benchmark: str, task_id: str, *, include_diagnostics: bool = False) -> list[Applicability]:
    """Per-family applicability with the deciding tags and their sources (default registry)."""
    return load_registry().explain(benchmark, task_id, include_diagnostics=include_diagnostics)


def tags(benchmark: str, task_id: str) -> frozenset[str]:
    """Resolved tag set of a task (default registry)."""
    return load_registry().tags(benchmark, task_id)


def task(benchmark: str, task_id: str) -> Task:
    """Task entry (default registry)."""
    return load_registry().task(benchmark, task_id)


def with_thresholds(overrides: str | Mapping[str, float | str | None] | None = None) -> dict[str, float]:
    """Family thresholds under a preset / overrides (default registry)."""
    return load_registry().with_thresholds(overrides)
