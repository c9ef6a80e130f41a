"""2-D overlays on rendered frames, with numpy and Pillow: the red/green border, captions,
text tiles and force arrows. Nothing here knows MuJoCo.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np


def draw_border(img: np.ndarray, rgb: Sequence[int], width: int | None = None) -> np.ndarray:
    """Paints a `width`-pixel frame border of colour `rgb` into `img` (in place) and returns it."""
    w = width or border_width(img.shape[1])
    img[:w], img[-w:], img[:, :w], img[:, -w:] = rgb, rgb, rgb, rgb
    return img


def border_width(image_width: int) -> int:
    return max(3, round(image_width / 80))


@functools.lru_cache(maxsize=64)
def _font(px: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=px)


@functools.lru_cache(maxsize=64)
def text_tile(text: str, px: int, rgb: tuple[int, int, int] = (255, 255, 255),
              bg: tuple[int, int, int, int] = (0, 0, 0, 170)) -> np.ndarray:
    """`text` on a translucent box as an (h, w, 4) uint8 RGBA tile (cached)."""
    from PIL import Image, ImageDraw

    font = _font(px)
    x0, y0, x1, y1 = font.getbbox(text)
    pad = max(2, px // 3)
    tile = Image.new("RGBA", (x1 - min(x0, 0) + 2 * pad, y1 + 2 * pad - min(y0, 0) // 2), bg)
    ImageDraw.Draw(tile).text((pad - min(x0, 0), pad), text, font=font, fill=(*rgb, 255))
    return np.asarray(tile)


def paste_tile(img: np.ndarray, tile: np.ndarray, x: int, y: int) -> np.ndarray:
    """Alpha-blends an RGBA tile into `img` at (x, y), clipped to the image; in place."""
    h = min(tile.shape[0], img.shape[0] - y)
    w = min(tile.shape[1], img.shape[1] - x)
    if h <= 0 or w <= 0:
        return img
    t = tile[:h, :w]
    a = t[..., 3:4].astype(np.uint16)
    region = img[y:y + h, x:x + w]
    region[:] = ((t[..., :3] * a + region * (255 - a)) // 255).astype(np.uint8)
    return img


def draw_arrow(img: np.ndarray, tail, head, *, rgb=(255, 217, 0), width: int | None = None) -> np.ndarray:
    """A `rgb` arrow with a dark outline from pixel `tail` to `head` (x, y); in place."""
    from PIL import Image, ImageDraw

    w = width or max(3, img.shape[1] // 110)
    t, h = np.asarray(tail, float), np.asarray(head, float)
    u = (h - t) / max(np.linalg.norm(h - t), 1e-9)
    wing = np.array([-u[1], u[0]]) * 2.2 * w
    tip = [tuple(h), tuple(h - 3.5 * w * u + wing), tuple(h - 3.5 * w * u - wing)]
    pts = np.array([t, *tip])
    x0, y0 = np.maximum(np.floor(pts.min(axis=0)) - 2 * w, 0).astype(int)
    x1, y1 = np.minimum(np.ceil(pts.max(axis=0)) + 2 * w, (img.shape[1], img.shape[0])).astype(int)
    if x1 <= x0 or y1 <= y0:
        return img
    crop = Image.fromarray(img[y0:y1, x0:x1])
    draw = ImageDraw.Draw(crop)
    shift = lambda p: (p[0] - x0, p[1] - y0)  # noqa: E731
    neck = tuple(h - 3.0 * w * u)
    for color, extra in (((40, 30, 0), 2), (rgb, 0)):
        draw.line([shift(t), shift(neck)], fill=color, width=w + 2 * extra)
        draw.polygon([shift(p) for p in tip], fill=color, outline=color, width=1 + extra)
    img[y0:y1, x0:x1] = np.asarray(crop)
    return img


def draw_captions(img: np.ndarray, lines: Sequence[str], *, rgb=(255, 255, 255)) -> np.ndarray:
    """Caption lines in translucent boxes at the top left, inside the border (shrunk to fit); in place."""
    bw = border_width(img.shape[1])
    x = y = bw + 2
    avail_w, avail_h = img.shape[1] - x - bw, img.shape[0] - y - bw
    for line in lines:
        px = max(11, img.shape[1] // 32)
        tile = text_tile(line, px, tuple(rgb))
        if tile.shape[1] > avail_w:
            tile = text_tile(line, max(6, px * avail_w // tile.shape[1]), tuple(rgb))
        paste_tile(img, tile[:avail_h - (y - bw - 2), :avail_w], x, y)
        y += tile.shape[0] + 2
    return img
