"""The Figure 3 triptych as a vector page (PDF or SVG) through matplotlib.

A reader's PDF wants selectable, searchable text and sharp frames: titles, row labels,
panel times and the caption are real text (TrueType fonts embedded in PDF, `<text>` in
SVG), the panel borders are vector strokes, and each rendered frame is embedded once at
its own resolution with lossless Flate (PDF) or PNG (SVG) compression, never resampled
(`interpolation="none"`). The rows come from `replay.render.export.triptych_panels`, so the
pictures are the same as in the PNG layout.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

PANEL_W_IN = 2.3  # three panels and their gaps fit a 7.5 in two-column figure
GAP_IN = 0.12
TITLE_IN, LABEL_IN, SUB_IN, CAPTION_IN = 0.32, 0.38, 0.22, 0.36
LABEL_PT = 7.0
EM_PER_CHAR = 0.62  # DejaVu Sans' mean advance is about 0.55-0.6 em: a safe bound for the line fit
BORDER_PT = 3.0
TITLE = "SafeVLA-Bench successful-but-unsafe rollouts"


def _fit(line: str, width_in: float) -> float:
    """The label size in points that fits `line` on `width_in` inches (7 pt, down to 4.5)."""
    fits = width_in * 72 / (EM_PER_CHAR * max(1, len(line)))
    return max(4.5, min(LABEL_PT, fits))


def vector_triptych(rows: Sequence, *, fmt: str, titles: Sequence[str], caption: str) -> bytes:
    """The page as PDF or SVG bytes; `rows` are `replay.render.export.TriptychPanels`."""
    import matplotlib
    from matplotlib.figure import Figure

    if fmt not in ("pdf", "svg"):
        raise ValueError(f"vector triptych: expected fmt 'pdf' or 'svg', got {fmt!r}")
    h_px, w_px = rows[0].images[0].shape[:2]
    panel_h = PANEL_W_IN * h_px / w_px
    row_h = LABEL_IN + panel_h + SUB_IN + GAP_IN
    fig_w = 3 * PANEL_W_IN + 4 * GAP_IN
    fig_h = TITLE_IN + len(rows) * row_h + CAPTION_IN
    style = {"pdf.fonttype": 42, "svg.fonttype": "none", "image.composite_image": False,
             "font.family": "DejaVu Sans", "svg.hashsalt": "safevla"}  # fixed ids: same figure, same bytes
    with matplotlib.rc_context(style):
        fig = Figure(figsize=(fig_w, fig_h))

        def at(x_in: float, top_in: float) -> tuple[float, float]:
            """Figure fraction of a point given in inches from the left and from the top."""
            return x_in / fig_w, 1 - top_in / fig_h

        for c, title in enumerate(titles):
            fig.text(*at(GAP_IN + c * (PANEL_W_IN + GAP_IN) + PANEL_W_IN / 2, TITLE_IN / 2), title,
                     ha="center", va="center", fontsize=10, fontweight="bold")
        for r, row in enumerate(rows):
            top = TITLE_IN + r * row_h
            second = f"episode {row.episode}  ·  {row.caption}"
            for k, (line, colour) in enumerate(((row.label, "#141414"), (second, "#8b1a1a"))):
                fig.text(*at(GAP_IN, top + LABEL_IN * (0.3 + 0.42 * k)), line, ha="left", va="center",
                         fontsize=_fit(line, fig_w - 2 * GAP_IN), color=colour)
            for c, (img, rgb, sub) in enumerate(zip(row.images, row.borders, row.subtitles)):
                x = GAP_IN + c * (PANEL_W_IN + GAP_IN)
                left, bottom = at(x, top + LABEL_IN + panel_h)
                ax = fig.add_axes((left, bottom, PANEL_W_IN / fig_w, panel_h / fig_h))
                ax.imshow(img, interpolation="none", aspect="auto")
                ax.set_xticks([])
                ax.set_yticks([])
                for spine in ax.spines.values():
                    spine.set_edgecolor(tuple(v / 255 for v in rgb))
                    spine.set_linewidth(BORDER_PT)
                fig.text(*at(x + PANEL_W_IN / 2, top + LABEL_IN + panel_h + SUB_IN / 2), sub, ha="center",
                         va="center", fontsize=7, color="#555555")
        fig.text(*at(GAP_IN, fig_h - CAPTION_IN / 2), caption, ha="left", va="center", fontsize=7,
                 color="#555555", wrap=True)
        buf = io.BytesIO()
        metadata = {"Title": TITLE, "Creator": "SafeVLA-Bench"}
        if fmt == "pdf":
            metadata["CreationDate"] = None  # reproducible bytes
        fig.savefig(buf, format=fmt, metadata=metadata)
    return buf.getvalue()
