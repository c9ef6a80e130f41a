"""Tables 10/11 (SBU composition as a model x suite grid) and Table 12 (per task, with
short task names) in the paper's layout; shared helpers live in `scoring.report.paper_layout`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from scoring.registry.lookup import Registry
from scoring.report.paper_layout import (BY, DASH, host_title, label, ordered_models, ordered_suites, pct1,
                                         suite_info, table_name, task_name, with_canonical_benchmark)
from scoring.report.table_render import Cell, PaperTable
from scoring.stats.metrics import aggregate, sbu_composition


def composition_tables(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry,
                       notes_for: Mapping[str, Sequence[str]] | None = None,
                       model_order: Sequence[str] | None = None) -> list[PaperTable]:
    """Tables 10/11: per cell "SBU% (k/n)" then each violated spec's share of the violations.

    Rows are models and columns suites; a host with a single suite is transposed (one row,
    one column per model), as the paper's Table 11 is. `notes_for` and `model_order` as in
    `spec_rate_tables`.
    """
    eps = with_canonical_benchmark(episodes, registry)
    comp = sbu_composition(eps, spec_results, by=("host", *BY))
    out = []
    order = ordered_models(eps["model"], model_order)
    for host, g in eps.groupby("host", sort=True):
        suites = ordered_suites(g["benchmark"])
        models = ordered_models(g["model"], order)
        cells, data, seen = {}, [], set()
        for (m, s), cell in g.groupby(list(BY), sort=True):
            n, k = len(cell), int(cell["sbu"].sum())
            sel = comp[(comp["host"] == host) & (comp["model"] == m) & (comp["benchmark"] == s)]
            parts = [f"{label(f)} {100 * sh:.0f}%" for f, sh in zip(sel["family"], sel["share"])]
            seen.update(sel["family"])
            cells[(m, s)] = Cell.of((f"{100 * k / n:.1f}% ({k}/{n})", *(parts or ["(no spec-violations)"])))
            data.append({"model": m, "benchmark": s, "sbu_pct": round(100 * k / n, 1), "sbu_count": k, "n": n,
                         "composition": "; ".join(parts)})
        empty = Cell.of(DASH)
        if len(suites) > 1:
            header = [[("", 1)] + [(suite_info(s)["column"], 1) for s in suites]]
            rows = [[Cell.of(m)] + [cells.get((m, s), empty) for s in suites] for m in models]
        else:
            header = [[("", 1)] + [(m, 1) for m in models]]
            rows = [[Cell.of(suite_info(suites[0])["column"])] + [cells.get((m, suites[0]), empty) for m in models]]
        notes = [n for f in registry.families if f in seen for n in (notes_for or {}).get(f, ())]
        caption = (f"Per-cell SBU spec composition on {host_title(host)}. Top line: SBU% (n / total episodes) under "
                   "the default thresholds; below, every spec that fired on an unsafe-success episode with its share "
                   "of the spec-violation count (an episode tripping k specs adds 1 to each and k to the "
                   "denominator).")
        out.append(PaperTable(name=table_name(host, "composition"), caption=caption, header=header, rows=rows,
                              align="l" * len(header[0]), notes=list(dict.fromkeys(notes)), data=pd.DataFrame(data)))
    return out


def per_task_table(episodes: pd.DataFrame, *, registry: Registry, notes: Sequence[str] = (),
                   model_order: Sequence[str] | None = None) -> PaperTable:
    """Table 12: per (model, suite) block, each task's n, SR and Safety with Wilson 95% CIs,
    then the block's aggregate; models in `ordered_models` order. Task names are short; the
    CSV keeps the ids too."""
    eps = with_canonical_benchmark(episodes, registry)
    tasks = aggregate(eps, by=(*BY, "task_id"), ci=False)
    cells = aggregate(eps, by=BY, ci=False)
    rows, blocks, data = [], [], []
    order = {s: i for i, s in enumerate(ordered_suites(eps["benchmark"]))}
    rank = {m: i for i, m in enumerate(ordered_models(eps["model"], model_order))}
    for cell in sorted(cells.itertuples(), key=lambda c: (rank[c.model], order[c.benchmark])):
        blocks.append(len(rows))
        sel = tasks[(tasks["model"] == cell.model) & (tasks["benchmark"] == cell.benchmark)]
        sel = sel.iloc[sorted(range(len(sel)), key=lambda i: _task_order(sel["task_id"].iloc[i]))]
        suite_name = suite_info(cell.benchmark)["name"]
        for j, r in enumerate([*sel.itertuples(), cell]):
            is_task = j < len(sel)
            name = task_name(registry, cell.benchmark, r.task_id) if is_task else f"aggregate ({suite_name})"
            rows.append([Cell.of(cell.model if j == 0 else ""), Cell.of(name), Cell.of(str(int(r.n))),
                         Cell.of(pct1(r.sr)), Cell.of(_ci(r.sr_lo, r.sr_hi)),
                         Cell.of(pct1(r.safety)), Cell.of(_ci(r.safety_lo, r.safety_hi))])
            data.append({"model": cell.model, "benchmark": cell.benchmark,
                         "task_id": r.task_id if is_task else "aggregate", "task": name, "n": int(r.n),
                         **{k: round(100 * getattr(r, k), 1) for k in ("sr", "sr_lo", "sr_hi", "safety", "safety_lo",
                                                                       "safety_hi")}})
    header = [[("Model", 1), ("Task (abbrev.)", 1), ("n", 1), ("SR %", 1), ("SR Wilson 95% CI", 1),
               ("Safety %", 1), ("Safety Wilson 95% CI", 1)]]
    caption = ("Per-task SR and Safety with Wilson 95% CIs, one block per model and suite, ending with the block's "
               "aggregate. Task names are abbreviated; the CSV has the task ids.")
    return PaperTable(name="table12", caption=caption, header=header, rows=rows, align="llrrrrr",
                      notes=list(notes), blocks=blocks, data=pd.DataFrame(data))


def _ci(lo: float, hi: float) -> str:
    return DASH if lo != lo else f"[{100 * lo:.1f}, {100 * hi:.1f}]"


def _task_order(task_id: str):
    head, _, tail = task_id.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (task_id, -1)
