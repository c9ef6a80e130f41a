"""Read and validate the registry YAML files (``specs.yaml``, ``benchmarks.yaml``,
``templates.yaml`` and the task files under ``tasks/``).

Every problem raises :class:`~scoring.errors.RecordError` naming the file and the field
(dotted path, e.g. ``families.max_contact_force.op``) and saying what was expected.
The specs and the tasks are read by load_specs.py and load_tasks.py, through the
helpers of checks.py; this module reads benchmarks and templates and puts it together.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from scoring.errors import RecordError
from scoring.registry.checks import (BENCHMARKS_FILE, SCHEMA_VERSION, SPECS_FILE, TEMPLATES_FILE,  # noqa: F401
                                     FileChecks, read_yaml)
from scoring.registry.load_specs import check_override, load_specs  # noqa: F401  (check_override: lookup's)
from scoring.registry.load_tasks import load_task_file
from scoring.registry.types import Benchmark, Preset, Spec, TagInfo, Task, Template, Wildcard

_COMBINE = ("any", "all")


# --------------------------------------------------------------------------- result
@dataclass
class Loaded:
    """Everything read from one registry directory (consumed by Registry)."""

    root: Path
    families: tuple[str, ...]
    specs: dict[str, Spec]                       # family -> main spec (alternates attached)
    diagnostics: tuple[Spec, ...]
    presets: dict[str, Preset]
    vocabulary: dict[str, TagInfo]
    benchmarks: dict[str, Benchmark]
    benchmark_aliases: dict[str, str]
    templates: dict[str, Template]
    template_aliases: dict[str, str]
    tasks: dict[str, dict[str, Task]]            # benchmark -> task id -> Task
    wildcards: dict[str, tuple[tuple[Wildcard, Task], ...]]
    hash: str


# --------------------------------------------------------------------------- benchmarks
def _load_benchmarks(path: Path, data: Any):
    c = FileChecks(path)
    data = c.top(data)
    c.keys(data, "", ("schema_version", "capability_tags", "benchmarks", "aliases"),
           required=("capability_tags", "benchmarks"))
    vocab: dict[str, TagInfo] = {}
    for tag, doc in c.mapping(data["capability_tags"], "capability_tags").items():
        vocab[tag] = TagInfo(tag, "capability", doc=c.string(doc, f"capability_tags.{tag}"))
    benchmarks: dict[str, Benchmark] = {}
    for bid, b in c.mapping(data["benchmarks"], "benchmarks").items():
        f = f"benchmarks.{bid}"
        b = c.mapping(b, f)
        c.keys(b, f, ("robot", "max_steps", "control_dt", "joint_torque_limits_nm"),
               required=("host", "suite", "task_file", "capabilities"))
        caps = c.tags(b["capabilities"], f"{f}.capabilities", vocab, classes=("capability",))
        max_steps = b.get("max_steps")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int)
                                      or max_steps <= 0):
            c.fail(f"{f}.max_steps", f"expected a positive integer or null, got {max_steps!r}")
        limits = b.get("joint_torque_limits_nm")
        if limits is not None:
            if not isinstance(limits, list) or not limits:
                c.fail(f"{f}.joint_torque_limits_nm", "expected a non-empty list of positive numbers")
            limits = tuple(c.number(x, f"{f}.joint_torque_limits_nm[{i}]", positive=True)
                           for i, x in enumerate(limits))
        benchmarks[bid] = Benchmark(
            id=bid, host=c.string(b["host"], f"{f}.host"), suite=c.string(b["suite"], f"{f}.suite"),
            capabilities=frozenset(caps), task_file=c.string(b["task_file"], f"{f}.task_file"),
            robot=c.string(b.get("robot"), f"{f}.robot", optional=True) or "",
            max_steps=max_steps,
            control_dt=c.number(b.get("control_dt", 0.05), f"{f}.control_dt", positive=True),
            joint_torque_limits_nm=limits or ())
    if not benchmarks:
        c.fail("benchmarks", "no benchmark declared")
    aliases: dict[str, str] = {}
    for alias, target in c.mapping(data.get("aliases"), "aliases", optional=True).items():
        c.string(target, f"aliases.{alias}")
        if target not in benchmarks:
            c.fail(f"aliases.{alias}",
                   f"alias of unknown benchmark {target!r}; known: {', '.join(benchmarks)}")
        if alias in benchmarks:
            c.fail(f"aliases.{alias}", f"alias {alias!r} collides with a benchmark id")
        aliases[alias] = target
    for bid, bench in list(benchmarks.items()):
        mine = tuple(a for a, t in aliases.items() if t == bid)
        if mine:
            benchmarks[bid] = Benchmark(**{**bench.__dict__, "aliases": mine})
    return vocab, benchmarks, aliases


# --------------------------------------------------------------------------- templates
def _load_templates(path: Path, data: Any, vocab: dict[str, TagInfo]):
    c = FileChecks(path)
    data = c.top(data)
    c.keys(data, "", ("schema_version", "tag_vocabulary", "templates", "aliases"),
           required=("tag_vocabulary", "templates"))
    pending_absence: list[tuple[str, str, tuple[str, ...]]] = []
    for cls, tags in c.mapping(data["tag_vocabulary"], "tag_vocabulary").items():
        if cls == "capability":
            c.fail(f"tag_vocabulary.{cls}", f"capability tags belong in {BENCHMARKS_FILE} capability_tags")
        for tag, spec in c.mapping(tags, f"tag_vocabulary.{cls}").items():
            f = f"tag_vocabulary.{cls}.{tag}"
            if tag in vocab:
                c.fail(f, f"tag {tag!r} is declared twice (already a {vocab[tag].tag_class} tag)")
            combine, absence = None, ()
            if isinstance(spec, dict):
                c.keys(spec, f, ("combine", "explains_absence_of"), required=("doc",))
                doc = c.string(spec["doc"], f"{f}.doc")
                combine = spec.get("combine")
                if combine is not None and (cls != "object_property" or combine not in _COMBINE):
                    c.fail(f"{f}.combine", f"combine applies to object_property tags and must be one of "
                           f"{', '.join(_COMBINE)}; got {combine!r}")
                absence = c.str_list(spec.get("explains_absence_of"), f"{f}.explains_absence_of")
                pending_absence.append((f, tag, absence))
            else:
                doc = c.string(spec, f)
            if cls == "object_property" and combine is None:
                combine = "any"
            vocab[tag] = TagInfo(tag, cls, doc=doc, combine=combine, explains_absence_of=absence)
    for f, tag, absence in pending_absence:
        c.tags(list(absence), f"{f}.explains_absence_of", vocab)
    templates: dict[str, Template] = {}
    for name, t in c.mapping(data["templates"], "templates").items():
        f = f"templates.{name}"
        t = c.mapping(t, f)
        c.keys(t, f, ("doc",), required=("tags",))
        tags = c.tags(t["tags"], f"{f}.tags", vocab, exclude=("capability", "object_property"))
        templates[name] = Template(name, frozenset(tags), doc=c.string(t.get("doc"), f"{f}.doc",
                                                                        optional=True) or "")
    aliases: dict[str, str] = {}
    for alias, target in c.mapping(data.get("aliases"), "aliases", optional=True).items():
        if target not in templates:
            c.fail(f"aliases.{alias}", f"alias of unknown template {target!r}; known: {', '.join(templates)}")
        if alias in templates:
            c.fail(f"aliases.{alias}", f"alias {alias!r} collides with a template name")
        aliases[alias] = target
    return templates, aliases


# --------------------------------------------------------------------------- entry point
def canonical_hash(contents: Mapping[str, Any]) -> str:
    blob = json.dumps(contents, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _check_rules_reachable(path: Path, specs, diagnostics, benchmarks, templates, tasks, wildcards):
    """A required tag that no benchmark, template, task or object provides makes its
    spec dead: that is a registry mistake, not a quiet never-active spec."""
    provided: set[str] = set()
    for b in benchmarks.values():
        provided |= b.capabilities
    for t in templates.values():
        provided |= t.tags
    every = [t for ts in tasks.values() for t in ts.values()]
    every += [proto for ws in wildcards.values() for _, proto in ws]
    for t in every:
        provided |= set(t.task_tags) | set(t.object_tags)
    c = FileChecks(path)
    for spec in list(specs.values()) + list(diagnostics):
        base = f"families.{spec.family}" if spec.scored else f"diagnostics.{spec.spec_id}"
        for i, tag in enumerate(spec.requires_all):
            if tag not in provided:
                c.fail(f"{base}.requires_all[{i}]", f"required tag {tag!r} is provided by no benchmark, "
                       "template, task or object: the spec could never be active")


def load_directory(root: Path) -> Loaded:
    root = Path(root)
    if not root.is_dir():
        raise RecordError("registry path is not a directory (expected specs.yaml, benchmarks.yaml, "
                          "templates.yaml, tasks/)", file=str(root))
    raw = {name: read_yaml(root / name) for name in (BENCHMARKS_FILE, TEMPLATES_FILE, SPECS_FILE)}
    vocab, benchmarks, bench_aliases = _load_benchmarks(root / BENCHMARKS_FILE, raw[BENCHMARKS_FILE])
    templates, template_aliases = _load_templates(root / TEMPLATES_FILE, raw[TEMPLATES_FILE], vocab)
    families, specs, diagnostics, presets = load_specs(root / SPECS_FILE, raw[SPECS_FILE], vocab)
    env = dict(vocab=vocab, templates=templates, template_aliases=template_aliases, benchmarks=benchmarks)
    by_file: dict[str, list[str]] = {}
    for bid, b in benchmarks.items():
        by_file.setdefault(b.task_file, []).append(bid)
    tasks: dict[str, dict[str, Task]] = {}
    wildcards: dict[str, tuple] = {}
    for rel, bids in by_file.items():
        path = root / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise RecordError(f"task_file {rel!r} must be a relative path inside the registry directory",
                              file=str(root / BENCHMARKS_FILE), field=f"benchmarks.{bids[0]}.task_file")
        raw[Path(rel).as_posix()] = read_yaml(path)
        t, w = load_task_file(path, raw[Path(rel).as_posix()], bids, env)
        tasks.update(t)
        wildcards.update(w)
    _check_rules_reachable(root / SPECS_FILE, specs, diagnostics, benchmarks, templates, tasks, wildcards)
    return Loaded(root=root, families=families, specs=specs, diagnostics=diagnostics, presets=presets,
                  vocabulary=vocab, benchmarks=benchmarks, benchmark_aliases=bench_aliases,
                  templates=templates, template_aliases=template_aliases,
                  tasks={b: tasks[b] for b in benchmarks}, wildcards={b: wildcards[b] for b in benchmarks},
                  hash=canonical_hash(raw))
