"""Writes the LIBERO-90 task registry (assets/tasks/libero_90.yaml) from LIBERO's own BDDL files.

    python scripts/make_libero_registry.py           # write assets/tasks/libero_90.yaml
    python scripts/make_libero_registry.py --check   # is it up to date? and the rule against the 40

Every field comes from the task's BDDL file (`robosuite_parse_problem`) and LIBERO's task
list, by the rule below; nothing is typed by hand except the object catalog, which lives
in assets/tasks/libero.yaml (the one LIBERO catalog) and is copied here for the
categories LIBERO-90 uses. `--check` also applies the rule to the 40 hand-written tasks
of assets/tasks/libero.yaml and prints where their template, targets or goal fixtures
differ from it (those entries are kept as written).

The rule, per goal predicate in goal order (docs/registry.md has it as a table):
- `open` / `close` of a fixture or one of its regions -> articulated-manipulation,
  `turnon` / `turnoff` -> knob-twist; the fixture is a goal fixture. A state predicate the
  init state already holds (the stove of KITCHEN_SCENE8 starts on) asks for no motion and
  adds nothing.
- `on` / `in` / `up` of a movable object (`replay.record.hosts.libero.goal_targets`),
  first match:
  - the task's language starts with "push" -> push-no-lift (the BDDL has no push
    predicate; the language is the only sign of one);
  - onto a region of a fixture in FIXTURE_DESTINATIONS -> its template (the wine rack);
  - `in` anything, or `on` a movable receptacle (RECEPTACLES) -> pnp-into-container; if
    the destination is a drawer or appliance (ARTICULATED_FIXTURES) that neither the init
    state nor the goal opens, an articulated-manipulation phase comes first and the
    fixture is a goal fixture (LIBERO-Goal's "open the top drawer and put the bowl
    inside" has only the `in` predicate);
  - otherwise pnp-basic.
The distinct templates, in goal order, make `template` (one) or `components` (several).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TASKS_DIR = ROOT / "assets" / "tasks"
OUT = TASKS_DIR / "libero_90.yaml"
CATALOG_FILE = TASKS_DIR / "libero.yaml"
SUITE, BENCHMARK = "libero_90", "libero-90"
HAND_WRITTEN = {"libero_spatial": "libero-spatial", "libero_object": "libero-object",
                "libero_goal": "libero-goal", "libero_10": "libero-10"}

STATE_TEMPLATES = {"open": "articulated-manipulation", "close": "articulated-manipulation",
                   "turnon": "knob-twist", "turnoff": "knob-twist"}
# movable object categories that hold what is put "on" them (the cream cheese goes in the bowl)
RECEPTACLES = frozenset({"akita_black_bowl", "white_bowl", "basket", "wooden_tray"})
# fixture categories whose regions make their own mechanism
FIXTURE_DESTINATIONS = {"wine_rack": "wine-rack-insert"}
# fixture categories with doors or drawers (their regions are opened and closed)
ARTICULATED_FIXTURES = frozenset({"wooden_cabinet", "white_cabinet", "microwave"})
PUSH_WORD = "push"


class RuleError(ValueError):
    """A BDDL goal the rule does not cover."""


# ----------------------------------------------------------------------------- reading LIBERO
def libero_problems(suite: str):
    """(task, parsed BDDL problem) for every task of `suite`, in LIBERO's own order."""
    from libero.libero import benchmark, get_libero_path
    from libero.libero.envs.bddl_utils import robosuite_parse_problem
    tasks = benchmark.get_benchmark_dict()[suite]()
    root = get_libero_path("bddl_files")
    for i in range(tasks.n_tasks):
        task = tasks.get_task(i)
        yield task, robosuite_parse_problem(os.path.join(root, task.problem_folder, task.bddl_file))


def instances(by_category: dict[str, list[str]]) -> dict[str, str]:
    """BDDL `{category: [instance, ...]}` -> `{instance: category}`, in file order."""
    return {name: cat for cat, names in by_category.items() for name in names}


def owner(name: str, candidates) -> str | None:
    """The instance a BDDL name belongs to: itself, or the longest `<instance>_...` prefix."""
    hits = [c for c in candidates if name == c or name.startswith(c + "_")]
    return max(hits, key=len) if hits else None


