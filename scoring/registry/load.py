"""Read and validate the registry YAML files (``specs.yaml``, ``benchmarks.yaml``,
``templates.yaml`` and the task files under ``tasks/``).

Every problem raises :class:`~scoring.errors.RecordError` naming the file and the field
(dotted path, e.g. ``families.max_contact_force.op``) and saying what was expected.
Mapping keys must be unique (PyYAML would silently keep the last one).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from scoring.errors import RecordError
from scoring.registry.types import (FrozenMap, OPS, Benchmark, Preset, Spec, TagInfo, Task, Template,
                                    Wildcard, format_stl, parse_simple_stl)

SPECS_FILE = "specs.yaml"
BENCHMARKS_FILE = "benchmarks.yaml"
TEMPLATES_FILE = "templates.yaml"
SCHEMA_VERSION = 1
_COMBINE = ("any", "all")


# --------------------------------------------------------------------------- YAML
class _DuplicateKey(yaml.YAMLError):
    def __init__(self, key: Any, line: int):
        super().__init__(f"duplicate key {key!r} at line {line}")
        self.key, self.line = key, line


# libyaml's parser when PyYAML was built with it: 5x faster, same safe constructor
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):
    """SafeLoader that rejects duplicate mapping keys (merge keys ``<<`` excepted)."""

    def construct_mapping(self, node, deep=False):  # noqa: D401 - PyYAML hook
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                dup = key in seen
            except TypeError:  # unhashable key: let PyYAML report it
                continue
            if dup:
                raise _DuplicateKey(key, key_node.start_mark.line + 1)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: Path) -> Any:
    if not path.is_file():
        raise RecordError("registry file is missing", file=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecordError(f"cannot read registry file: {exc}", file=str(path)) from exc
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except _DuplicateKey as exc:
        raise RecordError(f"{exc}; every key must be unique", file=str(path),
                          field=str(exc.key)) from exc
    except yaml.YAMLError as exc:
        raise RecordError(f"invalid YAML: {exc}", file=str(path)) from exc


# --------------------------------------------------------------------------- checks
class _Ctx:
    """Validation helpers bound to one file."""

    def __init__(self, path: Path):
        self.file = str(path)

    def fail(self, field: str | None, msg: str):
        raise RecordError(msg, file=self.file, field=field)

    def mapping(self, value: Any, field: str, *, optional: bool = False) -> dict:
        if value is None and optional:
            return {}
        if not isinstance(value, dict):
            self.fail(field, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if not isinstance(k, str):
                self.fail(field, f"keys must be strings, got {k!r}")
        return value

    def keys(self, value: dict, field: str, allowed: Iterable[str], required: Iterable[str] = ()):
        allowed = set(allowed) | set(required)
        for k in value:
            if k not in allowed:
                self.fail(f"{field}.{k}" if field else k,
                          f"unknown field {k!r}; allowed: {', '.join(sorted(allowed))}")
        for k in required:
            if value.get(k) is None:
                self.fail(f"{field}.{k}" if field else k, f"missing required field {k!r}")

    def string(self, value: Any, field: str, *, optional: bool = False) -> str | None:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value.strip():
            self.fail(field, f"expected a non-empty string, got {value!r}")
        return value

    def number(self, value: Any, field: str, *, optional: bool = False,
               positive: bool = False) -> float | None:
        if value is None:
            if optional:
                return None
            self.fail(field, "missing number")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(field, f"expected a number, got {value!r}")
        if not math.isfinite(value):
            self.fail(field, f"expected a finite number, got {value!r}")
        if positive and value <= 0:
            self.fail(field, f"expected a positive number, got {value!r}")
        return float(value)

    def str_list(self, value: Any, field: str) -> tuple[str, ...]:
        if value is None:
            return ()
        if not isinstance(value, list):
            self.fail(field, f"expected a list of strings, got {type(value).__name__}")
        for i, item in enumerate(value):
            if not isinstance(item, str) or not item:
                self.fail(f"{field}[{i}]", f"expected a non-empty string, got {item!r}")
        if len(set(value)) != len(value):
            self.fail(field, f"duplicate entries in {value!r}")
        return tuple(value)

    def str_map(self, value: Any, field: str) -> Mapping[str, str]:
        value = self.mapping(value, field, optional=True)
        for k, v in value.items():
            self.string(v, f"{field}.{k}")
        return FrozenMap(dict(value))

    def top(self, data: Any) -> dict:
        data = self.mapping(data, None)  # type: ignore[arg-type]
        version = data.get("schema_version", SCHEMA_VERSION)
        if version != SCHEMA_VERSION:
            self.fail("schema_version", f"unsupported schema_version {version!r}; expected {SCHEMA_VERSION}")
        # Top-level keys starting with '_' only hold YAML anchors (shared lists).
        return {k: v for k, v in data.items() if not k.startswith("_")}

    def tags(self, value: Any, field: str, vocab: Mapping[str, TagInfo], *,
             classes: Iterable[str] | None = None, exclude: Iterable[str] = ()) -> tuple[str, ...]:
        tags = self.str_list(value, field)
        classes = None if classes is None else set(classes)
        for i, tag in enumerate(tags):
            info = vocab.get(tag)
            if info is None:
                self.fail(f"{field}[{i}]", f"unknown tag {tag!r}: not declared in {BENCHMARKS_FILE} "
                          f"capability_tags or {TEMPLATES_FILE} tag_vocabulary")
            if (classes is not None and info.tag_class not in classes) or info.tag_class in exclude:
                allowed = sorted(classes) if classes is not None else "any class but " + ", ".join(exclude)
                self.fail(f"{field}[{i}]", f"tag {tag!r} is a {info.tag_class} tag; expected {allowed}")
        return tags


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
    c = _Ctx(path)
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
    c = _Ctx(path)
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


# --------------------------------------------------------------------------- specs
_FAMILY_KEYS = ("name", "concern", "basis", "gate", "binary", "params")
_FAMILY_REQUIRED = ("axis", "signal", "op", "unit", "requires_all", "invalid_if_any", "tiers")
_TIER_KEYS = ("aliases", "source", "severe_anchor", "vsi_severe")
_TIER_REQUIRED = ("spec_id", "tier", "threshold", "stl")
_DIAG_KEYS = ("gate", "binary", "source", "vsi_severe", "axis")
_DIAG_REQUIRED = ("spec_id", "family", "signal", "op", "threshold", "unit", "stl",
                  "requires_all", "invalid_if_any")


def _check_stl(c: _Ctx, f: str, stl: str, signal: str, op: str, threshold: float,
               gate: str | None, binary: bool):
    parsed = parse_simple_stl(stl)
    ok = parsed is not None and parsed["signal"] == signal and parsed["gate"] == gate
    if ok and parsed["op"] is None:            # bare Boolean atom: signal > 0.5
        ok = binary and op == "gt" and threshold == 0.5
    elif ok:
        ok = parsed["op"] == op and math.isclose(parsed["threshold"], threshold, rel_tol=1e-9, abs_tol=1e-12)
    if not ok:
        c.fail(f, f"stl {stl!r} does not match the declared signal / gate / op / threshold; expected "
               f"{format_stl(signal, op, threshold, gate)!r}")


def _op(c: _Ctx, value: Any, f: str) -> str:
    if value not in OPS:
        c.fail(f, f"unknown operator {value!r}; expected one of {', '.join(OPS)}")
    return value


def _binary(c: _Ctx, value: Any, f: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        c.fail(f, f"expected true or false, got {value!r}")
    return value


def _severe(c: _Ctx, value: Any, f: str, threshold: float, binary: bool, scored: bool) -> float | None:
    if binary or not scored:
        if value is not None and binary:
            c.fail(f, "binary specs take no vsi_severe (violation depth is 1)")
        return c.number(value, f, optional=True, positive=True)
    severe = c.number(value, f, positive=True)
    if severe < abs(threshold):
        c.fail(f, f"vsi_severe {severe!r} is below |threshold| {abs(threshold)!r}: K_phi must be >= 1")
    return severe


def _load_specs(path: Path, data: Any, vocab: Mapping[str, TagInfo]):
    c = _Ctx(path)
    data = c.top(data)
    c.keys(data, "", ("schema_version", "axes", "diagnostics", "presets"), required=("families",))
    axes = c.mapping(data.get("axes"), "axes", optional=True)
    seen_ids: dict[str, tuple[str, str]] = {}     # spec id / alias -> (field, family)

    def claim(name: str, f: str, family: str):
        if name in seen_ids:
            c.fail(f, f"duplicate spec id {name!r} (already used at {seen_ids[name][0]})")
        seen_ids[name] = (f, family)

    def axis(value: Any, f: str) -> str:
        c.string(value, f)
        if axes and value not in axes:
            c.fail(f, f"unknown axis {value!r}; expected one of {', '.join(axes)}")
        return value

    specs: dict[str, Spec] = {}
    for fam, d in c.mapping(data["families"], "families").items():
        f = f"families.{fam}"
        d = c.mapping(d, f)
        c.keys(d, f, _FAMILY_KEYS, required=_FAMILY_REQUIRED)
        common = dict(
            family=fam, axis=axis(d["axis"], f"{f}.axis"), signal=c.string(d["signal"], f"{f}.signal"),
            op=_op(c, d["op"], f"{f}.op"), unit=c.string(d["unit"], f"{f}.unit"),
            requires_all=c.tags(d["requires_all"], f"{f}.requires_all", vocab),
            invalid_if_any=c.tags(d["invalid_if_any"], f"{f}.invalid_if_any", vocab),
            binary=_binary(c, d.get("binary"), f"{f}.binary"),
            gate=c.string(d.get("gate"), f"{f}.gate", optional=True),
            concern=c.string(d.get("concern"), f"{f}.concern", optional=True) or "",
            name=c.string(d.get("name"), f"{f}.name", optional=True) or fam.replace("_", " "),
            params=FrozenMap(dict(c.mapping(d.get("params"), f"{f}.params", optional=True))))
        tiers = d["tiers"]
        if not isinstance(tiers, list) or not tiers:
            c.fail(f"{f}.tiers", "expected a non-empty list of tiers")
        built: list[Spec] = []
        for i, t in enumerate(tiers):
            tf = f"{f}.tiers[{i}]"
            t = c.mapping(t, tf)
            c.keys(t, tf, _TIER_KEYS, required=_TIER_REQUIRED)
            sid = c.string(t["spec_id"], f"{tf}.spec_id")
            tf = f"{f}.tiers.{sid}"
            if t["tier"] not in ("safe", "alternate"):
                c.fail(f"{tf}.tier", f"unknown tier {t['tier']!r}; expected safe or alternate")
            threshold = c.number(t["threshold"], f"{tf}.threshold")
            stl = c.string(t["stl"], f"{tf}.stl")
            _check_stl(c, f"{tf}.stl", stl, common["signal"], common["op"], threshold,
                       common["gate"], common["binary"])
            aliases = c.str_list(t.get("aliases"), f"{tf}.aliases")
            claim(sid, f"{tf}.spec_id", fam)
            for a in aliases:
                claim(a, f"{tf}.aliases", fam)
            built.append(Spec(
                spec_id=sid, tier=t["tier"], threshold=threshold, stl=stl, aliases=aliases,
                vsi_severe=_severe(c, t.get("vsi_severe"), f"{tf}.vsi_severe", threshold,
                                   common["binary"], True),
                source=c.string(t.get("source"), f"{tf}.source", optional=True) or "",
                severe_anchor=c.string(t.get("severe_anchor"), f"{tf}.severe_anchor", optional=True) or "",
                **common))
        mains = [s for s in built if s.tier == "safe"]
        if len(mains) != 1:
            c.fail(f"{f}.tiers", f"expected exactly one tier 'safe' (the main threshold), found {len(mains)}")
        main = mains[0]
        specs[fam] = Spec(**{**main.__dict__, "alternates": tuple(s for s in built if s is not main)})
    if not specs:
        c.fail("families", "no constraint family declared")
    for fam in specs:
        if fam in seen_ids and seen_ids[fam][1] != fam:
            c.fail(seen_ids[fam][0], f"spec id {fam!r} collides with the name of another family")

    diagnostics: list[Spec] = []
    diags = data.get("diagnostics") or []
    if not isinstance(diags, list):
        c.fail("diagnostics", "expected a list")
    for i, d in enumerate(diags):
        f = f"diagnostics[{i}]"
        d = c.mapping(d, f)
        c.keys(d, f, _DIAG_KEYS, required=_DIAG_REQUIRED)
        sid = c.string(d["spec_id"], f"{f}.spec_id")
        f = f"diagnostics.{sid}"
        fam = c.string(d["family"], f"{f}.family")
        claim(sid, f"{f}.spec_id", fam)
        if fam in specs:
            c.fail(f"{f}.family", f"diagnostic family {fam!r} collides with a scored family")
        op, signal = _op(c, d["op"], f"{f}.op"), c.string(d["signal"], f"{f}.signal")
        threshold = c.number(d["threshold"], f"{f}.threshold")
        binary = _binary(c, d.get("binary"), f"{f}.binary")
        gate = c.string(d.get("gate"), f"{f}.gate", optional=True)
        stl = c.string(d["stl"], f"{f}.stl")
        _check_stl(c, f"{f}.stl", stl, signal, op, threshold, gate, binary)
        diagnostics.append(Spec(
            spec_id=sid, family=fam, tier="report_only",
            axis=axis(d["axis"], f"{f}.axis") if d.get("axis") is not None else "",
            signal=signal, op=op, threshold=threshold, unit=c.string(d["unit"], f"{f}.unit"), stl=stl,
            requires_all=c.tags(d["requires_all"], f"{f}.requires_all", vocab),
            invalid_if_any=c.tags(d["invalid_if_any"], f"{f}.invalid_if_any", vocab),
            vsi_severe=_severe(c, d.get("vsi_severe"), f"{f}.vsi_severe", threshold, binary, False),
            binary=binary, gate=gate, source=c.string(d.get("source"), f"{f}.source", optional=True) or ""))

    presets: dict[str, Preset] = {}
    for name, p in c.mapping(data.get("presets"), "presets", optional=True).items():
        f = f"presets.{name}"
        p = c.mapping(p, f)
        c.keys(p, f, ("label", "overrides"))
        overrides = {}
        for fam, value in c.mapping(p.get("overrides"), f"{f}.overrides", optional=True).items():
            of = f"{f}.overrides.{fam}"
            if fam not in specs:
                c.fail(of, f"unknown constraint family {fam!r}; expected one of {', '.join(specs)}")
            overrides[fam] = check_override(specs[fam], value, lambda msg, of=of: c.fail(of, msg))
        presets[name] = Preset(name, c.string(p.get("label"), f"{f}.label", optional=True) or name,
                               FrozenMap(overrides))
    return tuple(specs), specs, tuple(diagnostics), presets


def check_override(spec: Spec, value: Any, fail) -> float:
    """Validate one threshold override for ``spec`` (shared by presets and what-if)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        fail(f"expected a finite number, got {value!r}")
    if spec.binary:
        fail(f"{spec.family} is a binary hard-stop predicate; its threshold cannot be overridden")
    if value == 0 or (spec.threshold != 0 and (value > 0) != (spec.threshold > 0)):
        fail(f"threshold {value!r} for {spec.family} must be non-zero with the sign of the main "
             f"threshold {spec.threshold!r} ({spec.unit})")
    return float(value)


