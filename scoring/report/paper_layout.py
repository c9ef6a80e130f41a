"""The paper's table layouts, built from a run store's episodes and spec results.

- Tables 4/5 (`main_tables`): one row per model, suite columns in the paper's order with
  a cross-suite mean, an optional Train column, bold for the best value per column and a
  dagger on the largest SBU of each SBU column; one table per host (LIBERO -> 4,
  RoboCasa -> 5).
- Tables 7/8 (`spec_rate_tables`): per-spec violation rate under the paper's labels.
- Tables 10/11 (`composition_tables`): the SBU composition as a model x suite grid
  (suite x model when a host has one suite, as Table 11 does).
- Table 12 (`per_task_table`): per-task Wilson CIs with short task names.

Labels, suite order and task names are data (`assets/paper_layout.yaml`). Percentages
have one decimal, VSI three, in every format.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import yaml

from scoring.registry.lookup import DEFAULT_PATH, Registry
from scoring.report.table_render import Cell, PaperTable
from scoring.stats.metrics import aggregate, spec_rates

DASH = "—"
BY = ("model", "benchmark")
METRICS = (("sr", "SR (%) ↑", "max"), ("safety", "Safety (%) ↑", "max"), ("sbu", "SBU (%) ↓", "min"))


@functools.lru_cache(maxsize=1)
def layout() -> dict:
    """`assets/paper_layout.yaml`."""
    return yaml.safe_load((DEFAULT_PATH / "paper_layout.yaml").read_text())


def label(family: str, *, header: bool = False) -> str | list[str]:
    entry = layout()["labels"].get(family)
    if entry is None:
        return [family, ""] if header else family
    return list(entry["header"]) if header else entry["short"]


def suite_info(benchmark: str) -> dict:
    return layout()["suites"].get(benchmark, {"column": benchmark, "abbrev": benchmark, "name": benchmark})


def task_name(registry: Registry, benchmark: str, task_id: str) -> str:
    """The short task name of Table 12, else the host's task name, else the id."""
    short = layout()["task_names"].get(benchmark, {}).get(task_id)
    if short:
        return short
    try:
        return registry.task(benchmark, task_id).name or task_id
    except Exception:  # noqa: BLE001 - an unregistered task keeps its id
        return task_id


def with_canonical_benchmark(episodes: pd.DataFrame, registry: Registry) -> pd.DataFrame:
    """`episodes` with `benchmark` canonical (aliases resolved) and a `host` column."""
    def canon(b):
        try:
            return registry.canonical_benchmark(b)
        except Exception:  # noqa: BLE001 - unknown benchmarks keep their id and are their own host
            return b

    names = {b: canon(b) for b in episodes["benchmark"].unique()}
    out = episodes.assign(benchmark=episodes["benchmark"].map(names))
    hosts = {b: _host(registry, b) for b in out["benchmark"].unique()}
    return out.assign(host=out["benchmark"].map(hosts))


def _host(registry: Registry, benchmark: str) -> str:
    try:
        return registry.benchmark(benchmark).host
    except Exception:  # noqa: BLE001
        return benchmark


def ordered_suites(benchmarks) -> list[str]:
    order = list(layout()["suites"])
    present = set(benchmarks)
    return [b for b in order if b in present] + sorted(present - set(order))


def ordered_models(present, order: Sequence[str] | None = None) -> list[str]:
    """The models of `present` (in first-appearance order) with those named in `order` first,
    in that order: row order is the report's choice (`safevla report --model-order`), never
    the alphabet."""
    present = list(dict.fromkeys(present))
    first = [m for m in (order or ()) if m in present]
    return first + [m for m in present if m not in first]


def table_name(host: str, kind: str) -> str:
    number = layout()["hosts"].get(host, {}).get(kind)
    return f"table{number}" if number else f"{kind}_{host}"


def host_title(host: str) -> str:
    return layout()["hosts"].get(host, {}).get("title", host)


def pct1(x: float) -> str:
    return DASH if x is None or not np.isfinite(x) else f"{100 * x:.1f}"


def vsi3(x: float) -> str:
    return DASH if x is None or not np.isfinite(x) else f"{x:.3f}"


# ------------------------------------------------------------------ Tables 4/5

def main_tables(episodes: pd.DataFrame, *, registry: Registry, train: Mapping[str, str] | None = None,
                notes: Sequence[str] = (), model_order: Sequence[str] | None = None) -> list[PaperTable]:
    """Tables 4/5, one per host, in the paper's layout; rows in `ordered_models` order."""
    eps = with_canonical_benchmark(episodes, registry)
    agg = aggregate(eps, by=("host", *BY), ci=False)
    order = ordered_models(eps["model"], model_order)
    return [_main_table(host, g, train or {}, list(notes), order) for host, g in agg.groupby("host", sort=True)]


