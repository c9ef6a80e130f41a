"""Table 9, threshold sensitivity: Safety, SBU, P[U|S] and VSI as means over each host's
cells, once per threshold variant (the presets of `assets/specs.yaml`).

The store is re-scored per variant by the what-if (`scoring.evaluate.whatif.WhatIf`)
under the report's VSI reading, so the default row equals Table 4's means. Variant labels
are written from the thresholds themselves (`variant_label`; the torque threshold is a
ratio on the per-joint limits, shown in N·m on the largest limit of the hosts present), and
`sensitivity_table` lays the means out as the paper does: one column group per host.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd

from scoring.evaluate.whatif import WhatIf
from scoring.registry.lookup import Registry
from scoring.registry.types import Preset
from scoring.report.paper_layout import layout, pct1, vsi3
from scoring.report.table_render import Cell, PaperTable
from scoring.stats.metrics import aggregate

METRICS = (("safety", "Safety"), ("sbu", "SBU"), ("p_unsafe_given_success", "P[U|S]"), ("vsi", "VSI"))


def host_of(registry: Registry, benchmark: str) -> str:
    """The registry host of `benchmark` (an unknown benchmark is its own host)."""
    try:
        return registry.benchmark(benchmark).host
    except Exception:  # noqa: BLE001
        return benchmark


def sensitivity_means(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, registry: Registry,
                      by: Sequence[str] = ("model", "suite"), vsi_saturation: str = "eq1") -> pd.DataFrame:
    """One row per (variant, host): `variant` (preset name), `label`, `host`, `cells` (how many
    cells the means are over) and the means of safety, sbu, p_unsafe_given_success and vsi.

    Applicability comes with `spec_results`' active flags; `vsi_saturation` is the VSI reading.
    """
    wi = WhatIf(episodes, spec_results, registry=registry, vsi_saturation=vsi_saturation)
    hosts = episodes["benchmark"].map(lambda b: host_of(registry, b)).to_numpy()
    benchmarks = episodes["benchmark"].unique()
    rows = []
    for name, preset in registry.presets.items():
        eps = wi.episodes_frame(episodes, preset.overrides).assign(host=hosts)
        agg = aggregate(eps, by=["host", *by], ci=False)
        label = variant_label(preset, registry, benchmarks)
        for host, g in agg.groupby("host", sort=True):
            rows.append({"variant": name, "label": label, "host": host, "cells": len(g),
                         **{key: float(g[key].mean()) for key, _ in METRICS}})
    return pd.DataFrame(rows, columns=["variant", "label", "host", "cells", *(k for k, _ in METRICS)])


def variant_label(preset: Preset, registry: Registry, benchmarks: Iterable[str]) -> str:
    """"Default: F=200N, disp=5mm, tilt=15°, τ=87N·m", "Force relaxed: F=500N", "All relaxed: ...",
    written from the preset's thresholds (groups and symbols: `sensitivity` in paper_layout.yaml)."""
    groups = layout()["sensitivity"]
    moved = {}
    for key, group in groups.items():
        fams = [f for f in group["families"] if f in registry.families]
        changed = [f for f in fams if preset.overrides.get(f, registry.spec(f).threshold) != registry.spec(f).threshold]
        if changed:
            moved[key] = changed
    shown = moved or {key: [f for f in g["families"] if f in registry.families][:1] for key, g in groups.items()}
    values = ", ".join(f"{groups[key]['symbol']}={_value(registry, fams, preset, benchmarks)}"
                       for key, fams in shown.items() if fams)
    if not moved:
        return f"Default: {values}"
    looser = {abs(preset.overrides[f]) > abs(registry.spec(f).threshold) for fams in moved.values() for f in fams}
    word = "relaxed" if looser == {True} else "tighter" if looser == {False} else "changed"
    names = "All" if len(moved) == len(groups) > 1 else " + ".join(groups[key]["name"] for key in moved)
    return f"{names} {word}: {values}"