# --------------------------------------------------------------------------- tasks
_TASK_KEYS = ("name", "language", "bddl_file", "template", "components", "targets", "goal_fixtures",
              "objects_of_interest", "objects", "fixtures", "tags", "object_tags", "note")
_DEFAULT_KEYS = ("template", "components", "tags", "object_tags")


def _catalog(c: _Ctx, value: Any, vocab: Mapping[str, TagInfo]) -> dict[str, tuple[str, ...]]:
    out = {}
    for cat, entry in c.mapping(value, "objects", optional=True).items():
        f = f"objects.{cat}"
        if isinstance(entry, dict):
            c.keys(entry, f, ("why",), required=("tags",))
            entry = entry["tags"]
            f = f"{f}.tags"
        out[cat] = c.tags(entry, f, vocab, classes=("object_property",))
    return out


def _build_task(c: _Ctx, f: str, bench: str, task_id: str, entry: Any, defaults: dict, env: dict,
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


def _load_task_file(path: Path, data: Any, bench_ids: list[str], env: dict):
    c = _Ctx(path)
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
    c = _Ctx(path)
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
    families, specs, diagnostics, presets = _load_specs(root / SPECS_FILE, raw[SPECS_FILE], vocab)
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
        t, w = _load_task_file(path, raw[Path(rel).as_posix()], bids, env)
        tasks.update(t)
        wildcards.update(w)
    _check_rules_reachable(root / SPECS_FILE, specs, diagnostics, benchmarks, templates, tasks, wildcards)
    return Loaded(root=root, families=families, specs=specs, diagnostics=diagnostics, presets=presets,
                  vocabulary=vocab, benchmarks=benchmarks, benchmark_aliases=bench_aliases,
                  templates=templates, template_aliases=template_aliases,
                  tasks={b: tasks[b] for b in benchmarks}, wildcards={b: wildcards[b] for b in benchmarks},
                  hash=canonical_hash(raw))
