"""No import circles among the project's modules (issue 17): every `import` and `from ... import`
in scoring/, replay/ and dashboard/, at module level or inside a function, read from the
source with `ast`. An edge from a module to a package it lives in is not counted: Python runs
a package's `__init__` before any of its modules anyway."""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("scoring", "replay", "dashboard")


def module_graph() -> nx.DiGraph:
    files = {}
    for pkg in PACKAGES:
        for f in (ROOT / pkg).rglob("*.py"):
            parts = f.relative_to(ROOT).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, f in files.items():
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), filename=str(f))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            for t in targets:
                if t in files and t != name and not name.startswith(t + "."):
                    g.add_edge(name, t)
    return g


def test_the_graph_sees_the_imports():
    g = module_graph()
    assert g.has_edge("replay.rollout_cli", "replay.rollout")
    assert g.has_edge("replay.ray_driver", "replay.ray_engine")  # an import inside a function counts
    assert g.number_of_edges() > 200


def test_no_import_circle():
    circles = [sorted(c) for c in nx.strongly_connected_components(module_graph()) if len(c) > 1]
    assert circles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


@pytest.mark.parametrize("pair", [("replay.policies", "replay.scripted"), ("replay.rollout", "replay.ray_engine"),
                                  ("scoring.io", "scoring.json_fast")])
def test_the_circles_issue_17_named_stay_broken(pair):
    g = module_graph()
    a, b = pair
    assert not (nx.has_path(g, a, b) and nx.has_path(g, b, a)), f"{a} and {b} import each other"
