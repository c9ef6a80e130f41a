"""`safevla report`: every output of a run store in one directory.

    REPORT/table4_main.{csv,md,tex} ...   long tables, one row per cell (for analysis)
    REPORT/paper/table4.{md,tex,csv} ...  the paper's layouts (Tables 4/5, 7/8, 9, 10/11, 12)
    REPORT/metrics.json                   Appendix B "metrics output"

Footnotes state the choices where the paper is ambiguous (LIBERO-Goal applicability,
VSI saturation) and, next to every torque figure, which joint the violations come from.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from scoring.errors import SafeVLAError
from scoring.records.io import atomic_write_bytes, load_record
from scoring.registry.lookup import Registry, load_registry
from scoring.report.metrics_json import encode, metrics_output
from scoring.report.paper_grids import composition_tables, per_task_table
from scoring.report.paper_layout import (host_title, main_tables, ordered_models, spec_rate_tables, table_name,
                                         with_canonical_benchmark)
from scoring.report.readings import Reading, apply_reading, describe, preset, switched_off_tasks
from scoring.report.sensitivity import sensitivity_means, sensitivity_table, torque_scale_note
from scoring.report.table_render import PaperTable, to_latex, to_markdown
from scoring.report.perturbation import (perturbation_shifts, perturbation_tables, registry_lookup, shifts_json,
                                         suite_of, variants_in)
from scoring.report.provenance import made_with
from scoring.report.tables import build_tables, exclude_unsettled, write_tables
from scoring.report.torque_joints import attribution_of, violation_joints

PAPER_BY = ("model", "suite")


@dataclass(frozen=True)
class Notes:
    """Footnote sentences: Goal applicability, VSI reading, torque joints (all episodes, and
    per host for the tables of one host)."""

    goal: str
    vsi: str
    torque: str
    torque_by_host: dict[str, str]


def notes_for(store: str | Path, episodes: pd.DataFrame, spec_results: pd.DataFrame, reading: Reading, *,
              registry: Registry) -> Notes:
    goal = _goal_sentence(reading, registry)
    vsi = "VSI: " + describe(reading, registry=registry)["vsi_saturation"].split(": ", 1)[1] + (
        " (report option --vsi-saturation anchor for the other reading)." if reading.vsi_saturation == "eq1"
        else " (the paper's Eq. 1 read literally saturates at threshold + anchor, 700 N).")
    joints = violation_joints(store, episodes, spec_results, registry=registry)  # each record read once
    hosts = with_canonical_benchmark(episodes, registry)
    by_host = {host: attribution_of(joints[joints.index.isin(g["episode_id"])]).sentence(host=host)
               for host, g in hosts.groupby("host", sort=True)}
    # the clipping facts are a host's: a table over several hosts states each host's own
    torque = (next(iter(by_host.values())) if len(by_host) == 1 else
              " ".join(f"{host_title(h)}: {s}" for h, s in by_host.items()) if by_host else
              attribution_of(joints).sentence())
    return Notes(goal=goal, vsi=vsi, torque=torque, torque_by_host=by_host)


def _goal_sentence(reading: Reading, registry: Registry) -> str:
    """The LIBERO-Goal applicability note, with the task counts read from the registry."""
    preset(reading.applicability, registry=registry)  # an unknown name fails here, listing the choices
    off = switched_off_tasks("paper-tables", "libero-goal", registry=registry)
    n_tasks = len(registry.task_ids("libero-goal"))
    names = {"non_target_max_disp": "bystander displacement", "stable_grasp_maintained": "grasp slip",
             "held_object_tilt_world": "held-object tilt"}
    parts = " and ".join(f"{names.get(f, f)} on {len(t)}" for f, t in off.items())
    either = len(set().union(*off.values())) if off else 0
    appendix_d = f"Appendix D's registry scores {parts} of the {n_tasks} Goal tasks ({either} with either)"
    if reading.applicability == "paper-tables":
        return ("LIBERO-Goal scored as in the paper's Tables 7/10 (applicability preset paper-tables): max-force, "
                f"torque and self-collision only; {appendix_d}.")
    return (f"LIBERO-Goal applicability (default): {appendix_d}; the paper's Tables 7/10 score only max-force, "
            "torque and self-collision on Goal (report option --applicability paper-tables).")


def train_labels(store: str | Path, episodes: pd.DataFrame) -> dict[str, str]:
    """Model -> training regime when its records say so (`meta.train` or `meta.trained_on`).

    One record per model is read; a model whose record has neither gets no entry.
    """
    out = {}
    if "trajectory" not in episodes:
        return out
    for model, g in episodes.groupby("model", sort=True):
        rel = next((p for p in g["trajectory"] if isinstance(p, str) and p), None)
        if rel is None:
            continue
        try:
            meta = load_record(Path(rel) if Path(rel).is_absolute() else Path(store) / rel).meta
        except Exception:  # noqa: BLE001 - an unreadable record only loses the Train label
            continue
        value = meta.get("train", meta.get("trained_on"))
        if value:
            out[model] = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return out


def paper_tables(store: str | Path, episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry,
                 notes: Notes, reading: Reading = Reading(),
                 model_order: Sequence[str] | None = None) -> list[PaperTable]:
    """Every paper-layout table, with the footnotes that apply to it.

    `episodes` and `spec_results` are already under `reading`. Each caption ends with the
    protocol, the force and torque sampling and the reading of its own episodes; episodes
    whose scene never came to rest are left out, as in the long tables. Model rows follow
    `model_order` (default: the models' first appearance in `episodes`).
    """
    model_order = ordered_models(episodes["model"], model_order)
    episodes, spec_results, unsettled = exclude_unsettled(episodes, spec_results)
    hosts = with_canonical_benchmark(episodes, registry)
    goal = [notes.goal] if (hosts["benchmark"] == "libero-goal").any() else []
    train = train_labels(store, episodes)
    tables: list[PaperTable] = []
    for host, g in hosts.groupby("host", sort=True):
        rows = spec_results[spec_results["episode_id"].isin(g["episode_id"])]
        torque = {"joint_torque": [notes.torque_by_host[host]]}
        eps = episodes[episodes["episode_id"].isin(g["episode_id"])]
        made = made_with(eps, reading) + unsettled
        tables += [replace(t, caption=f"{t.caption} {made}") for t in
                   [*main_tables(eps, registry=registry, train=train, notes=[notes.vsi], model_order=model_order),
                    *spec_rate_tables(eps, rows, registry=registry, notes_for=torque, model_order=model_order),
                    *composition_tables(eps, rows, registry=registry, notes_for=torque, model_order=model_order)]]
    means = sensitivity_means(episodes, spec_results, registry=registry, vsi_saturation=reading.vsi_saturation)
    scale = torque_scale_note(registry, episodes["benchmark"].unique())
    t9 = sensitivity_table(means, notes=[n for n in (scale, notes.vsi, notes.torque, *goal) if n])
    tables.append(replace(t9, caption=f"{t9.caption} {made_with(episodes, reading)}{unsettled}"))
    t12 = per_task_table(episodes, registry=registry, notes=goal, model_order=model_order)
    tables.append(replace(t12, caption=f"{t12.caption} {made_with(episodes, reading)}{unsettled}"))
    # Goal's cells are where the two applicability readings differ
    goal_tables = {table_name("libero", kind) for kind in ("main", "spec_rates", "composition")}
    for t in tables:
        if t.name in goal_tables:
            t.notes.extend(goal)
    return tables


def write_paper_tables(tables: Sequence[PaperTable], out_dir: str | Path) -> list[Path]:
    out_dir = Path(out_dir)
    paths = []
    for t in tables:
        for suffix, text in ((".md", to_markdown(t)), (".tex", to_latex(t)),
                             (".csv", t.data.to_csv(index=False) if t.data is not None else "")):
            path = out_dir / f"{t.name}{suffix}"
            atomic_write_bytes(path, text.encode())
            paths.append(path)
    return paths


def write_report(store: str | Path, out: str | Path, *, episodes: pd.DataFrame, spec_results: pd.DataFrame,
                 manifest: dict, by: Sequence[str] = PAPER_BY, seed: int = 0, reading: Reading = Reading(),
                 registry: Registry | None = None, model_order: Sequence[str] = (),
                 perturbation_of: Callable[[str], object | None] | None = None) -> list[Path]:
    """Writes the long tables, the paper layouts (when grouped by model and suite) and metrics.json.

    `model_order` puts those models' rows first in the paper layouts, in that order; the
    others follow in the order they were added to the store (first appearance in `episodes`).
    When the store holds a base suite and variants of it (`perturbation_of(suite)`, default
    the suite registry's), the perturbation tables join the long tables
    (`scoring.report.perturbation`).
    """
    known = list(dict.fromkeys(episodes["model"]))
    unknown = [m for m in model_order if m not in known]
    if unknown:
        raise SafeVLAError(f"--model-order: unknown model {unknown[0]!r}; valid choices: {', '.join(known)}")
    reg = registry or load_registry()
    episodes, spec_results = apply_reading(episodes, spec_results, reading, registry=reg)
    notes = notes_for(store, episodes, spec_results, reading, registry=reg)
    long = build_tables(episodes, spec_results, registry=reg, by=by, seed=seed, reading=reading)
    for name in ("table7_spec_rates", "table9_sensitivity", "table10_sbu_composition"):
        caption, df = long[name]
        long[name] = (f"{caption} {notes.torque}", df)
    caption, df = long["table4_main"]
    long["table4_main"] = (f"{caption} {notes.vsi}", df)
    shifts = _shifts(episodes, spec_results, perturbation_of, registry=reg, seed=seed)
    counted = exclude_unsettled(episodes, spec_results)[0]
    long.update({name: (f"{caption} {made_with(counted, reading)}", df)
                 for name, (caption, df) in perturbation_tables(shifts, seed=seed).items()})
    paths = write_tables(long, out)
    if tuple(by) == PAPER_BY:
        paths += write_paper_tables(paper_tables(store, episodes, spec_results, registry=reg, notes=notes,
                                                 reading=reading, model_order=ordered_models(known, model_order)),
                                    Path(out) / "paper")
    doc = metrics_output(episodes, spec_results, manifest=manifest, reading=describe(reading, registry=reg),
                         notes=[notes.goal, notes.vsi, notes.torque], by=by, seed=seed,
                         perturbations=shifts_json(shifts))
    path = Path(out) / "metrics.json"
    atomic_write_bytes(path, encode(doc))
    return [*paths, path]


def _shifts(episodes: pd.DataFrame, spec_results: pd.DataFrame, perturbation_of, *, registry: Registry,
            seed: int) -> list:
    """Every model's change from base suite to variant, over the episodes the tables count."""
    episodes, spec_results, _ = exclude_unsettled(episodes, spec_results)
    lookup = perturbation_of or registry_lookup()
    variants = variants_in(suite_of(episodes).dropna().astype(str).unique(), lookup)
    return perturbation_shifts(episodes, spec_results, variants, families=registry.families, seed=seed)
