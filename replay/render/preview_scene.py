"""Preview scenes: a compiled scene whose textures are already shrunk, kept in the disk cache.

A "preview" replayer (`Replayer(textures="preview")`) uploads textures shrunk to its frame
size. Shrinking them from the full model costs 0.2-0.3 s per GL context, and loading the
full model's 200 MB MJB 0.4 s, for textures that are then thrown away. So, in the
background after a first preview open, the scene is compiled once more through `MjSpec`
with each texture's data replaced by its shrunk image (`render_assets.texture_as_uploaded`) and
stored in the scene cache under its own key; later processes load that small MJB instead.
Frames are the same bytes either way (tests/test_scene_cache.py).
"""

from __future__ import annotations

import mujoco
import numpy as np

from replay.render.render_assets import MODEL_VIS_LOCK, texture_as_uploaded


def preview_text(resolved_xml: str, max_px: int) -> str:
    """What the scene cache keys a preview scene by: the resolved scene and the texture size."""
    return f"{resolved_xml}\n<!-- safevla preview textures {int(max_px)} px -->"


def shrunk_textures(full: mujoco.MjModel, max_px: int) -> list[tuple[int, int, bytes]]:
    """(width, height, data) of every texture of `full` as a preview upload sees it."""
    with MODEL_VIS_LOCK:  # not while an upload has them shrunk in place for a moment
        return [(w, h, texels.tobytes()) for w, h, texels in
                (texture_as_uploaded(full, i, max_px) for i in range(full.ntex))]


def compile_preview(resolved_xml: str, modelfiledir: str, full: mujoco.MjModel, max_px: int) -> mujoco.MjModel | None:
    """The scene compiled with the shrunk textures of `full` as data; None when its textures
    cannot be matched one to one with the model's (then previews keep shrinking on upload)."""
    spec = mujoco.MjSpec.from_string(resolved_xml)
    spec.modelfiledir = modelfiledir
    if len(spec.textures) != full.ntex:
        return None
    for i, (t, (w, h, data)) in enumerate(zip(spec.textures, shrunk_textures(full, max_px))):
        name = mujoco.mj_id2name(full, mujoco.mjtObj.mjOBJ_TEXTURE, i) or ""
        if t.name != name or int(t.type) != int(full.tex_type[i]):
            return None
        t.file, t.content_type = "", ""
        t.cubefiles = [""] * 6
        t.builtin = mujoco.mjtBuiltin.mjBUILTIN_NONE
        t.hflip = t.vflip = False  # the model's data is already flipped
        t.gridsize = [1, 1]
        t.width, t.height, t.nchannel = w, h, int(full.tex_nchannel[i])
        t.colorspace = int(full.tex_colorspace[i])
        t.data = data
    model = spec.compile()
    same = (model.ntex == full.ntex and np.array_equal(model.tex_type, full.tex_type)
            and model.nmesh == full.nmesh and model.ngeom == full.ngeom and model.nq == full.nq)
    return model if same else None
