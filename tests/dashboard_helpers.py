"""Shared by the dashboard test modules: the synthetic-store script and AppTest checks."""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def synthetic_store_script():
    """scripts/make_synthetic_store.py as a module (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_synthetic_store", ROOT / "scripts" / "make_synthetic_store.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def build_store(out: Path, n: int, *, n_steps: int = 60, contacts_per_step: int = 6, renderable: bool) -> Path:
    return synthetic_store_script().build_store(out, n, n_steps=n_steps, contacts_per_step=contacts_per_step,
                                                renderable=renderable)


def ok(at):
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def metric(at, label: str) -> str:
    hits = [m.value for m in at.metric if m.label == label]
    assert hits, f"no metric {label!r}; have {[m.label for m in at.metric]}"
    return hits[0]