# ----------------------------------------------------------------------------- the rule
def mechanism(goal, init, objects: dict[str, str], fixtures: dict[str, str], language: str):
    """(templates in goal order, goal fixtures, notes) of one task."""
    from replay.record.hosts.libero import MOVING_PREDICATES, goal_targets
    held = {tuple(str(x).lower() for x in p) for p in init}
    opened = held | {tuple(str(x).lower() for x in p) for p in goal if str(p[0]).lower() == "open"}
    templates: list[str] = []
    goal_fixtures: list[str] = []
    notes: list[str] = []
    push = language.strip().lower().startswith(PUSH_WORD + " ")
    for predicate in goal:
        head, args = str(predicate[0]).lower(), list(predicate[1:])
        if head in STATE_TEMPLATES:
            fixture = owner(args[0], fixtures)
            if fixture is None:
                raise RuleError(f"({head} {args[0]}) names no fixture; fixtures: {', '.join(fixtures)}")
            if (head, *map(str.lower, args)) in held:
                notes.append(f"({head} {args[0]}) already holds in the init state: no "
                             f"{STATE_TEMPLATES[head]} phase.")
                continue
            templates.append(STATE_TEMPLATES[head])
            goal_fixtures.append(fixture)
        elif head in MOVING_PREDICATES:
            if not goal_targets([predicate], objects):
                raise RuleError(f"({head} {' '.join(args)}) moves no movable object")
            dest = args[1] if len(args) > 1 else None
            dest_fixture = owner(dest, fixtures) if dest else None
            dest_object = owner(dest, objects) if dest else None
            if push:
                templates.append("push-no-lift")
            elif dest_fixture and fixtures[dest_fixture] in FIXTURE_DESTINATIONS:
                templates.append(FIXTURE_DESTINATIONS[fixtures[dest_fixture]])
            elif head == "in" or (dest_object and objects[dest_object] in RECEPTACLES):
                if (head == "in" and dest_fixture and fixtures[dest_fixture] in ARTICULATED_FIXTURES
                        and not opened & {("open", dest.lower()), ("open", dest_fixture.lower())}):
                    notes.append(f"({head} {' '.join(args)}): neither the init state nor the goal "
                                 f"opens {dest}, so it is opened first.")
                    templates.append(STATE_TEMPLATES["open"])
                    goal_fixtures.append(dest_fixture)
                templates.append("pnp-into-container")
            else:
                templates.append("pnp-basic")
        else:
            raise RuleError(f"goal predicate {head!r} is not covered; known: "
                            f"{', '.join(sorted(set(STATE_TEMPLATES) | set(MOVING_PREDICATES)))}")
    return list(dict.fromkeys(templates)), list(dict.fromkeys(goal_fixtures)), notes


def task_entry(task, problem) -> dict:
    """The registry entry of one LIBERO task (field order as in assets/tasks/libero.yaml)."""
    from replay.record.hosts.libero import goal_targets
    objects, fixtures = instances(problem["objects"]), instances(problem["fixtures"])
    templates, goal_fixtures, notes = mechanism(problem["goal_state"], problem["initial_state"], objects,
                                                fixtures, task.language)
    entry = {"name": task.name, "language": task.language,
             "bddl_file": f"{task.problem_folder}/{task.bddl_file}"}
    if len(templates) == 1:
        entry["template"] = templates[0]
    else:
        entry["components"] = templates
    entry["targets"] = goal_targets(problem["goal_state"], set(objects))
    if goal_fixtures:
        entry["goal_fixtures"] = goal_fixtures
    entry.update(objects_of_interest=list(problem["obj_of_interest"]), objects=objects, fixtures=fixtures)
    if notes:
        entry["note"] = " ".join(notes)
    return entry


# ----------------------------------------------------------------------------- writing
def catalog_for(entries: list[dict]) -> dict[str, dict]:
    """The catalog entries (from assets/tasks/libero.yaml) of every object category used."""
    catalog = yaml.safe_load(CATALOG_FILE.read_text())["objects"]
    used = sorted({cat for e in entries for cat in e["objects"].values()})
    missing = [c for c in used if c not in catalog]
    if missing:
        raise RuleError(f"object categories {', '.join(missing)} have no entry in the object catalog of "
                        f"{CATALOG_FILE.relative_to(ROOT)}; add their tags and why there")
    return {c: catalog[c] for c in used}


