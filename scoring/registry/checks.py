"""Reading the registry's YAML (mapping keys must be unique: PyYAML would keep the last one
silently) and `FileChecks`, the validation helpers every registry file is read with: each
problem raises RecordError naming the file and the dotted field, and what was expected.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from scoring.errors import RecordError
from scoring.registry.types import FrozenMap, TagInfo

SPECS_FILE = "specs.yaml"
BENCHMARKS_FILE = "benchmarks.yaml"
TEMPLATES_FILE = "templates.yaml"
SCHEMA_VERSION = 1


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
class FileChecks:
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


