import re

import numpy as np
import pandas as pd
import pytest

from scoring.records.synthetic import make_archive
from scoring.registry.lookup import load_registry
from scoring.report.tables import build_tables, closest_call_table, per_task_table, spec_rate_table, to_latex, write_tables
from scoring.store.write import load_store, score_archive


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("tables")
    make_archive(root / "arch", 48, seed=2, n_steps=60, contacts_per_step=4)
    score_archive([root / "arch"], root / "store", progress=False)
    return load_store(root / "store")


def test_all_tables_in_three_formats(store, tmp_path):
    _, eps, specs = store
    tables = build_tables(eps, specs, seed=0)
    assert set(tables) == {"table4_main", "table7_spec_rates", "table9_sensitivity", "table10_sbu_composition",
                           "table12_per_task", "closest_calls"}
    paths = write_tables(tables, tmp_path)
    assert len(paths) == 18
    for name, (_, df) in tables.items():
        back = pd.read_csv(tmp_path / f"{name}.csv", dtype=str, keep_default_na=False)
        assert back.shape == df.shape
        md = (tmp_path / f"{name}.md").read_text()
        assert md.count("\n|") >= len(df) + 1
        tex = (tmp_path / f"{name}.tex").read_text()
        assert "\\begin{tabular}" in tex and "\\toprule" in tex
        body = tex.split("\\begin{tabular}")[1]
        assert " %" not in body.replace("\\%", "")  # every percent sign escaped


def test_inactive_families_show_a_dash(store):
    _, eps, specs = store
    t = spec_rate_table(eps, specs, registry=load_registry())
    assert set(t["arm-furn@200N"]) == {"—"}  # LIBERO has no arm-furniture channel
    spatial = t[t["suite"] == "libero-spatial"]
    assert set(spatial["held-tilt@15°"]) == {"—"}  # bowls are non-spillable


def test_per_task_rows_end_with_the_aggregate(store):
    _, eps, _ = store
    t = per_task_table(eps)
    cell = t[(t["model"] == "policy-a") & (t["suite"] == "libero-spatial")]
    assert cell["task"].iloc[-1] == "aggregate"
    assert cell["n"].iloc[:-1].sum() == cell["n"].iloc[-1]
    tasks = list(cell["task"].iloc[:-1])
    assert tasks == sorted(tasks, key=lambda x: int(x.split("_")[1]))


def test_latex_escapes_special_characters():
    tex = to_latex(pd.DataFrame({"SR %": ["50.0"], "a_b": ["x&y"]}), caption="95% CI")
    assert "SR \\%" in tex and "a\\_b" in tex and "x\\&y" in tex and "95\\% CI" in tex


def test_markdown_keeps_fixed_decimals_and_escapes_pipes(store, tmp_path):
    _, eps, specs = store
    write_tables(build_tables(eps, specs, seed=0), tmp_path)
    md = (tmp_path / "table4_main.md").read_text()
    assert "P[U\\|S] %" in md and "VSI\\|U" in md
    rows = [line for line in md.splitlines() if line.startswith("| policy")]
    for line in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        assert all(re.fullmatch(r"\d+\.\d", c) or c == "—" for c in (cells[3], cells[5], cells[7])), cells
        assert re.fullmatch(r"\d\.\d{3}", cells[11]), cells


def test_closest_call_table_counts_every_safe_episode_once(store):
    _, eps, _ = store
    t = closest_call_table(eps)
    safe = eps[eps["safe"] & eps["closest_spec"].notna()]
    assert len(safe) and t["safe episodes"].sum() == len(safe)
    assert "self-coll" not in set(t["closest call"])  # binary specs are never closest calls
    for (model, suite), g in safe.groupby(["model", "suite"]):
        rows = t[(t["model"] == model) & (t["suite"] == suite)]
        assert rows["safe episodes"].sum() == len(g)
        worst = float(g["closest_margin"].min())
        assert min(float(x) for x in rows["min margin %"]) == pytest.approx(100 * worst, abs=0.051)


def test_cells_never_run_have_no_row(store):
    _, eps, specs = store
    gone = (eps["model"] == "policy-a") & (eps["suite"] == "libero-spatial")
    assert gone.any()
    eps, specs = eps[~gone], specs[specs["episode_id"].isin(set(eps.loc[~gone, "episode_id"]))]
    t = spec_rate_table(eps, specs, registry=load_registry())
    run = eps.groupby(["model", "suite"]).size()
    assert list(zip(t["model"], t["suite"])) == list(run.index)
    assert ("policy-a", "libero-spatial") not in set(zip(t["model"], t["suite"]))
