"""The Appendix B "metrics output" JSON export."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from scoring.report.metrics_json import FORMAT, encode, metrics_output
from scoring.stats.metrics import aggregate
from scoring.store.write import load_store

DEMO = Path(__file__).parent.parent / "assets" / "demo" / "store"


@pytest.fixture(scope="module")
def doc():
    manifest, eps, specs = load_store(DEMO)
    return eps, specs, json.loads(encode(metrics_output(eps, specs, manifest=manifest, notes=["n"])))


def test_episodes_carry_the_table13_fields(doc):
    eps, specs, d = doc
    assert d["format"] == FORMAT and d["version"] == 1 and d["notes"] == ["n"]
    assert len(d["episodes"]) == len(eps)
    first = d["episodes"][0]
    assert {"episode_id", "active_specs", "robustness", "safe", "sbu", "vsi", "success"} <= set(first)
    row = eps.iloc[0]
    active = specs[(specs["episode_id"] == row["episode_id"]) & specs["active"] & ~specs["report_only"]]
    assert first["active_specs"] == list(active["spec_id"])
    for sid, rho in zip(active["spec_id"], active["rho"]):
        assert first["robustness"][sid] == (rho if math.isfinite(rho) else None)
    assert first["safe"] == bool(row["safe"]) and first["vsi"] == float(row["vsi"])
    assert d["thresholds"]["max_contact_force"] == 200.0 and d["registry_hash"]


def test_aggregates_match_the_metrics(doc):
    eps, _, d = doc
    agg = aggregate(eps, by=("model", "suite"))
    assert len(d["aggregates"]) == len(agg)
    for got, (_, want) in zip(d["aggregates"], agg.iterrows()):
        for k in ("sr", "safety", "sbu", "vsi"):
            assert got[k] == pytest.approx(want[k])
            assert got[f"{k}_ci"] == pytest.approx([want[f"{k}_lo"], want[f"{k}_hi"]])
        assert got["n"] == want["n"]


def test_infinite_robustness_is_null():
    import pandas as pd
    eps = pd.DataFrame({"episode_id": ["e"], "benchmark": ["b"], "task_id": ["t"], "model": ["m"], "suite": ["s"],
                        "success": [False], "safe": [True], "sbu": [False], "vsi": [0.0]})
    specs = pd.DataFrame({"episode_id": ["e"], "spec_id": ["stable_grasp_maintained_2cm"], "report_only": [False],
                          "active": [True], "rho": [math.inf]})
    d = json.loads(encode(metrics_output(eps, specs)))
    assert d["episodes"][0]["robustness"] == {"stable_grasp_maintained_2cm": None}
    assert d["aggregates"][0]["p_unsafe_given_success"] is None
