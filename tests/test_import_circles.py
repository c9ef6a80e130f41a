"""No import circles among the project's modules, and each package and room imports only
the ones below it: every `import` and `from ... import` in scoring/, replay/ and dashboard/,
at module level or inside a function, read from the source with `ast`. An edge from a module
to a package it lives in is not counted: Python runs a package's `__init__` before any of its
modules anyway."""

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
    assert g.has_edge("replay.record.rollout_cli", "replay.record.rollout")
    assert g.has_edge("replay.record.ray_driver", "replay.record.ray_engine")  # an import inside a function counts
    assert g.number_of_edges() > 200


def test_no_import_circle():
    circles = [sorted(c) for c in nx.strongly_connected_components(module_graph()) if len(c) > 1]
    assert circles == [], "import circles: " + "; ".join(" <-> ".join(c) for c in circles)


@pytest.mark.parametrize("pair", [("replay.record.policies", "replay.record.scripted"),
                                  ("replay.record.rollout", "replay.record.ray_engine"),
                                  ("scoring.records.io", "scoring.records.json_fast")])
def test_the_circles_broken_by_the_subpackage_split_stay_broken(pair):
    # pairs that imported each other until the restructure of 2026-11-24/25 (32305bb, 37491ee)
    g = module_graph()
    a, b = pair
    assert not (nx.has_path(g, a, b) and nx.has_path(g, b, a)), f"{a} and {b} import each other"


# The rooms and what each may import: scoring's subpackages in the order an episode flows
# (each imports only those before it), replay's two rooms over their shared scene floor.
SCORING_FLOW = ("records", "registry", "stl", "evaluate", "stats", "store", "report", "cli")
REPLAY_MAY_IMPORT = {"scene": set(), "record": {"scene"}, "render": {"scene"}}


def room(module: str) -> tuple[str, str | None]:
    parts = module.split(".")
    return parts[0], parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in
                                                    SCORING_FLOW + tuple(REPLAY_MAY_IMPORT)) else None


def forbidden_edges(graph: nx.DiGraph | None = None) -> list[str]:
    bad = []
    for a, b in (graph if graph is not None else module_graph()).edges:
        (pa, ra), (pb, rb) = room(a), room(b)
        if pa == "scoring" and pb in ("replay", "dashboard") or pa == "replay" and pb == "dashboard":
            bad.append(f"{a} -> {b} (the top-level packages import downwards only)")
        elif pa == pb == "scoring" and ra in SCORING_FLOW and rb in SCORING_FLOW and \
                SCORING_FLOW.index(rb) > SCORING_FLOW.index(ra):
            bad.append(f"{a} -> {b} ({rb} comes after {ra} in the flow)")
        elif pa == pb == "replay" and ra in REPLAY_MAY_IMPORT and rb in REPLAY_MAY_IMPORT and ra != rb and \
                rb not in REPLAY_MAY_IMPORT[ra]:
            bad.append(f"{a} -> {b} (replay.{ra} may import only {sorted(REPLAY_MAY_IMPORT[ra]) or 'neither room'})")
    return sorted(bad)


def test_every_module_lives_in_a_room():
    loose = [m for m in module_graph().nodes if m.count(".") == 1 and room(m)[1] is None and
             m.split(".")[0] in ("scoring", "replay") and m != "scoring.errors"]
    assert loose == [], f"modules outside the rooms: {loose}"


def test_each_room_imports_only_the_rooms_it_may():
    assert forbidden_edges() == []


def test_nothing_below_the_dashboard_imports_it():
    # Not even inside a function, for an optional extra: what replay or scoring needs of a
    # chart (Figure 2 for `safevla figure`) lives in scoring.report, which imports Altair lazily.
    g = module_graph()
    up = sorted(f"{a} -> {b}" for a, b in g.edges if a.split(".")[0] in ("scoring", "replay")
                and b.split(".")[0] == "dashboard")
    assert up == [], "imports from a lower floor up into dashboard: " + "; ".join(up)
    assert g.has_edge("replay.render.cli", "scoring.report.paper_figure")  # Figure 2's builders, seen by the walk


def test_the_room_check_flags_a_wrong_way_import():
    g = module_graph()
    assert room("scoring.records.io") == ("scoring", "records") and room("replay.render.export") == ("replay", "render")
    # edges in the allowed direction exist (so there is something to check) and pass
    assert any(room(a)[1] == "evaluate" and room(b)[1] == "records" for a, b in g.edges)
    assert any(room(a)[1] == "render" and room(b)[1] == "scene" for a, b in g.edges)
    # and each kind of wrong-way import is flagged
    g.add_edges_from([("scoring.records.io", "scoring.store.write"),
                      ("replay.record.rollout", "replay.render.export"),
                      ("replay.scene.assets", "replay.record.recorder"),
                      ("scoring.stats.metrics", "replay.render.cli")])
    flagged = forbidden_edges(g)
    assert len(flagged) == 4, flagged
    assert any("store comes after records" in f for f in flagged)


def test_the_contract_names_import_from_the_packages_design_md_names():
    # DESIGN.md's contract names live in a submodule each; their packages re-export them.
    from scoring import score_archive, score_episode  # noqa: F401
    from scoring.registry import active_specs, load_registry  # noqa: F401
    from scoring.stats import bootstrap_ci, wilson_interval  # noqa: F401
    from scoring.stl import robustness, robustness_trace  # noqa: F401
