"""`safevla report` and `safevla compare --perturbed` on a store holding a base suite and its
variants: the perturbation tables, their metrics.json entries and the one-model comparison."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from scoring.cli.main import main
from scoring.records.io import save_record
from scoring.records.synthetic import make_record
from scoring.registry.perturbations import SuitePerturbation
from scoring.store.write import score_archive

BASE, SWAP, MUG = "libero_spatial", "libero_spatial_swap", "libero_spatial_with_mug"
MODELS = ("policy-a", "policy-b")


def Variant(suite: str, base_suite: str, family: str, init_states_match: bool,  # noqa: N802 (reads as the type)
            task_map: tuple[int, ...] | None = (1, 0)) -> SuitePerturbation:
    """The suite registry's description of a variant, as the report reads it."""
    return SuitePerturbation(suite, base_suite, family, init_states_match, task_map, runnable=True)


KNOWN = {SWAP: Variant(SWAP, BASE, "swap", False), MUG: Variant(MUG, BASE, "distractor", True)}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """2 models x (the base suite, a swap and a distractor variant) x 2 tasks x 3 init states,
    and policy-c on the base suite only; synthetic records (60 steps); the variants' task i is
    base task 1 - i."""
    root = tmp_path_factory.mktemp("pert")
    rng = np.random.default_rng(38)
    for m_index, model in enumerate((*MODELS, "policy-c")):
        for suite in ((BASE, SWAP, MUG) if model in MODELS else (BASE,)):
            for task in (0, 1):
                for init in range(3):
                    eid = f"{suite}/task_{task}/{model}/ep_{init:03d}"
                    rec = make_record(rng, episode_id=eid, benchmark="libero-spatial", task_id=f"task_{task}",
                                      model=model, n_steps=60, contacts_per_step=4,
                                      severity=0.5 + 1.5 * m_index + (2.0 if suite == MUG else 0.0))
                    meta = {**rec.meta, "suite": suite, "seed": 7, "init_state": init}
                    save_record(dataclasses.replace(rec, meta=meta), root / "archive" / f"{eid.replace('/', '__')}.npz")
    score_archive([root / "archive"], root / "store", progress=False)
    return root / "store"


def lookup(monkeypatch):
    monkeypatch.setattr("scoring.report.outputs.registry_lookup", lambda: KNOWN.get)
    monkeypatch.setattr("scoring.cli.compare_perturbed.registry_lookup", lambda: KNOWN.get)


def test_report_adds_the_perturbation_tables(store, tmp_path, monkeypatch, capsys):
    lookup(monkeypatch)
    assert main(["report", str(store), "--out", str(tmp_path / "r")]) == 0
    table = pd.read_csv(tmp_path / "r" / "perturbation.csv")
    assert list(zip(table["model"], table["perturbation"])) == [(m, s) for s in (SWAP, MUG) for m in MODELS]
    assert table.set_index("perturbation").loc[MUG, "comparison"].str.startswith("paired on (task, init state").all()
    assert table.set_index("perturbation").loc[SWAP, "comparison"].str.contains("init states differ").all()
    assert (table["n pairs"].astype(str).isin(["6", "—"])).all()
    for suffix in (".md", ".tex"):
        assert "Base suite against perturbed variants" in (tmp_path / "r" / f"perturbation{suffix}").read_text()
    tex = (tmp_path / "r" / "perturbation.tex").read_text()
    assert tex.isascii() and r"$\Delta$ Safety pp" in tex and r"$\rightarrow$" in tex  # pdflatex reads it as is
    fams = pd.read_csv(tmp_path / "r" / "perturbation_families.csv")
    assert set(fams["perturbation"]) == {SWAP, MUG} and "bystander" in set(fams["spec"])
    doc = json.loads((tmp_path / "r" / "metrics.json").read_text())
    entries = {(e["model"], e["suite"]): e for e in doc["perturbations"]}
    assert set(entries) == {(m, s) for s in (SWAP, MUG) for m in MODELS}
    e = entries["policy-a", MUG]
    episodes = pd.read_parquet(store / "episodes.parquet")
    mine = episodes[episodes.model == "policy-a"]
    change = mine[mine.suite == MUG]["safe"].mean() - mine[mine.suite == BASE]["safe"].mean()
    assert e["pairing"] == "paired" and e["n_pairs"] == 6
    assert e["metrics"]["safety"]["change"] == pytest.approx(change)
    lo, hi = e["metrics"]["safety"]["change_ci"]
    assert lo <= change <= hi


def test_report_without_a_variant_writes_no_perturbation_table(store, tmp_path, monkeypatch):
    monkeypatch.setattr("scoring.report.outputs.registry_lookup", lambda: {}.get)
    assert main(["report", str(store), "--out", str(tmp_path / "r")]) == 0
    assert not (tmp_path / "r" / "perturbation.csv").exists()
    assert json.loads((tmp_path / "r" / "metrics.json").read_text())["perturbations"] == []


def test_compare_one_model_on_a_perturbed_suite(store, tmp_path, monkeypatch, capsys):
    lookup(monkeypatch)
    out = tmp_path / "c"
    assert main(["compare", str(store), "--models", "policy-b", "--perturbed", MUG, "--out", str(out),
                 "--resamples", "500"]) == 0
    text = capsys.readouterr().out
    assert f"compared policy-b on {MUG} (distractor) against {BASE}: paired on (task, init state, seed), 6 keys" in text
    assert text.count("verdict: ") == 4
    table = pd.read_csv(out / "compare_perturbation.csv")
    assert list(table["model"]) == ["policy-b"]
    discordant = pd.read_csv(out / "compare_perturbed_discordant.csv")
    assert set(discordant["which"]) <= {f"{MUG} only", f"{BASE} only"}
    assert discordant["episode_id_a"].str.startswith(MUG).all() and (out / "compare_perturbation_families.md").exists()
    assert main(["compare", str(store), "--models", "policy-b", "--perturbed", SWAP, "--out", str(out)]) == 0
    assert "unpaired: its init states differ" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--models", "policy-a", "policy-b", "--perturbed", MUG], "one model"),
    (["--models", "nobody", "--perturbed", MUG], "unknown model 'nobody'"),
    (["--models", "policy-a", "--perturbed", BASE], f"variants in this store with their base: {SWAP}, {MUG}"),
    (["--models", "policy-c", "--perturbed", MUG], "models that ran both libero_spatial_with_mug and libero_spatial: "
                                                    "policy-a, policy-b"),
])
def test_compare_perturbed_refuses_bad_input_in_one_line(store, tmp_path, monkeypatch, capsys, argv, message):
    lookup(monkeypatch)
    assert main(["compare", str(store), *argv, "--out", str(tmp_path / "c")]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err and len(err.splitlines()) == 1


def test_compare_reads_the_suite_registry(store, tmp_path, capsys):
    from scoring.registry.perturbations import suite_perturbation

    real = suite_perturbation(SWAP)
    assert main(["compare", str(store), "--models", "policy-a", "--perturbed", SWAP, "--out", str(tmp_path),
                 "--resamples", "200"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith(f"compared policy-a on {SWAP} ({real.family}) against {real.base_suite}: ")
    paired = real.init_states_match and real.task_map is not None
    assert ("paired on (task" in line) == paired and ("unpaired" in line) == (not paired)