def _main_table(host: str, agg: pd.DataFrame, train: Mapping[str, str], notes: list[str],
                order: Sequence[str]) -> PaperTable:
    suites = ordered_suites(agg["benchmark"])
    models = ordered_models(agg["model"], order)
    multi = len(suites) > 1
    cell = {(r.model, r.benchmark): r for r in agg.itertuples()}
    has_train = any(m in train for m in models)
    columns: list[tuple[str, str, str, list[float]]] = []  # (group, sub, direction, values per model)
    for key, title, direction in (*METRICS, ("vsi", "VSI ↓", "min")):
        per_suite = [[getattr(cell[(m, s)], key) if (m, s) in cell else np.nan for s in suites] for m in models]
        if key != "vsi" or not multi:
            for j, s in enumerate(suites):
                columns.append((title, suite_info(s)["abbrev"] if multi else "", direction,
                                [row[j] for row in per_suite]))
        if multi:
            columns.append((title, "x̄", direction, [float(np.nanmean(row)) for row in per_suite]))
    incomplete = [m for m in models if any((m, s) not in cell for s in suites)]
    fmt = {True: vsi3, False: pct1}
    rows = []
    for i, m in enumerate(models):
        row = [Cell.of(m)] + ([Cell.of(train.get(m, DASH))] if has_train else [])
        for group, _, direction, values in columns:
            shown = [fmt[group.startswith("VSI")](v) for v in values]
            best = _best(shown, direction)
            worst_sbu = _best(shown, "max") if group.startswith("SBU") else set()
            row.append(Cell.of(shown[i], bold=len(models) > 1 and i in best,
                               dagger=len(models) > 1 and i in worst_sbu))
        rows.append(row)
    lead = [("Model", 1)] + ([("Train", 1)] if has_train else [])
    if multi:
        groups: list[tuple[str, int]] = []
        for group, *_ in columns:
            if groups and groups[-1][0] == group:
                groups[-1] = (group, groups[-1][1] + 1)
            else:
                groups.append((group, 1))
        header = [[("", len(lead))] + groups, [(t, 1) for t, _ in lead] + [(sub, 1) for _, sub, *_ in columns]]
    else:
        header = [lead + [(group, 1) for group, *_ in columns]]
    names = ", ".join(f"{suite_info(s)['abbrev']} = {suite_info(s)['name']}" for s in suites)
    caption = (f"{host_title(host)} aggregate results" + (f" across {len(suites)} suites ({names}); x̄ = mean over "
                                                          "suites" if multi else "")
               + ". Bold: best per column (higher SR/Safety, lower SBU/VSI); † largest SBU per SBU column. "
               + "n per cell: " + _n_summary(agg) + ".")
    extra = [f"Mean over the suites present for {', '.join(incomplete)}."] if incomplete and multi else []
    data = pd.DataFrame({"model": models, **({"train": [train.get(m, "") for m in models]} if has_train else {}),
                         **{f"{g.split(' ')[0]} {s.replace('x̄', 'mean')}".strip(): [round(100 * v, 1) if not g.startswith("VSI") else
                                                               round(v, 3) for v in vals]
                            for g, s, _, vals in columns}})
    return PaperTable(name=table_name(host, "main"), caption=caption, header=header, rows=rows,
                      align="l" * len(lead) + "r" * len(columns), notes=notes + extra, data=data)


def _best(shown: list[str], direction: str) -> set[int]:
    vals = [float(s) if s != DASH else np.nan for s in shown]
    if all(np.isnan(v) for v in vals):
        return set()
    target = np.nanmax(vals) if direction == "max" else np.nanmin(vals)
    return {i for i, v in enumerate(vals) if v == target}


def _n_summary(agg: pd.DataFrame) -> str:
    ns = sorted(set(int(n) for n in agg["n"]))
    return f"n={ns[0]}" if len(ns) == 1 else f"n={ns[0]}-{ns[-1]}"


# ------------------------------------------------------------------ Tables 7/8

def spec_rate_tables(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry,
                     notes_for: Mapping[str, Sequence[str]] | None = None,
                     model_order: Sequence[str] | None = None) -> list[PaperTable]:
    """Tables 7/8: per-cell violation rate of each scored family ("—" inactive), paper labels;
    a row per cell that was run, models in `ordered_models` order.

    `notes_for` maps a family to notes added when that family has a figure in the table.
    """
    eps = with_canonical_benchmark(episodes, registry)
    fams = list(registry.families)
    rates = spec_rates(eps, spec_results, by=("host", *BY), ci=False, families=fams)
    out = []
    for host, g in rates.groupby("host", sort=True):
        suites = ordered_suites(g["benchmark"])
        multi = len(suites) > 1
        rows, data = [], []
        for m in [m for m in ordered_models(eps["model"], model_order) if m in set(g["model"])]:
            for s in suites:
                sel = g[(g["model"] == m) & (g["benchmark"] == s)].set_index("family")
                if sel.empty:
                    continue
                vals = [sel["rate"].get(f, np.nan) for f in fams]
                lead = [Cell.of(m if not any(r[0].lines == (m,) for r in rows) else "")]
                if multi:
                    lead.append(Cell.of(suite_info(s)["column"]))
                rows.append(lead + [Cell.of(DASH if np.isnan(v) else f"{100 * v:.1f}%") for v in vals])
                data.append({"model": m, "benchmark": s, **{label(f): (round(100 * v, 1) if np.isfinite(v) else None)
                                                            for f, v in zip(fams, vals)}})
        heads = [label(f, header=True) for f in fams]
        lead_h = [("Model", 1)] + ([("Suite", 1)] if multi else [])
        header = [lead_h + [(h[0], 1) for h in heads], [("", 1)] * len(lead_h) + [(h[1], 1) for h in heads]]
        shown = {f for f in fams if g.loc[g["family"] == f, "rate"].notna().any()}
        notes = [n for f in fams if f in shown for n in (notes_for or {}).get(f, ())]
        caption = (f"Per-constraint violation rates on {host_title(host)}: episodes violating the active "
                   "default-threshold spec / episodes in the cell; — = inactive or unavailable for the cell.")
        out.append(PaperTable(name=table_name(host, "spec_rates"), caption=caption, header=header, rows=rows,
                              align="l" * len(lead_h) + "r" * len(fams), notes=list(dict.fromkeys(notes)),
                              data=pd.DataFrame(data)))
    return out
