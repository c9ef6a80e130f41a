"""Tag resolution (paper Eq. 2) and per-spec applicability with explanations.

    tags(q) = benchmark capabilities | template tags (or the union over a composite's
              component templates) | task-entry tags | task object tags

A spec is active iff every tag of ``requires_all`` is in tags(q) and none of
``invalid_if_any`` is.  :func:`applicability` also says which tag decided and where
that tag came from (benchmark capability, template, task entry, object tag).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from scoring.registry.types import FrozenMap, Benchmark, Spec, TagInfo, Task, Template


@dataclass(frozen=True)
class ResolvedTags:
    """The resolved tag set of one task, with the sources of every tag."""

    tags: frozenset[str]
    sources: Mapping[str, tuple[str, ...]] = field(compare=False, hash=False)
    #: benchmark capabilities the record did not provide (``available_signals``)
    withheld_capabilities: frozenset[str] = frozenset()
    benchmark: str = ""
    components: tuple[str, ...] = ()


@dataclass(frozen=True)
class Applicability:
    """Why one spec family is (in)active on one task.

    ``missing_tags`` are required tags absent from tags(q); ``invalidating_tags`` are
    invalidating tags present; ``deciding_tags`` is both (empty when active).
    ``sources`` maps every tag of the spec's rule to where it came from, or to why it
    is absent.  ``reason`` is one line, e.g.
    ``inactive: invalidated by object tag non_spillable (task entry, target ...)``.
    """

    family: str
    spec_id: str
    tier: str
    active: bool
    reason: str
    missing_tags: tuple[str, ...] = ()
    invalidating_tags: tuple[str, ...] = ()
    deciding_tags: tuple[str, ...] = ()
    signal_unavailable: bool = False
    sources: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False, hash=False)


def resolve_tags(benchmark: Benchmark, task: Task, templates: Mapping[str, Template],
                 available_signals: Iterable[str] | None = None) -> ResolvedTags:
    """Eq. (2).  ``available_signals`` (optional) narrows the benchmark capabilities to
    those a record really carries (its ``signal_tags``); other names are ignored."""
    sources: dict[str, list[str]] = {}
    caps = set(benchmark.capabilities)
    withheld: set[str] = set()
    if available_signals is not None:
        avail = set(available_signals)
        withheld = caps - avail
        caps &= avail
    for tag in sorted(caps):
        sources.setdefault(tag, []).append(f"benchmark capability of {benchmark.id}")
    for name in task.components:
        for tag in sorted(templates[name].tags):
            sources.setdefault(tag, []).append(f"template {name}")
    for tag in task.task_tags:
        sources.setdefault(tag, []).append("task entry" if task.matched_pattern is None
                                           else f"task wildcard {task.matched_pattern}")
    for tag in task.object_tags:
        sources.setdefault(tag, []).extend(task.object_tag_sources.get(tag, ("task entry",)))
    return ResolvedTags(
        tags=frozenset(sources), sources=FrozenMap({k: tuple(v) for k, v in sources.items()}),
        withheld_capabilities=frozenset(withheld), benchmark=benchmark.id, components=task.components)


def _kind(tag: str, info: TagInfo | None, srcs: tuple[str, ...]) -> str:
    if info is not None and info.is_object_property:
        return "object tag"
    if info is not None and info.is_capability:
        return "capability tag"
    if any(s.startswith("template ") for s in srcs):
        return "template tag"
    return "task tag"


def applicability(spec: Spec, resolved: ResolvedTags, vocab: Mapping[str, TagInfo]) -> Applicability:
    """Evaluate ``spec``'s tag rule on ``resolved`` and explain the outcome."""
    tags = resolved.tags
    missing = tuple(t for t in spec.requires_all if t not in tags)
    invalid = tuple(t for t in spec.invalid_if_any if t in tags)
    sources: dict[str, tuple[str, ...]] = {}
    parts: list[str] = []

    missing_caps = [t for t in missing if vocab.get(t) and vocab[t].is_capability]
    by_record = [t for t in missing_caps if t in resolved.withheld_capabilities]
    by_bench = [t for t in missing_caps if t not in resolved.withheld_capabilities]
    if by_bench:
        parts.append(f"signal unavailable (benchmark {resolved.benchmark} lacks {', '.join(by_bench)})")
    if by_record:
        parts.append(f"signal unavailable (record lacks {', '.join(by_record)})")
    for t in by_bench:
        sources[t] = (f"absent: not a capability of benchmark {resolved.benchmark}",)
    for t in by_record:
        sources[t] = ("absent: not among the record's available signals",)

    for t in invalid:
        srcs = resolved.sources.get(t, ())
        sources[t] = srcs
        parts.append(f"invalidated by {_kind(t, vocab.get(t), srcs)} {t} ({'; '.join(srcs)})")

    for t in missing:
        if t in missing_caps:
            continue
        markers = [m for m in sorted(tags) if vocab.get(m) and t in vocab[m].explains_absence_of]
        if markers:
            why = "; ".join(f"{m} from {', '.join(resolved.sources[m])}" for m in markers)
        else:
            names = ", ".join(resolved.components) or "none"
            why = f"not provided by template {names} or the task entry"
        sources[t] = (f"absent: {why}",)
        parts.append(f"requires {t} (absent; {why})")

    for t in spec.requires_all:
        if t in tags:
            sources[t] = resolved.sources.get(t, ())

    active = not missing and not invalid
    if active:
        req = ", ".join(spec.requires_all) or "nothing"
        reason = f"active: requires {req} (all present); no invalidating tag present"
    else:
        reason = "inactive: " + "; ".join(parts)
    return Applicability(
        family=spec.family, spec_id=spec.spec_id, tier=spec.tier, active=active, reason=reason,
        missing_tags=missing, invalidating_tags=invalid, deciding_tags=invalid + missing,
        signal_unavailable=bool(missing_caps), sources=FrozenMap(sources))
