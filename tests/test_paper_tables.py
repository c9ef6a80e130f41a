"""Paper-layout tables (Tables 4/5, 7/8, 9, 10/11, 12): golden files on a small fixed store,
LaTeX that compiles, and the layout rules (bold, dagger, labels, decimals, task names).

Regenerate the golden files after a deliberate change with
    SAFEVLA_UPDATE_GOLDEN=1 .venv/bin/python -m pytest -q tests/test_paper_tables.py
and review the diff.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from paper_fixture import build_store
from scoring.cli.main import main
from scoring.registry.lookup import load_registry
from scoring.report.table_render import Cell, PaperTable, latex_escape, to_latex, to_markdown
from scoring.store.write import load_store

GOLDEN = Path(__file__).parent / "golden" / "paper_tables"
PAPER = ("table4", "table5", "table7", "table8", "table9", "table10", "table11", "table12")
UPDATE = os.environ.get("SAFEVLA_UPDATE_GOLDEN") == "1"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("paper")
    store = build_store(root)
    assert main(["report", str(store), "--out", str(root / "report")]) == 0
    return store, root / "report"


@pytest.mark.parametrize("name", PAPER)
@pytest.mark.parametrize("ext", ("md", "tex"))
def test_paper_table_matches_golden_file(report, name, ext):
    got = (report[1] / "paper" / f"{name}.{ext}").read_text()
    golden = GOLDEN / f"{name}.{ext}"
    if UPDATE:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(got)
    assert got == golden.read_text(), f"{name}.{ext} differs from {golden} (see the module docstring to update)"


def _document(tex_files) -> str:
    body = "\n".join(f"\\input{{{p}}}\n\\clearpage" for p in tex_files)
    return ("\\documentclass{article}\n\\usepackage[T1]{fontenc}\n\\usepackage{booktabs}\n"
            "\\usepackage[a3paper,landscape,margin=1cm]{geometry}\n\\begin{document}\n" + body + "\n\\end{document}\n")


def test_latex_compiles(report, tmp_path):
    tex = sorted((report[1] / "paper").glob("*.tex")) + sorted(report[1].glob("*.tex"))
    # the paper's layouts, and the long tables: 4, 7, 9, 10, 12 and the closest calls of safe episodes
    assert len(tex) == len(PAPER) + 6
    (tmp_path / "all.tex").write_text(_document(tex))
    pdflatex = shutil.which("pdflatex")
    if pdflatex is None:  # scripts/install.sh installs texlive; without it check the structure only
        text = "".join(p.read_text() for p in tex)
        assert text.count("\\begin{") == text.count("\\end{") and text.count("{") == text.count("}")
        pytest.skip("pdflatex not installed (scripts/install.sh installs texlive-latex-base); structure checked")
    run = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "all.tex"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:]
    assert (tmp_path / "all.pdf").read_bytes()[:5] == b"%PDF-"
    assert "Missing character" not in (tmp_path / "all.log").read_text()


def test_main_table_rows_are_models_with_suites_in_paper_order(report):
    text = (report[1] / "paper" / "table4.md").read_text()
    head = next(line for line in text.splitlines() if line.startswith("| Model"))
    cols = [c.strip() for c in head.strip("|").split("|")]
    assert cols[:3] == ["Model", "Train", "SR (%) ↑ Sp"]
    assert [c.split()[-1] for c in cols[2:7]] == ["Sp", "Ob", "Go", "Lo", "x̄"]
    assert cols[-1] == "VSI ↓ x̄"
    body = [line for line in text.splitlines() if line.startswith("| policy")]
    assert [line.split("|")[1].strip() for line in body] == ["policy-a", "policy-b", "policy-c"]
    assert [line.split("|")[2].strip() for line in body] == ["SFT", "RL", "—"]  # policy-c's records say nothing


def _first_column(text: str) -> list[str]:
    return [c for c in (line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| policy")
                        or line.startswith("|  |")) if c]


def test_model_order_is_a_choice_not_the_alphabet(report, tmp_path, capsys):
    store, _ = report
    assert main(["report", str(store), "--out", str(tmp_path), "--model-order", "policy-c,policy-b"]) == 0
    want = ["policy-c", "policy-b", "policy-a"]  # the named ones first, then the store's order
    for name in ("table4", "table5", "table10"):
        assert _first_column((tmp_path / "paper" / f"{name}.md").read_text()) == want, name
    assert list(dict.fromkeys(pd.read_csv(tmp_path / "paper" / "table7.csv")["model"])) == want
    assert list(dict.fromkeys(pd.read_csv(tmp_path / "paper" / "table12.csv")["model"])) == want
    t11 = (tmp_path / "paper" / "table11.md").read_text()
    assert "| policy-c | policy-b | policy-a |" in t11  # transposed: models are columns
    assert main(["report", str(store), "--out", str(tmp_path), "--model-order", "policy-c,pi0"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'pi0'" in err and "policy-a, policy-b, policy-c" in err


def test_models_default_to_their_first_appearance_in_the_store():
    from scoring.report.paper_layout import main_tables, spec_rate_tables
    _, eps, specs = load_store(Path(__file__).parent.parent / "assets" / "demo" / "store")
    last_first = pd.concat([eps[eps["model"] == "scripted-sloppy"], eps[eps["model"] != "scripted-sloppy"]])
    t4 = next(t for t in main_tables(last_first, registry=load_registry()) if t.name == "table4")
    assert [r[0].lines[0] for r in t4.rows] == ["scripted-sloppy", "scripted-careful", "scripted-hasty"]
    t7 = spec_rate_tables(last_first, specs, registry=load_registry())[0]
    assert [r[0].lines[0] for r in t7.rows if r[0].lines[0]][0] == "scripted-sloppy"


def test_bold_marks_the_best_and_dagger_the_largest_sbu(report):
    data = pd.read_csv(report[1] / "paper" / "table4.csv")
    text = (report[1] / "paper" / "table4.md").read_text()
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| policy")}
    assert list(data.columns[:4]) == ["model", "train", "SR Sp", "SR Ob"] and "VSI mean" in data.columns
    for col in ("SR Sp", "Safety mean", "SBU Go", "VSI mean"):
        j = list(data.columns).index(col)
        best = data[col].max() if col.split()[0] in ("SR", "Safety") else data[col].min()
        for _, r in data.iterrows():
            cell = rows[r["model"]][j]
            assert cell.startswith("**") == (r[col] == best), (col, r["model"], cell)
            if col.startswith("SBU"):
                assert cell.endswith("†") == (r[col] == data[col].max())


def test_fixed_decimals_per_column(report):
    for name in ("table4", "table5"):
        text = (report[1] / "paper" / f"{name}.md").read_text()
        for line in text.splitlines():
            if not line.startswith("| policy"):
                continue
            cells = [c.strip().strip("*").rstrip("†") for c in line.strip().strip("|").split("|")][2:]
            assert all(re.fullmatch(r"\d+\.\d", c) for c in cells[:-1]), cells
            assert re.fullmatch(r"\d\.\d{3}", cells[-1]), cells


def test_labels_are_the_papers(report):
    t7 = (report[1] / "paper" / "table7.md").read_text()
    assert "bystander disp@5mm" in t7 and "torque @87Nm" in t7 and "max-force @200N" in t7
    assert "1x limit" not in t7 and "bystander@" not in t7
    t10 = (report[1] / "paper" / "table10.md").read_text()
    assert re.search(r"(disp@5mm|max-force@200N|grasp-slip@2cm) \d+%", t10)


def test_table9_is_two_level_with_labels_from_the_thresholds(report):
    text = (report[1] / "paper" / "table9.md").read_text()
    head = next(line for line in text.splitlines() if line.startswith("| Variant"))
    assert "LIBERO mean Safety" in head and "RoboCasa-365 mean VSI" in head and "P[U\\|S]" in head
    assert "| Default: F=200N, disp=5mm, tilt=15°, τ=87N·m |" in text
    assert "| Torque relaxed: τ=174N·m |" in text and "176" not in text
    assert "x2: 174 N·m on joints 1-4 (87 N·m)" in text
    tex = (report[1] / "paper" / "table9.tex").read_text()
    assert r"\multicolumn{4}{c}{LIBERO mean}" in tex and r"\cmidrule(lr){2-5}" in tex


def test_composition_is_a_grid(report):
    text = (report[1] / "paper" / "table10.md").read_text()
    head = next(line for line in text.splitlines() if line.startswith("| "))
    assert [c.strip() for c in head.strip().strip("|").split("|")] == ["", "Spatial", "Object", "Goal", "Long"]
    assert sum(line.startswith("| policy") for line in text.splitlines()) == 3
    t11 = (report[1] / "paper" / "table11.md").read_text()  # one suite: transposed, as the paper's Table 11
    assert "| atomic-seen |" in t11 and "| policy-a | policy-b | policy-c |" in t11


def test_per_task_shows_names_and_the_csv_keeps_ids(report):
    text = (report[1] / "paper" / "table12.md").read_text()
    assert "pick_bowl_between_plate_and_ramekin" in text and "aggregate (LIBERO-Spatial)" in text
    assert "| task_0 |" not in text
    data = pd.read_csv(report[1] / "paper" / "table12.csv")
    row = data[(data["benchmark"] == "libero-spatial") & (data["task_id"] == "task_0")].iloc[0]
    assert row["task"] == "pick_bowl_between_plate_and_ramekin"
    rc = data[data["benchmark"] == "robocasa-365"]
    assert set(rc["task"]) >= {"PickPlaceCounterToStove", "aggregate (RoboCasa-365 atomic-seen)"}


def test_footnotes_state_the_ambiguities(report):
    t4 = (report[1] / "paper" / "table4.md").read_text()
    assert "of the 10 Goal tasks (8 with either)" in t4 and "700 N" in t4
    assert "Goal" not in (report[1] / "paper" / "table5.md").read_text().split("\n- ", 1)[1]
    t7, t8 = ((report[1] / "paper" / f"{name}.md").read_text() for name in ("table7", "table8"))
    # synthetic torque spikes are on joint 2 (scoring.records.synthetic): the attribution reads the trajectories,
    # and the LIBERO clipping facts are stated without claiming joint 5 alone can violate
    assert re.search(r"Joint 5 carries 0 of (\d+) torque violations \(0\.0%\); other joints: joint 2: \1", t7)
    assert "LIBERO's simulator clips" in t7 and "not clipped that way" in t7
    assert "only joint 5 (datasheet 12 N·m) can" not in t7
    assert "LIBERO" not in t8 and "simulator" not in t8 and "Joint torque: No torque violations" in t8


def test_other_groupings_write_only_the_long_tables(report, tmp_path):
    store, _ = report
    assert main(["report", str(store), "--out", str(tmp_path), "--by", "model"]) == 0
    assert not (tmp_path / "paper").exists() and (tmp_path / "table4_main.md").exists()


def test_bad_options_exit_with_one_line(report, capsys):
    store, _ = report
    assert main(["report", str(store), "--applicability", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "appendix-d" in err and "paper-tables" in err


# ------------------------------------------------------------------ rendering units

def test_renderers_on_a_hand_made_table():
    t = PaperTable(name="t", caption="Cap 95%", header=[[("", 1), ("SR", 2)], [("Model", 1), ("a_b", 1), ("x̄", 1)]],
                   rows=[[Cell.of("m&1"), Cell.of("1.0", bold=True), Cell.of(("l1", "l2"), dagger=True)]],
                   align="lrr", notes=["note —"])
    md = to_markdown(t)
    assert "| Model | SR a_b | SR x̄ |" in md and "**1.0**" in md and "l1<br>l2†" in md and "- note —" in md
    tex = to_latex(t)
    assert r"\multicolumn{2}{c}{SR}" in tex and r"\cmidrule(lr){2-3}" in tex and r"\textbf{1.0}" in tex
    assert r"m\&1" in tex and r"a\_b" in tex and r"$\bar{x}$" in tex and "Cap 95\\%" in tex
    assert r"\begin{tabular}[t]{@{}r@{}}l1 \\ l2\end{tabular}$^\dagger$" in tex and "note ---" in tex


@pytest.mark.parametrize("text, expected", [
    ("50%", r"50\%"), ("a_b", r"a\_b"), ("15°", r"15$^\circ$"), ("—", "---"), ("--x", "-{}-x"),
    ("π0.5", r"$\pi$0.5"), ("{x}", r"\{x\}"), ("", ""),
])
def test_latex_escape(text, expected):
    assert latex_escape(text) == expected


def test_demo_store_paper_tables_have_no_registry_surprises():
    """Every family of the registry has a paper label, every LIBERO task a short name."""
    from scoring.report.paper_layout import layout
    reg = load_registry()
    assert set(layout()["labels"]) == set(reg.families)
    for bench in ("libero-spatial", "libero-object", "libero-goal", "libero-10"):
        assert set(layout()["task_names"][bench]) == set(reg.task_ids(bench))
    from scoring.registry.perturbations import suite_perturbation
    _, eps, _ = load_store(Path(__file__).parent.parent / "assets" / "demo" / "store")
    # the demo's LIBERO-PRO variants (libero-spatial-with-mug, -swap) are no paper suite: the
    # perturbation table reports them; every other benchmark has its paper column
    variants = {b for b in set(eps["benchmark"]) if suite_perturbation(b) is not None}
    assert variants == {"libero-spatial-with-mug", "libero-spatial-swap"}
    assert set(eps["benchmark"]) - variants <= set(layout()["suites"])


def test_a_model_missing_a_suite_gets_a_dash_and_a_mean_over_the_rest(report):
    from scoring.report.paper_layout import main_tables
    from scoring.report.table_render import flat_header
    store, _ = report
    _, eps, _ = load_store(store)
    eps = eps[~((eps["model"] == "policy-c") & (eps["benchmark"] == "libero-10"))]
    t4 = next(t for t in main_tables(eps, registry=load_registry()) if t.name == "table4")
    head = flat_header(t4)
    row = {h: c.lines[0] for h, c in zip(head, t4.rows[2])}
    assert row["Model"] == "policy-c" and row["SR (%) ↑ Lo"] == "—"
    sr = [float(row[f"SR (%) ↑ {s}"]) for s in ("Sp", "Ob", "Go")]
    assert row["SR (%) ↑ x̄"] == f"{sum(sr) / 3:.1f}"
    assert any("Mean over the suites present for policy-c" in n for n in t4.notes)
