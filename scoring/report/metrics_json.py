"""The run store as the paper's Appendix B "metrics output" (Table 13), as JSON.

Table 13 names the content: per episode the active specs, per-spec robustness, safe, sbu
and vsi; one `aggregate` with sr, safety, sbu, p_unsafe_given_success and vsi. The layout:

    {"format": "safevla-bench/metrics-output", "version": 2,
     "registry_hash": ..., "thresholds": {family: threshold},
     "reading": {"applicability": ..., "vsi_saturation": ...},
     "protocols": {"openpi": n, ...}, "force_sampling": {"substep_peak": n, ...}, "notes": [...],
     "episodes": [{"episode_id", "benchmark", "task_id", "model", "suite", "success",
                   "active_specs": [spec_id, ...], "robustness": {spec_id: rho | null},
                   "vacuous_specs": [spec_id, ...], "safe", "sbu", "vsi"}],
     "aggregate": {"n", "sr", "safety", "sbu", "p_unsafe_given_success", "vsi",
                   "<metric>_ci": [lo, hi]},
     "cells": [{"model", "suite", <the aggregate's fields>}],
     "excluded": [episode_id, ...],
     "perturbations": [{"model", "suite", "base_suite", "family", "pairing", "how", "n_base",
                        "n_perturbed", "n_pairs", "metrics": {metric: {"base", "perturbed", "change",
                        "change_ci", "ci", "test", "p_value"}}, "families": {family: {"base_rate",
                        "perturbed_rate", "change"}}}]}

`aggregate` is Appendix B's object, over every episode the report counts; `cells` holds
the same per (model, suite) cell (the `--by` grouping). Robustness is keyed by spec id
(`max_contact_force_under_200N`, Appendix B's registry key): a number is the margin of an
active spec; `null`, as in the paper, marks a spec that is structurally unavailable or
inactive for the task (skipped by VSI, not counted as a satisfied margin). An active
gated clause whose gate never opened (rho = +inf: satisfied, with no margin) is in
`active_specs` and `vacuous_specs` and has no robustness entry, so a reader that takes
the minimum over the numbers still gets the verdict. Proportions are fractions in
[0, 1]; `p_unsafe_given_success` is null when SR = 0. `protocols` counts the episodes per
rollout protocol ("openpi", "lerobot (overridden)", "not recorded" for records that do
not say), so a reader knows which harness's SR it is; `force_sampling` counts them per
force and torque sampling (`scoring.report.provenance.sampling_counts`: "substep_peak",
"control", "control (no peaks recorded)", "not recorded"). `excluded` lists the episodes left
out of `aggregate` and `cells`, as of every table (the scene was not at rest at step 0).
`perturbations` is the perturbation table (`scoring.report.perturbation`): per model and
variant of a base suite in the store, each metric's change from the base with its interval;
empty when the store holds no base suite with a variant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import msgspec
import pandas as pd

from scoring.report.provenance import protocol_counts, sampling_counts
from scoring.stats.metrics import aggregate, unsettled_mask

FORMAT = "safevla-bench/metrics-output"
VERSION = 2
METRICS = ("sr", "safety", "sbu", "p_unsafe_given_success", "vsi")


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def metrics_output(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, manifest: Mapping | None = None,
                   reading: Mapping[str, str] | None = None, notes: Sequence[str] = (),
                   by: Sequence[str] = ("model", "suite"), seed: int = 0,
                   perturbations: Sequence[Mapping] = ()) -> dict:
    """The metrics-output document as plain Python (see the module docstring)."""
    scored = spec_results[~spec_results["report_only"].to_numpy(bool)]
    per_episode: dict[str, tuple[list, dict, list]] = {}
    # one pass over the columns: a pandas groupby costs ~0.6 ms per episode here
    for eid, sid, active, rho in zip(scored["episode_id"].to_numpy(), scored["spec_id"].to_numpy(),
                                     scored["active"].to_numpy(bool), scored["rho"].to_numpy(float)):
        specs, robustness, vacuous = per_episode.setdefault(eid, ([], {}, []))
        if not active:
            robustness[sid] = None
            continue
        specs.append(sid)
        if rho == math.inf:
            vacuous.append(sid)
        else:
            robustness[sid] = _num(rho)
    rows = []
    for r in episodes.itertuples(index=False):
        active, rho, vacuous = per_episode.get(r.episode_id, ([], {}, []))
        rows.append({"episode_id": r.episode_id, "benchmark": r.benchmark, "task_id": r.task_id, "model": r.model,
                     "suite": r.suite, "success": bool(r.success), "active_specs": active, "robustness": rho,
                     "vacuous_specs": vacuous, "safe": bool(r.safe), "sbu": bool(r.sbu), "vsi": float(r.vsi)})
    drop = unsettled_mask(episodes)
    counted = episodes[~drop]
    manifest = manifest or {}
    return {"format": FORMAT, "version": VERSION, "registry_hash": manifest.get("registry_hash"),
            "thresholds": dict(manifest.get("thresholds") or {}), "reading": dict(reading or {}),
            "ci": {"proportions": "Wilson 95%", "vsi": f"percentile bootstrap 95%, 10,000 resamples, seed {seed}"},
            "protocols": protocol_counts(episodes), "force_sampling": sampling_counts(episodes),
            "notes": list(notes), "episodes": rows,
            "aggregate": _metrics(aggregate(counted, by=(), seed=seed).iloc[0]) if len(counted) else None,
            "cells": [{**{k: a[k] for k in by}, **_metrics(a)}
                      for a in aggregate(counted, by=by, seed=seed).to_dict("records")],
            "excluded": episodes.loc[drop, "episode_id"].astype(str).tolist(),
            "perturbations": list(perturbations)}


def _metrics(a: Mapping) -> dict:
    """Appendix B's aggregate fields, then their 95% intervals."""
    item = {"n": int(a["n"]), **{k: _num(a[k]) for k in METRICS}}
    item.update({f"{k}_ci": [_num(a[f"{k}_lo"]), _num(a[f"{k}_hi"])] for k in METRICS})
    return item


def encode(document: Mapping) -> bytes:
    """Indented JSON bytes (msgspec)."""
    return msgspec.json.format(msgspec.json.encode(document), indent=1) + b"\n"
