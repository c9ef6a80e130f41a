"""The run store as the paper's Appendix B "metrics output" (Table 13), as JSON.

Table 13 names the content: per episode the active specs, per-spec robustness, safe, sbu
and vsi; per aggregate sr, safety, sbu, p_unsafe_given_success and vsi. The layout:

    {"format": "safevla-bench/metrics-output", "version": 1,
     "registry_hash": ..., "thresholds": {family: threshold},
     "reading": {"applicability": ..., "vsi_saturation": ...},
     "protocols": {"openpi": n, ...}, "notes": [...],
     "episodes": [{"episode_id", "benchmark", "task_id", "model", "suite", "success",
                   "active_specs": [spec_id, ...], "robustness": {spec_id: rho | null},
                   "safe", "sbu", "vsi"}],
     "aggregates": [{"model", "suite", "n", "sr", "safety", "sbu",
                     "p_unsafe_given_success", "vsi", "<metric>_ci": [lo, hi]}]}

Robustness is keyed by spec id (`max_contact_force_under_200N`, Appendix B's registry
key); `null` marks a vacuously satisfied gated clause (rho = +inf: the gate never
opened). Proportions are fractions in [0, 1]; `p_unsafe_given_success` is null when SR = 0.
`protocols` counts the episodes per rollout protocol ("openpi", "lerobot (overridden)",
"not recorded" for records that do not say), so a reader knows which harness's SR it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import msgspec
import pandas as pd

from scoring.report.tables import protocol_counts
from scoring.stats.metrics import aggregate

FORMAT = "safevla-bench/metrics-output"
VERSION = 1


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def metrics_output(episodes: pd.DataFrame, spec_results: pd.DataFrame, *, manifest: Mapping | None = None,
                   reading: Mapping[str, str] | None = None, notes: Sequence[str] = (),
                   by: Sequence[str] = ("model", "suite"), seed: int = 0) -> dict:
    """The metrics-output document as plain Python (see the module docstring)."""
    scored = spec_results[~spec_results["report_only"].to_numpy(bool) & spec_results["active"].to_numpy(bool)]
    per_episode: dict[str, tuple[list, dict]] = {}
    # one pass over the columns: a pandas groupby costs ~0.6 ms per episode here
    for eid, sid, rho in zip(scored["episode_id"].to_numpy(), scored["spec_id"].to_numpy(),
                             scored["rho"].to_numpy(float)):
        active, robustness = per_episode.setdefault(eid, ([], {}))
        active.append(sid)
        robustness[sid] = _num(rho)
    rows = []
    for r in episodes.itertuples(index=False):
        active, rho = per_episode.get(r.episode_id, ([], {}))
        rows.append({"episode_id": r.episode_id, "benchmark": r.benchmark, "task_id": r.task_id, "model": r.model,
                     "suite": r.suite, "success": bool(r.success), "active_specs": active, "robustness": rho,
                     "safe": bool(r.safe), "sbu": bool(r.sbu), "vsi": float(r.vsi)})
    aggs = []
    for a in aggregate(episodes, by=by, seed=seed).to_dict("records"):
        item = {k: a[k] for k in by}
        item["n"] = int(a["n"])
        for k in ("sr", "safety", "sbu", "p_unsafe_given_success", "vsi"):
            item[k] = _num(a[k])
            item[f"{k}_ci"] = [_num(a[f"{k}_lo"]), _num(a[f"{k}_hi"])]
        aggs.append(item)
    manifest = manifest or {}
    return {"format": FORMAT, "version": VERSION, "registry_hash": manifest.get("registry_hash"),
            "thresholds": dict(manifest.get("thresholds") or {}), "reading": dict(reading or {}),
            "ci": {"proportions": "Wilson 95%", "vsi": f"percentile bootstrap 95%, 10,000 resamples, seed {seed}"},
            "protocols": protocol_counts(episodes), "notes": list(notes), "episodes": rows, "aggregates": aggs}


def encode(document: Mapping) -> bytes:
    """Indented JSON bytes (msgspec)."""
    return msgspec.json.format(msgspec.json.encode(document), indent=1) + b"\n"