def _value(registry: Registry, families: Sequence[str], preset: Preset, benchmarks: Iterable[str]) -> str:
    spec = registry.spec(families[0])
    value = abs(float(preset.overrides.get(spec.family, spec.threshold)))
    if spec.unit == "N":
        return f"{value:g}N"
    if spec.unit == "m":
        return f"{value * 1000:g}mm"
    if spec.unit == "deg":
        return f"{value:g}°"
    if spec.unit == "ratio":
        largest = {max(_limits(registry, b), default=0.0) for b in benchmarks}
        if len(largest) == 1 and next(iter(largest)) > 0:
            return f"{value * next(iter(largest)):g}N·m"
        return f"{value:g}× limits"
    return f"{value:g}{spec.unit}"


def torque_scale_note(registry: Registry, benchmarks: Iterable[str]) -> str:
    """What a torque variant's N·m means: every joint's limit is scaled ("" without torque
    variants, or when the hosts present have different limits and labels show the scale)."""
    scales = sorted({float(p.overrides["joint_torque"]) for p in registry.presets.values()
                     if p.overrides.get("joint_torque", 1.0) != 1.0})
    limit_sets = {_limits(registry, b) for b in benchmarks}
    if not scales or len(limit_sets) != 1 or not next(iter(limit_sets)):
        return ""
    limits = next(iter(limit_sets))
    per_scale = ["x{:g}: {}".format(scale, ", ".join(f"{scale * lim:g} N·m on joints {_joints(limits, lim)} "
                                                     f"({lim:g} N·m)" for lim in sorted(set(limits), reverse=True)))
                 for scale in scales]
    return "Torque variants scale every joint's datasheet limit; " + "; ".join(per_scale) + "."


def _limits(registry: Registry, benchmark: str) -> tuple[float, ...]:
    try:
        return tuple(registry.joint_torque_limits(benchmark))
    except Exception:  # noqa: BLE001 - an unregistered benchmark scores with the registry default
        return tuple(registry.joint_torque_limits())


def _joints(limits: Sequence[float], value: float) -> str:
    idx = [i + 1 for i, x in enumerate(limits) if x == value]
    contiguous = len(idx) > 1 and idx == list(range(idx[0], idx[-1] + 1))
    return f"{idx[0]}-{idx[-1]}" if contiguous else ", ".join(map(str, idx))


def sensitivity_table(means: pd.DataFrame, *, notes: Sequence[str] = ()) -> PaperTable:
    """Table 9 in the paper's layout: a row per variant, per host a "<host> mean" column group."""
    hosts = list(dict.fromkeys(means["host"]))
    order = {h: i for i, h in enumerate(layout()["hosts"])}
    hosts.sort(key=lambda h: (order.get(h, len(order)), h))
    titles = {h: layout()["hosts"].get(h, {}).get("short", h) for h in hosts}
    cell = {(r.variant, r.host): r for r in means.itertuples()}
    variants = list(dict.fromkeys(means["variant"]))
    labels = dict(zip(means["variant"], means["label"]))
    rows, data = [], []
    for v in variants:
        row, record = [Cell.of(labels[v])], {"variant": labels[v]}
        for h in hosts:
            r = cell.get((v, h))
            for key, head in METRICS:
                x = getattr(r, key) if r is not None else np.nan
                row.append(Cell.of(vsi3(x) if key == "vsi" else pct1(x)))
                record[f"{titles[h]} {head}"] = (round(x, 3) if key == "vsi" else round(100 * x, 1)) \
                    if np.isfinite(x) else None
        rows.append(row)
        data.append(record)
    header = [[("", 1)] + [(f"{titles[h]} mean", len(METRICS)) for h in hosts],
              [("Variant", 1)] + [(head, 1) for _ in hosts for _, head in METRICS]]
    cells = {h: int(means.loc[means["host"] == h, "cells"].max()) for h in hosts}
    over = "; ".join(f"{titles[h]} values are means over the {cells[h]} cells of {_main_table(h)}" for h in hosts)
    caption = ("Threshold sensitivity of the main aggregate safety metrics. Each row changes the thresholds its "
               f"label names, with the same episodes, applicability and success labels. {over}. Percent columns "
               "are in %.")
    return PaperTable(name="table9", caption=caption, header=header, rows=rows,
                      align="l" + "r" * len(METRICS) * len(hosts), notes=list(notes), data=pd.DataFrame(data))



def _main_table(host: str) -> str:
    number = layout()["hosts"].get(host, {}).get("main")
    return f"Table {number}" if number else f"the {host} main table"
