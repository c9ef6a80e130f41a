"""The Compare page's side-by-side media: two episodes' frames as one PNG, and both played in
sync as one MP4, rendered on the render service's thread with its open replayers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dashboard import data as D
from dashboard.cached import render_service, replay_record, violations

def side_by_side(images, captions, *, gap: int = 16, title: str | None = None):
    """Frames side by side (each (H, W, 3) uint8, heights may differ) on white, one caption
    (a string or lines) under each, an optional title above; a PIL image."""
    from PIL import Image

    from replay.render.highlight import paste_tile, text_tile

    ink, clear = (20, 20, 20), (0, 0, 0, 0)
    px = max(12, max(im.shape[1] for im in images) // 30)
    lines = [[c] if isinstance(c, str) else list(c) for c in captions]
    tiles = [[text_tile(t, px, ink, clear) for t in ls] for ls in lines]
    cap_h = max(sum(t.shape[0] + 2 for t in ts) for ts in tiles) + gap // 2
    head = text_tile(title, int(px * 1.2), ink, clear) if title else None
    top = gap + (head.shape[0] + gap // 2 if head is not None else 0)
    width = sum(im.shape[1] for im in images) + gap * (len(images) + 1)
    height = top + max(im.shape[0] for im in images) + gap // 2 + cap_h + gap // 2
    canvas = np.full((height + height % 2, width + width % 2, 3), 255, np.uint8)
    if head is not None:
        paste_tile(canvas, head, gap, gap)
    x = gap
    for im, ts in zip(images, tiles):
        canvas[top:top + im.shape[0], x:x + im.shape[1]] = im[..., :3]
        y = top + im.shape[0] + gap // 2
        for t in ts:
            paste_tile(canvas, t, x, y)
            y += t.shape[0] + 2
        x += im.shape[1] + gap
    return Image.fromarray(canvas)


def png_bytes(image, dpi: int = 200) -> bytes:
    import io

    buf = io.BytesIO()
    image.save(buf, format="PNG", dpi=(dpi, dpi))
    return buf.getvalue()


def pair_figure(data: D.StoreData, key: str, rows: tuple[int, int], steps: tuple[int, int], items: tuple,
                captions, *, title: str | None = None) -> bytes:
    """PNG of both episodes' frames at their steps (violations highlighted, red border on the
    violating frame), side by side with captions; rendered through the render queue."""
    svc = render_service()
    frames = [svc.frame(f"{key}#{i}", replay_record(data, i), int(s), violations(data, key, i, items))
              for i, s in zip(rows, steps)]
    return png_bytes(side_by_side(frames, captions, title=title))


def _pair_clip_job(svc, keys, recs, vss, labels, fps, out: str, progress) -> None:
    """Runs on the render thread: both episodes frame by frame, synced by step (an episode that
    has ended holds its last frame), each over its timeline bar (`replay.render.export.Timeline`),
    side by side, written as MP4 with imageio.

    Renders with the service's open replayers (the ones the page's frames came from) instead
    of opening and closing new ones: on EGL, freeing a renderer's context can spoil the
    frames of another renderer still open on the same thread."""
    import imageio.v2 as iio

    from dashboard.replay_bridge import FRAME_SIZE
    from replay.render.export import ClipTiming, Timeline
    from replay.render.highlight import paste_tile, text_tile

    rps = [svc._replayer(k, r, tuple(FRAME_SIZE)) for k, r in zip(keys, recs)]
    bars = [Timeline(rp.width, range(rp.n_steps), violations=vs, success_step=rp.success_step, window=rp.window,
                     dt=r.dt) for rp, r, vs in zip(rps, recs, vss)]
    heads = []
    for rp, label in zip(rps, labels):
        head = np.full((28, rp.width, 3), 32, np.uint8)  # the label strip above each clip
        heads.append(paste_tile(head, text_tile(label, 14, (255, 255, 255), (0, 0, 0, 0)), 6, 4))
    n = max(rp.n_steps for rp in rps)
    # either side's violating step is held 1 s and its neighbours slowed, as in `export_clip`
    repeats = ClipTiming().repeats(range(n), [v.step for vs in vss for v in vs], fps)
    writer = iio.get_writer(out, format="FFMPEG", mode="I", fps=fps, codec="libx264", pixelformat="yuv420p",
                            macro_block_size=1, ffmpeg_log_level="error",
                            output_params=["-preset", "veryfast", "-crf", "20"])
    try:
        for step in range(n):
            panels = []
            for rp, bar, head, vs in zip(rps, bars, heads, vss):
                s = min(step, rp.n_steps - 1)
                panels.append(np.concatenate([head, rp.frame(s, violation=vs), bar.render(s)], axis=0))
            h = max(p.shape[0] for p in panels)
            panels = [np.pad(p, ((0, h - p.shape[0]), (0, 0), (0, 0)), constant_values=255) for p in panels]
            gap = np.full((h, 8, 3), 255, np.uint8)
            frame = np.concatenate([panels[0], *[x for p in panels[1:] for x in (gap, p)]], axis=1)
            for _ in range(int(repeats[step])):
                writer.append_data(frame)
            if progress is not None:
                progress(step + 1, n)
    finally:
        writer.close()


def pair_clip(data: D.StoreData, key: str, rows: tuple[int, int], items: tuple, labels, *, fps: float = 20,
              progress=None) -> bytes:
    """MP4 bytes of both episodes side by side, synced by step (progress: (done, total))."""
    import tempfile

    recs = [replay_record(data, i) for i in rows]
    vss = [violations(data, key, i, items) for i in rows]
    svc = render_service()
    keys = [f"{key}#{i}" for i in rows]  # the keys of `frame_jpeg`, so its replayers are reused
    with tempfile.TemporaryDirectory(prefix="safevla-pair-") as tmp:
        out = str(Path(tmp) / "pair.mp4")
        svc._run_with_progress(lambda cb: _pair_clip_job(svc, keys, recs, vss, list(labels), fps, out, cb), progress)
        return Path(out).read_bytes()
