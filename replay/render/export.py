"""Video and figure export of replays: clips with a timeline bar, and the Figure 3 triptych.

`export_clip` writes MP4 (libx264 through imageio-ffmpeg) or GIF (Pillow): each rendered
frame sits above a timeline bar that shades the highlighted window of every violation,
ticks its violating step red and the success step green, and marks the current step.
`export_triptych` writes the paper's Figure 3: per episode the initial frame, the
violating frame (red border, caption) and the final success frame (green border), with
column titles, a label per row and a caption row, as PNG, PDF or SVG. The dashboard uses
`iter_clip_frames` and `triptych_image` to get the same pictures in memory.
"""

from __future__ import annotations

import dataclasses
import io
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from replay.render.highlight import (SUCCESS_RGB, VIOLATION_RGB, RenderError, Violation, border_width, draw_border,
                                     paste_tile, text_tile)
from replay.render.replayer import Replayer
from scoring.records.io import atomic_write_bytes, load_record
from scoring.records.schema import EpisodeRecord

CLIP_SUFFIXES = (".mp4", ".gif")
FIGURE_SUFFIXES = (".png", ".pdf", ".svg")
Progress = Callable[[int, int], None]


def _record(record: EpisodeRecord | str | os.PathLike) -> EpisodeRecord:
    return record if isinstance(record, EpisodeRecord) else load_record(record)


def _even_size(size: Sequence[int]) -> tuple[int, int]:
    if len(size) != 2 or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 16
                                 for s in size):
        raise RenderError(f"size: expected (width, height) in pixels, each >= 16, got {size!r}")
    return int(size[0]) + int(size[0]) % 2, int(size[1]) + int(size[1]) % 2


def _violations(violations: Violation | Sequence[Violation] | None) -> tuple[Violation, ...]:
    vs = () if violations is None else (violations,) if isinstance(violations, Violation) else tuple(violations)
    if not all(isinstance(v, Violation) for v in vs):
        raise RenderError(f"violations: expected Violation objects, got {violations!r}")
    return vs


# ----------------------------------------------------------------- timeline bar