def _flow(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


def _plain(value) -> str:
    """Identifiers as they are, anything else as a YAML flow value."""
    if isinstance(value, str):
        bare = value[:1].isalpha() and all(ch.isalnum() or ch in "_-./" for ch in value)
        return value if bare else json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    return json.dumps(value)


HEADER = """\
# LIBERO-90 task registry (benchmark id libero-90, LIBERO suite libero_90): 90 tasks in
# LIBERO's own order (task_i is benchmark.get_benchmark_dict()["libero_90"]().get_task(i)).
#
# GENERATED by scripts/make_libero_registry.py from LIBERO's BDDL files: do not edit by
# hand; change the rule (the script's docstring) or the object catalog of
# tasks/libero.yaml, then rerun it. Fields and their meaning are those of tasks/libero.yaml:
# `targets` are the objects the goal moves (replay.record.hosts.libero.goal_targets),
# `goal_fixtures` the fixtures whose state the goal changes (open / close / turnon /
# turnoff), `template` / `components` the mechanisms of the goal predicates.
schema_version: 1

# Object catalog: a copy of the entries of tasks/libero.yaml for the categories used here.
"""


def render(entries: list[dict], catalog: dict[str, dict]) -> str:
    lines = [HEADER.rstrip("\n"), "objects:"]
    for cat, c in catalog.items():
        lines.append(f"  {cat}: {{tags: {_plain(c['tags'])}, why: {json.dumps(c['why'])}}}")
    lines += ["", "benchmarks:", f"  {BENCHMARK}:", f"    suite: {SUITE}", "    tasks:"]
    for i, e in enumerate(entries):
        lines.append(f"      task_{i}:")
        for key, value in e.items():
            text = _flow(value) if key in ("language", "note") else _plain(value)
            lines.append(f"        {key}: {text}")
    return "\n".join(lines) + "\n"


def build() -> str:
    entries = [task_entry(task, problem) for task, problem in libero_problems(SUITE)]
    return render(entries, catalog_for(entries))


# ----------------------------------------------------------------------------- checking
def mechanism_fields(entry: dict) -> dict:
    """What the rule decides: the mechanism(s), targets and goal fixtures."""
    return {"templates": [entry["template"]] if "template" in entry else list(entry["components"]),
            "targets": list(entry.get("targets") or []),
            "goal_fixtures": list(entry.get("goal_fixtures") or [])}


def hand_written_differences() -> list[tuple[str, str, str, object, object]]:
    """(benchmark, task, field, hand-written, rule) wherever the rule differs from tasks/libero.yaml."""
    data = yaml.safe_load(CATALOG_FILE.read_text())["benchmarks"]
    out = []
    for suite, bench in HAND_WRITTEN.items():
        section = data[bench]
        for i, (task, problem) in enumerate(libero_problems(suite)):
            written = {**section.get("defaults", {}), **section["tasks"][f"task_{i}"]}
            want, got = mechanism_fields(written), mechanism_fields(task_entry(task, problem))
            out += [(bench, f"task_{i}", k, want[k], got[k]) for k in want if want[k] != got[k]]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help=f"write nothing; fail if {OUT.relative_to(ROOT)} is not what the rule gives, and "
                        "list where the 40 hand-written tasks differ from the rule")
    args = p.parse_args(argv)
    text = build()
    if not args.check:
        OUT.write_text(text)
        print(f"wrote {OUT.relative_to(ROOT)}")
        return 0
    for bench, task_id, key, want, got in hand_written_differences():
        print(f"{bench} {task_id} {key}: tasks/libero.yaml has {want}, the rule gives {got}")
    if not OUT.exists() or OUT.read_text() != text:
        print(f"{OUT.relative_to(ROOT)} is out of date: run python scripts/make_libero_registry.py")
        return 1
    print(f"{OUT.relative_to(ROOT)} is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
