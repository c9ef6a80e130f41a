"""Triptych export as a reader's PDF: the vector page against the raster PDF it
replaces, on the same rendered panels of real LIBERO rollouts from the bundled demo store.

The three Figure 3 episodes of docs/replay.md are rendered once (`triptych_panels`, 480x360,
quality "high"), then laid out both ways: `raster_pdf` (the Pillow page of before: one
JPEG-compressed bitmap, text as pixels) and `vector_pdf` (`replay.render.triptych_vector`: text as
text, frames Flate-compressed at their own size). Also timed: the unpaired comparison of the
demo store's three models (`scoring.stats.compare_unpaired`, 10,000 resamples), against the paired
one on the same episodes. Prints one JSON line.

Usage: MUJOCO_GL=egl python benchmarks/bench_export.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from replay.render.cli import store_record, violations_from_store  # noqa: E402
from replay.render.export import CAPTION, TITLES, TriptychRow, compose_raster, triptych_panels  # noqa: E402
from replay.render.triptych_vector import vector_triptych  # noqa: E402
from scoring.stats.compare import compare_models  # noqa: E402
from scoring.stats.compare_unpaired import compare_unpaired  # noqa: E402

STORE = ROOT / "assets" / "demo" / "store"
EPISODES = ("libero-spatial/task_6/scripted-hasty/ep_001", "libero-object/task_3/scripted-hasty/ep_000",
            "libero-spatial/task_5/scripted-sloppy/ep_000")


def median_time(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def raster_pdf(rows) -> bytes:
    buf = io.BytesIO()
    compose_raster(rows).save(buf, format="PDF", resolution=200.0)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    items = []
    for eid in EPISODES:
        rec = store_record(STORE, eid)
        items.append(TriptychRow(rec, violations_from_store(STORE, eid, record=rec)[0]))
    t0 = time.perf_counter()
    rows = triptych_panels(items)
    render_s = time.perf_counter() - t0
    raster_s, raster = median_time(lambda: raster_pdf(rows), args.repeat)
    vector_s, vector = median_time(lambda: vector_triptych(rows, fmt="pdf", titles=TITLES, caption=CAPTION),
                                   args.repeat)
    episodes = pd.read_parquet(STORE / "episodes.parquet")
    models = sorted(episodes["model"].unique())
    paired_s, _ = median_time(lambda: compare_models(episodes, models), args.repeat)
    unpaired_s, _ = median_time(lambda: compare_unpaired(episodes, models), args.repeat)
    print(json.dumps({
        "bench": "export", "rows": len(rows), "panel_px": [480, 360], "render_panels_s": round(render_s, 2),
        "raster_pdf_s": round(raster_s, 3), "raster_pdf_bytes": len(raster),
        "vector_pdf_s": round(vector_s, 3), "vector_pdf_bytes": len(vector),
        "vector_vs_raster_time": round(vector_s / raster_s, 2),
        "vector_vs_raster_bytes": round(len(vector) / len(raster), 2),
        "raster_pdf_jpeg": b"/DCTDecode" in raster, "vector_pdf_jpeg": b"/DCTDecode" in vector,
        "compare_paired_s": round(paired_s, 3), "compare_unpaired_s": round(unpaired_s, 3),
        "unpaired_vs_paired_time": round(unpaired_s / paired_s, 2), "episodes": len(episodes)}))


if __name__ == "__main__":
    main()
