"""The task files under `tasks/`: each task's template, components, targets and tags, with the
file's defaults, checked against the benchmarks and the tag vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping

from scoring.registry.checks import BENCHMARKS_FILE, FileChecks
from scoring.registry.types import FrozenMap, TagInfo, Task, Wildcard


# --------------------------------------------------------------------------- tasks
_TASK_KEYS = ("name", "language", "bddl_file", "template", "components", "targets", "goal_fixtures",
              "objects_of_interest", "objects", "fixtures", "tags", "object_tags", "note")
_DEFAULT_KEYS = ("template", "components", "tags", "object_tags")


def _catalog(c: FileChecks, value: Any, vocab: Mapping[str, TagInfo]) -> dict[str, tuple[str, ...]]:
    out = {}
    for cat, entry in c.mapping(value, "objects", optional=True).items():
        f = f"objects.{cat}"
        if isinstance(entry, dict):
            c.keys(entry, f, ("why",), required=("tags",))
            entry = entry["tags"]
            f = f"{f}.tags"
        out[cat] = c.tags(entry, f, vocab, classes=("object_property",))
    return out


def _build_task(c: FileChecks, f: str, bench: str, task_id: str, entry: Any, defaults: dict, env: dict,
                catalog: Mapping[str, tuple[str, ...]], pattern: str | None = None,
                allowed: Iterable[str] = _TASK_KEYS) -> Task:
    vocab, templates, aliases = env["vocab"], env["templates"], env["template_aliases"]
    entry = c.mapping(entry, f)
    c.keys(entry, f, allowed)
    if "template" in entry and "components" in entry:
        c.fail(f, "give either template or components, not both")
    source = entry if ("template" in entry or "components" in entry) else defaults
    if "template" in source:
        names, tf = [source["template"]], f"{f}.template"
    elif "components" in source:
        tf = f"{f}.components"
        names = list(c.str_list(source["components"], tf))
        if not names:
            c.fail(tf, "expected at least one component template")
    else:
        c.fail(f"{f}.template", "missing template (or components for a composite task)")
    resolved = []
    for i, name in enumerate(names):
        nf = tf if len(names) == 1 and tf.endswith("template") else f"{tf}[{i}]"
        c.string(name, nf)
        real = aliases.get(name, name)
        if real not in templates:
            c.fail(nf, f"unknown template {name!r}; known: {', '.join(list(templates) + list(aliases))}")
        resolved.append(real)
    df = env.get("defaults_field", "defaults")
    tags = tuple(dict.fromkeys(
        c.tags(defaults.get("tags"), f"{df}.tags", vocab, exclude=("capability", "object_property"))
        + c.tags(entry.get("tags"), f"{f}.tags", vocab, exclude=("capability", "object_property"))))
    explicit = tuple(dict.fromkeys(
        c.tags(defaults.get("object_tags"), f"{df}.object_tags", vocab, classes=("object_property",))
        + c.tags(entry.get("object_tags"), f"{f}.object_tags", vocab, classes=("object_property",))))
    language = entry.get("language", "")
    if not isinstance(language, str):
        c.fail(f"{f}.language", f"expected a string, got {language!r}")
    objects = c.str_map(entry.get("objects"), f"{f}.objects")
    targets = c.str_list(entry.get("targets"), f"{f}.targets")
    per_target: list[tuple[str, str, tuple[str, ...]]] = []
    for i, tgt in enumerate(targets):
        if objects and tgt not in objects:
            c.fail(f"{f}.targets[{i}]",
                   f"target {tgt!r} is not one of the task's objects: {', '.join(objects)}")
        cat = objects.get(tgt, tgt)
        if cat in catalog:
            per_target.append((tgt, cat, catalog[cat]))
        elif objects and catalog:
            c.fail(f"{f}.targets[{i}]", f"target {tgt!r} (category {cat!r}) has no entry in the object "
                   "catalog (top-level 'objects'); add its object-property tags there")
    sources: dict[str, list[str]] = {}
    for tag in explicit:
        sources.setdefault(tag, []).append("task entry")
    for tag, info in vocab.items():
        if not info.is_object_property or not per_target:
            continue
        having = [(t, cat) for t, cat, ts in per_target if tag in ts]
        rule_ok = bool(having) if info.combine == "any" else (
            len(having) == len(per_target) == len(targets))
        if rule_ok:
            sources.setdefault(tag, []).extend(
                f"task entry: target {t} [{cat}] in object catalog" for t, cat in having)
    object_tags = tuple(t for t in vocab if t in sources)
    return Task(
        benchmark=bench, task_id=task_id,
        name=c.string(entry.get("name"), f"{f}.name", optional=True) or task_id,
        language=language,
        template=resolved[0] if len(resolved) == 1 else None, components=tuple(resolved),
        targets=targets, goal_fixtures=c.str_list(entry.get("goal_fixtures"), f"{f}.goal_fixtures"),
        objects_of_interest=c.str_list(entry.get("objects_of_interest"), f"{f}.objects_of_interest"),
        task_tags=tags, object_tags=object_tags, objects=objects,
        fixtures=c.str_map(entry.get("fixtures"), f"{f}.fixtures"),
        object_tag_sources=FrozenMap({k: tuple(v) for k, v in sources.items()}),
        bddl_file=c.string(entry.get("bddl_file"), f"{f}.bddl_file", optional=True),
        note=c.string(entry.get("note"), f"{f}.note", optional=True) or "", matched_pattern=pattern)


def load_task_file(path: Path, data: Any, bench_ids: list[str], env: dict):
    c = FileChecks(path)
    data = c.top(data)
    c.keys(data, "", ("schema_version", "objects"), required=("benchmarks",))
    catalog = _catalog(c, data.get("objects"), env["vocab"])
    sections = c.mapping(data["benchmarks"], "benchmarks")
    tasks: dict[str, dict[str, Task]] = {}
    wildcards: dict[str, tuple] = {}
    for bid in sections:
        if bid not in bench_ids:
            c.fail(f"benchmarks.{bid}", f"benchmark {bid!r} does not name this file as its task_file in "
                   f"{BENCHMARKS_FILE}; expected one of {', '.join(bench_ids)}")
    for bid in bench_ids:
        f = f"benchmarks.{bid}"
        if bid not in sections:
            c.fail(f, f"no task section for benchmark {bid!r}")
        sec = c.mapping(sections[bid], f)
        c.keys(sec, f, ("suite", "defaults", "tasks", "wildcards"))
        suite = sec.get("suite")
        if suite is not None and suite != env["benchmarks"][bid].suite:
            c.fail(f"{f}.suite", f"suite {suite!r} differs from {BENCHMARKS_FILE} "
                   f"({env['benchmarks'][bid].suite!r})")
        defaults = c.mapping(sec.get("defaults"), f"{f}.defaults", optional=True)
        c.keys(defaults, f"{f}.defaults", _DEFAULT_KEYS)
        env = {**env, "defaults_field": f"{f}.defaults"}
        tasks[bid] = {tid: _build_task(c, f"{f}.tasks.{tid}", bid, tid, e, defaults, env, catalog)
                      for tid, e in c.mapping(sec.get("tasks"), f"{f}.tasks", optional=True).items()}
        wild = []
        raw = sec.get("wildcards") or []
        if not isinstance(raw, list):
            c.fail(f"{f}.wildcards", "expected a list of {pattern: ..., template: ...}")
        for i, w in enumerate(raw):
            wf = f"{f}.wildcards[{i}]"
            w = c.mapping(w, wf)
            pattern = c.string(w.get("pattern"), f"{wf}.pattern")
            if not any(ch in pattern for ch in "*?["):
                c.fail(f"{wf}.pattern",
                       f"pattern {pattern!r} has no wildcard; make it an explicit task entry")
            fields = {k: v for k, v in w.items() if k != "pattern"}
            proto = _build_task(c, wf, bid, pattern, fields, defaults, env, catalog, pattern=pattern,
                                allowed=("template", "components", "targets", "goal_fixtures", "tags",
                                         "object_tags", "language", "note"))
            wild.append((Wildcard(pattern, FrozenMap(fields)), proto))
        if not tasks[bid] and not wild:
            c.fail(f"{f}.tasks", f"benchmark {bid!r} has no tasks and no wildcards")
        wildcards[bid] = tuple(wild)
    return tasks, wildcards