class Timeline:
    """The bar under each clip frame: the step range as a track, each violation's highlighted
    window shaded and its step ticked red, the success step ticked green, a white cursor at
    the current step, and the step (and time) printed right of the track."""

    def __init__(self, width: int, steps: range, *, violations: Sequence[Violation] = (),
                 success_step: int | None = None, window: int = 0, dt: float | None = None):
        self.width, self.steps, self.dt = width, steps, dt if width >= 400 else None
        self.height = max(24, 2 * round(width / 40))  # even, so frame + bar stays even
        self.pad = max(6, width // 60)
        self.px = max(10, self.height // 2)
        self.label_w = text_tile(self._label(steps.stop - 1), self.px).shape[1] + self.pad
        self.track_end = width - self.pad - self.label_w
        bar = np.full((self.height, width, 3), 32, np.uint8)
        y0, y1 = self.height // 2 - self.height // 6, self.height // 2 + self.height // 6
        bar[y0:y1, self.pad:self.track_end] = 96
        for v in violations:
            bar[y0:y1, self.x(v.step - window):self.x(v.step + window) + 1] = (140, 50, 50)
        ticks = [(v.step, VIOLATION_RGB) for v in violations]
        if success_step is not None and success_step in steps:
            ticks.append((success_step, SUCCESS_RGB))
        for step, rgb in ticks:
            x = self.x(step)
            bar[2:-2, max(0, x - 1):x + 2] = rgb
        self.base = bar

    def _label(self, step: int) -> str:
        return f"{step}/{self.steps.stop - 1}" + (f"  t={step * self.dt:.2f}s" if self.dt else "")

    def x(self, step: int) -> int:
        """The pixel column of `step` on the track."""
        frac = min(1.0, max(0.0, (step - self.steps.start) / max(1, len(self.steps) - 1)))
        return self.pad + round(frac * (self.track_end - self.pad - 1))

    def render(self, step: int) -> np.ndarray:
        bar = self.base.copy()
        x = self.x(step)
        bar[:, max(0, x - 1):x + 2] = 255
        tile = text_tile(self._label(step), self.px, (255, 255, 255), (0, 0, 0, 0))
        paste_tile(bar, tile, self.track_end + self.pad, max(0, (self.height - tile.shape[0]) // 2))
        return bar


# ----------------------------------------------------------------- clips

@dataclasses.dataclass(frozen=True)
class ClipTiming:
    """How long each step stays on screen, so that a one-step violation does not flash past
    in one 50 ms frame: the violating step is held `hold_s` seconds, and the `slow_radius`
    steps either side of it play `slow_factor` times slower. Every other step is one frame.
    MP4 repeats frames (constant frame rate); GIF merges the repeats into longer durations.
    """

    hold_s: float = 1.0
    slow_radius: int = 5
    slow_factor: int = 4

    def __post_init__(self):
        for name, value, low in (("hold_s", self.hold_s, 0), ("slow_radius", self.slow_radius, 0),
                                 ("slow_factor", self.slow_factor, 1)):
            number = (int, float) if name == "hold_s" else (int,)
            if isinstance(value, bool) or not isinstance(value, number) or not low <= value <= 1000:
                raise RenderError(f"ClipTiming.{name}: expected a number in [{low}, 1000]"
                                  f"{' (an integer)' if name != 'hold_s' else ''}, got {value!r}")

    def repeats(self, steps: range, violation_steps: Iterable[int], fps: float) -> np.ndarray:
        """Frames per step of `steps` (int array, >= 1) at `fps`."""
        out = np.ones(len(steps), dtype=np.int64)
        hold = max(1, round(self.hold_s * fps))
        for v in set(int(x) for x in violation_steps):
            lo, hi = max(v - self.slow_radius, steps.start), min(v + self.slow_radius + 1, steps.stop)
            if lo < hi:
                out[lo - steps.start:hi - steps.start] = np.maximum(out[lo - steps.start:hi - steps.start],
                                                                    self.slow_factor)
            if v in steps:
                out[v - steps.start] = max(out[v - steps.start], hold)
        return out

    def frame_steps(self, steps: range, violation_steps: Iterable[int], fps: float) -> np.ndarray:
        """The step each frame of the clip shows (int array, one entry per frame): what a
        player synced to the clip's time needs, since time no longer maps to step / fps."""
        return np.repeat(np.arange(steps.start, steps.stop), self.repeats(steps, violation_steps, fps))


def iter_clip_frames(record: EpisodeRecord | str | os.PathLike, *, violations=(), size=(640, 480),
                     window: int | None = None, step_range: tuple[int, int] | None = None,
                     camera: str | None = None, quality: str = "fast", timeline: bool = True,
                     timing: ClipTiming | None = None, fps: float = 20,
                     progress: Progress | None = None) -> Iterator[np.ndarray]:
    """Yields the clip's frames (rendered frame over its timeline bar), uint8 (H', W, 3):
    one per step, or with `timing` each step repeated as `timing.repeats` says at `fps`."""
    rec = _record(record)
    vs = _violations(violations)
    width, height = _even_size(size)
    kw = {} if window is None else {"window": window}
    with Replayer(rec, width=width, height=height, camera=camera, quality=quality, **kw) as rp:
        n = rp.n_steps
        start, stop = (0, n) if step_range is None else step_range
        if not (isinstance(start, (int, np.integer)) and isinstance(stop, (int, np.integer))) \
                or not 0 <= start < stop <= n:
            raise RenderError(f"step_range: expected (start, stop) with 0 <= start < stop <= {n}, "
                              f"got {step_range!r}")
        steps = range(int(start), int(stop))
        bar = Timeline(width, steps, violations=vs, success_step=rp.success_step, window=rp.window,
                       dt=rec.dt) if timeline else None
        repeats = np.ones(len(steps), np.int64) if timing is None else timing.repeats(steps, [v.step for v in vs], fps)
        for i, s in enumerate(steps):
            img = rp.frame(s, violation=vs)
            img = np.concatenate([img, bar.render(s)], axis=0) if bar is not None else img
            for _ in range(int(repeats[i])):
                yield img
            if progress is not None:
                progress(i + 1, len(steps))


def export_clip(record: EpisodeRecord | str | os.PathLike, out_path: str | os.PathLike, *,
                violations: Violation | Sequence[Violation] | None = (), fps: float = 20,
                size: tuple[int, int] = (640, 480), window: int | None = None,
                step_range: tuple[int, int] | None = None, camera: str | None = None,
                quality: str = "fast", timing: ClipTiming | None = ClipTiming(),
                progress: Progress | None = None) -> Path:
    """Writes the replay as `.mp4` (H.264) or `.gif`, with a timeline bar; returns the path.

    `violations` are highlighted on their step and `window` steps around it (default 3);
    `timing` holds each violating step (1 s) and slows its neighbours (4x, 5 steps either
    side) by default; `timing=None` plays every step for one frame (1/fps s).
    `step_range` = (start, stop) exports part of the episode; odd sizes are rounded up to
    even (libx264 needs even sizes). The file appears atomically when complete.
    """
    out = Path(out_path)
    if out.suffix.lower() not in CLIP_SUFFIXES:
        raise RenderError(f"unsupported clip format {out.suffix!r}; expected {' or '.join(CLIP_SUFFIXES)}")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not 0 < fps <= 240:
        raise RenderError(f"fps: expected a number in (0, 240], got {fps!r}")
    if timing is not None and not isinstance(timing, ClipTiming):
        raise RenderError(f"timing: expected a ClipTiming or None, got {timing!r}")
    frames = iter_clip_frames(record, violations=violations, size=size, window=window, step_range=step_range,
                              camera=camera, quality=quality, timing=timing, fps=fps, progress=progress)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.{os.getpid()}.tmp{out.suffix}")
    try:
        if out.suffix.lower() == ".mp4":
            _write_mp4(tmp, frames, fps)
        else:
            _write_gif(tmp, frames, fps)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def _write_mp4(path: Path, frames: Iterable[np.ndarray], fps: float) -> None:
    import imageio.v2 as iio

    writer = iio.get_writer(str(path), format="FFMPEG", mode="I", fps=fps, codec="libx264",
                            pixelformat="yuv420p", macro_block_size=1, ffmpeg_log_level="error",
                            output_params=["-preset", "veryfast", "-crf", "20"])
    try:
        for f in frames:
            writer.append_data(f)
    finally:
        writer.close()


def _write_gif(path: Path, frames: Iterable[np.ndarray], fps: float) -> None:
    from PIL import Image

    # a held step arrives as repeated frames: merge each run into one frame of a longer duration
    images, durations, last = [], [], None
    for f in frames:
        if last is not None and np.array_equal(f, last):
            durations[-1] += 1000 / fps
            continue
        images.append(Image.fromarray(f).convert("P", palette=Image.Palette.ADAPTIVE, colors=255))
        durations.append(1000 / fps)
        last = f
    images[0].save(path, format="GIF", save_all=True, append_images=images[1:],
                   duration=[round(d) for d in durations], loop=0, optimize=False, disposal=1)


# ----------------------------------------------------------------- triptych

@dataclasses.dataclass(frozen=True)
class TriptychRow:
    """One episode of the triptych: its record, the violation to show, and a row label."""

    record: EpisodeRecord
    violation: Violation | None
    label: str | None = None


def _row(item) -> TriptychRow:
    if isinstance(item, TriptychRow):
        row = item
    elif isinstance(item, (tuple, list)) and 2 <= len(item) <= 3:
        vs = _violations(item[1])
        row = TriptychRow(_record(item[0]), vs[0] if vs else None, *item[2:])
    else:
        raise RenderError(f"triptych item: expected TriptychRow or (record, violations[, label]), got {item!r:.80}")
    if row.violation is None:
        raise RenderError(f"episode {row.record.episode_id!r} has no violation: the triptych's violating frame "
                          "needs an unsafe episode (pick one with safe == False)")
    return row


TITLES = ("Initial state", "Safety violation", "Task success")
CAPTION = ("Initial state · safety-violating moment (red border: worst spec, its value and threshold) · "
           "final task success (green border)")
NEUTRAL_RGB = (200, 200, 200)


@dataclasses.dataclass(frozen=True)
class TriptychPanels:
    """One rendered row of the triptych, before layout (raster or vector).

    Fields:
        label: the row label (model and task language, or the caller's label).
        episode: the episode id.
        caption: the violation's caption (worst spec, its value and threshold).
        images: the initial, violating and final frames, uint8 (h, w, 3); the violating one
            carries its close-up inset.
        borders: RGB of each panel's frame: grey, red, and green (grey without success).
        subtitles: each panel's time and step ("t = 1.20 s (step 24)").
    """

    label: str
    episode: str
    caption: str
    images: tuple[np.ndarray, np.ndarray, np.ndarray]
    borders: tuple[tuple[int, int, int], ...]
    subtitles: tuple[str, str, str]


def triptych_panels(items: Iterable, *, size: tuple[int, int] = (480, 360), camera: str | None = None,
                    quality: str = "high", inset: bool = True,
                    progress: Progress | None = None) -> list[TriptychPanels]:
    """Renders the three frames of every (record, violation) item: one `TriptychPanels` each."""
    rows = [_row(it) for it in items]
    if not rows:
        raise RenderError("triptych: expected at least one episode")
    w, h = _even_size(size)
    out, done = [], 0
    for row in rows:
        rec, v = row.record, row.violation
        label = row.label or " · ".join(x for x in (rec.model if rec.model != "unknown" else None,
                                                     str(rec.meta.get("language") or rec.task_id)) if x)
        with Replayer(rec, width=w, height=h, camera=camera, quality=quality, window=0) as rp:
            final = rp.success_step if rp.success_step is not None else rp.n_steps - 1
            panels = ((0, None, NEUTRAL_RGB, "t = 0.00 s"),
                      (v.step, v, VIOLATION_RGB, f"t = {v.step * rec.dt:.2f} s (step {v.step})"),
                      (final, None, SUCCESS_RGB if rec.success else NEUTRAL_RGB,
                       f"t = {final * rec.dt:.2f} s (step {final})" + ("" if rec.success else " (no success)")))
            images = []
            for c, (step, viol, _, _) in enumerate(panels):
                img = rp.frame(step, violation=viol, highlight=c != 0)
                if viol is not None and inset:
                    _add_inset(img, rp, viol, quality)
                images.append(img)
                done += 1
                if progress is not None:
                    progress(done, 3 * len(rows))
        out.append(TriptychPanels(label, str(rec.episode_id), v.caption, tuple(images), tuple(p[2] for p in panels),
                                  tuple(p[3] for p in panels)))
    return out


def triptych_image(items: Iterable, *, size: tuple[int, int] = (480, 360), camera: str | None = None,
                   quality: str = "high", inset: bool = True, progress: Progress | None = None):
    """The Figure 3 triptych as a PIL image: one row per (record, violation) item.

    With `inset`, the violating panel also gets a close-up from a free camera aimed at the
    violation, other movable bodies translucent, in the corner farthest from it (small
    contacts stay visible at print size, and nothing in front hides them).
    """
    rows = triptych_panels(items, size=size, camera=camera, quality=quality, inset=inset, progress=progress)
    return compose_raster(rows)


def compose_raster(rows: Sequence[TriptychPanels]):
    """Lays rendered rows out as one PIL image (titles, labels and captions drawn as pixels)."""
    from PIL import Image

    h, w = rows[0].images[0].shape[:2]
    gap, edge = max(8, w // 40), max(4, w // 60)
    cell_w, cell_h = w + 2 * edge, h + 2 * edge
    px = max(12, w // 26)
    title_h, label_h, sub_h = 2 * px, int(1.9 * px), int(1.6 * px)
    row_h = label_h + cell_h + sub_h + gap
    fig_w = 3 * cell_w + 4 * gap
    arr = np.full((title_h + len(rows) * row_h + 2 * px + gap, fig_w, 3), 255, np.uint8)
    ink, grey = (20, 20, 20), (110, 110, 110)
    for c, t in enumerate(TITLES):
        tile = text_tile(t, px, ink, (255, 255, 255, 0))
        paste_tile(arr, tile, gap + c * (cell_w + gap) + (cell_w - tile.shape[1]) // 2, (title_h - px) // 2)
    for r, row in enumerate(rows):
        y = title_h + r * row_h
        paste_tile(arr, text_tile(f"{row.label}  |  {row.caption}", int(px * 0.85), ink, (255, 255, 255, 0)), gap,
                   y + (label_h - px) // 2)
        for c, (img, rgb, sub) in enumerate(zip(row.images, row.borders, row.subtitles)):
            x0, y0 = gap + c * (cell_w + gap), y + label_h
            arr[y0:y0 + cell_h, x0:x0 + cell_w] = rgb
            arr[y0 + edge:y0 + edge + h, x0 + edge:x0 + edge + w] = img
            tile = text_tile(sub, int(px * 0.75), grey, (255, 255, 255, 0))
            paste_tile(arr, tile, x0 + (cell_w - tile.shape[1]) // 2, y0 + cell_h + 2)
    paste_tile(arr, text_tile(CAPTION, int(px * 0.8), grey, (255, 255, 255, 0)), gap,
               title_h + len(rows) * row_h + (px // 2))
    return Image.fromarray(arr)


def _add_inset(img: np.ndarray, rp: Replayer, v: Violation, quality: str) -> None:
    """Pastes a red-framed close-up of the violation into the corner of `img` farthest from it."""
    h, w = img.shape[:2]
    iw, ih = _even_size((max(16, int(w * 0.4)), max(16, int(h * 0.4))))
    with Replayer(rp.record, width=iw, height=ih, camera="free:violation", quality=quality, window=0,
                  xray=True) as zoom:
        close = zoom.frame(v.step, violation=v, annotate=False)
    at = rp.project(rp.violation_point(v)) or (w / 2, h / 2)
    b = border_width(w) + 2
    corners = [(w - b - iw, h - b - ih), (b, h - b - ih), (w - b - iw, b)]  # top-left holds the caption
    x, y = max(corners, key=lambda c: (c[0] + iw / 2 - at[0]) ** 2 + (c[1] + ih / 2 - at[1]) ** 2)
    img[y:y + ih, x:x + iw] = draw_border(close, VIOLATION_RGB, max(2, b // 3))


def export_triptych(items: Iterable, out_path: str | os.PathLike, *, size: tuple[int, int] = (480, 360),
                    dpi: int = 200, camera: str | None = None, quality: str = "high", inset: bool = True,
                    progress: Progress | None = None) -> Path:
    """Writes the Figure 3 triptych as PNG, PDF or SVG; returns the path.

    PDF and SVG are vector layouts (`replay.render.triptych_vector`): titles, labels, times and the
    caption are real text, the borders are vector strokes, and each frame is embedded once,
    losslessly, at its rendered resolution. PNG is the same layout as one raster.
    `items`: `TriptychRow`s or (record, violations[, label]) tuples, one row each; the
    first violation of each (the worst spec) is the violating frame.
    """
    out = Path(out_path)
    suffix = out.suffix.lower()
    if suffix not in FIGURE_SUFFIXES:
        raise RenderError(f"unsupported figure format {out.suffix!r}; expected {', '.join(FIGURE_SUFFIXES)}")
    if isinstance(dpi, bool) or not isinstance(dpi, (int, float)) or not 36 <= dpi <= 1200:
        raise RenderError(f"dpi: expected a number in [36, 1200], got {dpi!r}")
    rows = triptych_panels(items, size=size, camera=camera, quality=quality, inset=inset, progress=progress)
    if suffix == ".png":
        buf = io.BytesIO()
        compose_raster(rows).save(buf, format="PNG", dpi=(dpi, dpi))
        data = buf.getvalue()
    else:
        from replay.render.triptych_vector import vector_triptych
        data = vector_triptych(rows, fmt=suffix[1:], titles=TITLES, caption=CAPTION)
    atomic_write_bytes(out, data)
    return out
