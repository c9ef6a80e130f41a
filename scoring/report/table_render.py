"""A table in the paper's layout (grouped headers, bold / dagger marks, multi-line cells,
footnotes) and its Markdown and LaTeX renderings.

The builders in `scoring.report.paper_layout` fill a `PaperTable` with display strings (fixed
decimals per column); this module only typesets them. LaTeX needs `booktabs` (rules);
multi-line cells are nested `tabular`s, so no other package is needed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd


@dataclass(frozen=True)
class Cell:
    """One table cell: one or more lines of text, optionally bold and/or with a dagger."""

    lines: tuple[str, ...]
    bold: bool = False
    dagger: bool = False

    @classmethod
    def of(cls, text: str | tuple[str, ...], **marks) -> "Cell":
        return cls(lines=(text,) if isinstance(text, str) else tuple(text), **marks)


@dataclass(frozen=True)
class PaperTable:
    """A paper-layout table.

    Attributes:
      name: file stem (`table4`, `table10`, ...).
      caption: the table's caption.
      header: header rows, each a list of (text, column span); spans add up to the width.
      rows: body rows of `Cell`s.
      align: one LaTeX column letter per column (`l`, `r`, `c`).
      notes: footnotes printed under the table (the paper's ambiguities, the torque statement).
      blocks: body row indices before which a rule separates blocks (Table 12's cells).
      data: the same numbers in a plain frame, for the CSV.
    """

    name: str
    caption: str
    header: list[list[tuple[str, int]]]
    rows: list[list[Cell]]
    align: str
    notes: list[str] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    data: pd.DataFrame | None = None

    @property
    def width(self) -> int:
        return len(self.align)


# ------------------------------------------------------------------ Markdown

def _md_text(cell: Cell) -> str:
    text = "<br>".join(s.replace("|", "\\|") for s in cell.lines)
    if cell.bold and text:
        text = f"**{text}**"
    return text + ("†" if cell.dagger else "")


def flat_header(table: PaperTable) -> list[str]:
    """One label per column: the header rows joined top to bottom ("SR Sp", "bystander disp@5mm")."""
    cols = [[] for _ in range(table.width)]
    for row in table.header:
        i = 0
        for text, span in row:
            for j in range(i, i + span):
                if text:
                    cols[j].append(text)
            i += span
    return [" ".join(c) for c in cols]


def to_markdown(table: PaperTable) -> str:
    """GitHub Markdown: caption, a one-row header, the body, then the notes."""
    head = [h.replace("|", "\\|") for h in flat_header(table)]
    rule = [":---" if a == "l" else "---:" if a == "r" else ":---:" for a in table.align]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(_md_text(c) for c in row) + " |" for row in table.rows]
    out = [table.caption, "", *lines]
    if table.notes:
        out += [""] + [f"- {n}" for n in table.notes]
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ LaTeX

_LATEX_CHARS = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                "—": "---", "–": "--", "°": r"$^\circ$", "·": r"$\cdot$", "†": r"$^\dagger$",
                "↑": r"$\uparrow$", "↓": r"$\downarrow$", "≥": r"$\geq$", "≤": r"$\leq$", "×": r"$\times$",
                "π": r"$\pi$", "τ": r"$\tau$", "Δ": r"$\Delta$", "→": r"$\rightarrow$", "−": r"$-$",
                "x̄": r"$\bar{x}$", "<": r"$<$", ">": r"$>$", "|": r"$|$",
                "--": "-{}-"}


def latex_escape(text: str) -> str:
    """Escapes LaTeX specials and writes the few non-ASCII symbols the tables use in math mode."""
    out, i = [], 0
    while i < len(text):
        two = text[i:i + 2]
        if two in _LATEX_CHARS:
            out.append(_LATEX_CHARS[two])
            i += 2
            continue
        out.append(_LATEX_CHARS.get(text[i], text[i]))
        i += 1
    return "".join(out)


def _tex_cell(cell: Cell, align: str) -> str:
    parts = [latex_escape(s) for s in cell.lines]
    if cell.bold:
        parts = [rf"\textbf{{{p}}}" if p else p for p in parts]
    text = parts[0] if len(parts) == 1 else (rf"\begin{{tabular}}[t]{{@{{}}{align}@{{}}}}" + r" \\ ".join(parts)
                                             + r"\end{tabular}")
    return text + (r"$^\dagger$" if cell.dagger else "")


def to_latex(table: PaperTable) -> str:
    """A `table` float: booktabs rules, grouped headers with `\\cmidrule`s, notes below."""
    out = [r"\begin{table}[t]", r"\centering", rf"\caption{{{latex_escape(table.caption)}}}",
           rf"\begin{{tabular}}{{{table.align}}}", r"\toprule"]
    for r, row in enumerate(table.header):
        cells, rules, col = [], [], 1
        for text, span in row:
            label = latex_escape(text)
            cells.append(rf"\multicolumn{{{span}}}{{c}}{{{label}}}" if span > 1 else label)
            if span > 1 and text and r < len(table.header) - 1:
                rules.append(rf"\cmidrule(lr){{{col}-{col + span - 1}}}")
            col += span
        out.append(" & ".join(cells) + r" \\")
        if rules:
            out.append(" ".join(rules))
    out.append(r"\midrule")
    for i, row in enumerate(table.rows):
        if i in table.blocks and i:
            out.append(r"\midrule")
        out.append(" & ".join(_tex_cell(c, a) for c, a in zip(row, table.align)) + r" \\")
    out += [r"\bottomrule", r"\end{tabular}"]
    if table.notes:
        out.append(r"\par\smallskip\footnotesize\raggedright")
        out += [latex_escape(n) + r"\par" for n in table.notes]
    out.append(r"\end{table}")
    return "\n".join(out) + "\n"
