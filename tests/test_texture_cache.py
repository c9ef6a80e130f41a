"""A texture file is decoded and shrunk once (replay/render/texture_cache.py): the next scene
using it gets the same texels from memory, a restarted process from the cache folder, and a
changed file is decoded anew."""

import os
import time
from collections import OrderedDict

import numpy as np
import pytest

from replay.render import texture_cache as T
from replay.render.scene_models import _decode_shrink, _decoded_shrunk


@pytest.fixture
def counted(monkeypatch, tmp_path):
    """A cache folder of its own, nothing in memory, and the decodes counted."""
    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", str(tmp_path / "scenes"))
    monkeypatch.setattr(T, "_KEPT", OrderedDict())
    calls = []

    def decode(path, max_px):
        calls.append(path)
        return _decode_shrink(path, max_px)

    monkeypatch.setattr("replay.render.scene_models._decode_shrink", decode)
    return calls


def _png(path, seed: int, size=(600, 300)):
    from PIL import Image

    Image.fromarray(np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)).save(path)
    return str(path)


def test_a_texture_is_decoded_once_then_read_from_memory_or_the_cache_folder(counted, tmp_path):
    png = _png(tmp_path / "wood.png", 1)
    first = _decoded_shrunk(png, 256)
    assert first[:2] == (128, 256) and len(first[2]) == 128 * 256 * 3  # 300 x 600 px shrunk to 256 a side
    assert _decoded_shrunk(png, 256) == first and len(counted) == 1  # the next scene: from memory
    assert _decoded_shrunk(png, 64) != first and len(counted) == 2  # another size is another texture
    T._KEPT.clear()  # a restarted process: from the cache folder
    assert _decoded_shrunk(png, 256) == first and len(counted) == 2
    assert len(list((tmp_path / "scenes" / "textures").glob("*.npy"))) == 2
    # a changed file (its size and time change) is decoded again, with its new texels
    time.sleep(0.01)
    _png(tmp_path / "wood.png", 2, size=(500, 250))
    again = _decoded_shrunk(png, 256)
    assert len(counted) == 3 and again != first and again == _decode_shrink(png, 256)


def test_an_unreadable_cache_file_is_decoded_anew_and_a_cache_off_keeps_memory_only(counted, tmp_path, monkeypatch):
    png = _png(tmp_path / "tile.png", 3)
    want = _decoded_shrunk(png, 256)
    for f in (tmp_path / "scenes" / "textures").glob("*.npy"):
        f.write_bytes(b"not an array")
    T._KEPT.clear()
    assert _decoded_shrunk(png, 256) == want and len(counted) == 2
    monkeypatch.setenv("SAFEVLA_SCENE_CACHE", "off")
    T._KEPT.clear()
    assert _decoded_shrunk(png, 256) == want and len(counted) == 3
    assert _decoded_shrunk(png, 256) == want and len(counted) == 3
    assert os.path.isfile(png)
