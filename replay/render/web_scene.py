"""A replay's MuJoCo scene for a browser to draw: the scene once, the poses per episode.

`scene_blob(model)` turns a compiled `MjModel` (the one `Replayer` renders) into a compact
binary scene: every geom MuJoCo's default render draws for the replayer (the same geom
groups, colours and materials `mjv_updateScene` gives), as a primitive (plane, sphere,
capsule, ellipsoid, cylinder, box) or a mesh (int16 positions, int8 normals, float32 texture
coordinates where the mesh has a texture, uint16/uint32 indices), the materials, the 2-D
textures shrunk to `WEB_TEXTURE_PX` (PNG), the lights, the cameras' intrinsics and how
finely MuJoCo tessellates primitives (`vis.quality`). It is
cached on disk per scene asset set (`scene_file`) and shared by every episode of the scene.

`episode_blob(record, violations)` holds what changes per step: the pose of every body
that moves and of the agent-view and wrist cameras, computed by MuJoCo's kinematics from
the recorded state, and, on the steps a `Replayer` highlights, the tinted geoms, contact
discs, force or displacement arrows (with their magnitude) and captions, all taken from
`SceneHighlighter.decorate` on a real `MjvScene`, so the browser shows what an offscreen
frame shows.

Both are one buffer: b"SVW1", a uint32 header length, a JSON header (padded to 4 bytes),
then the arrays the header's `buffers` list by [offset, length, dtype].
"""

from __future__ import annotations

import io
import json
import os
import struct
from collections.abc import Sequence

os.environ.setdefault("MUJOCO_GL", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from replay.render.highlight import SceneHighlighter, TINT_RGBA, Violation, canonical_family  # noqa: E402
from replay.render.render_assets import render_assets_key, texture_as_uploaded  # noqa: E402
from replay.render.replayer import apply_state, success_step  # noqa: E402
from replay.render.scene_models import AGENT_VIEWS, WRIST_VIEWS, replay_option  # noqa: E402
from replay.render.web_mesh import cluster, decimate, remembered, source_key  # noqa: E402

MAGIC = b"SVW1"
FORMAT = 4  # bump when the layout changes: cached files of another format are made anew
WEB_TEXTURE_PX = 256  # the largest texture side sent: a texture covers at most about the player's canvas
SMALL_MESH_VERTS = 2048  # a mesh with more corners is simplified (a step in SwiftShader is work per triangle)
DECIMATED_TRIANGLE_M2 = 4e-5  # decimation's aim: about a triangle per 40 mm² of surface
MIN_CELL_M = 0.004  # clustering's smallest cell: about a pixel of the agent view's table on the player's canvas
MAX_MESH_VERTS = 16384  # the most corners clustering keeps of a mesh
PNG_LEVEL = 3  # zlib's effort for the textures: a LIBERO scene's 0.18 s at Pillow's default 6, 0.08 s here, 9 % larger
WINDOW = 3  # steps each side of a violation that are highlighted (Replayer's default window)
MAX_POSE_FLOATS = 64_000_000  # 256 MB of poses: longer episodes play from server frames
_GEOM = int(mujoco.mjtObj.mjOBJ_GEOM)
_MESH = int(mujoco.mjtGeom.mjGEOM_MESH)
_TYPES = {int(mujoco.mjtGeom.mjGEOM_PLANE): "plane", int(mujoco.mjtGeom.mjGEOM_SPHERE): "sphere",
          int(mujoco.mjtGeom.mjGEOM_CAPSULE): "capsule", int(mujoco.mjtGeom.mjGEOM_ELLIPSOID): "ellipsoid",
          int(mujoco.mjtGeom.mjGEOM_CYLINDER): "cylinder", int(mujoco.mjtGeom.mjGEOM_BOX): "box", _MESH: "mesh"}


class _Packer:
    """Arrays laid end to end (4-byte aligned), named in a JSON header."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, arr) -> list:
        arr = np.ascontiguousarray(arr)
        raw = arr.tobytes() if not isinstance(arr, bytes) else arr
        ref = [self.size, len(raw), str(arr.dtype)]
        self.parts.append(raw + b"\0" * (-len(raw) % 4))
        self.size += len(raw) + (-len(raw) % 4)
        return ref

    def add_bytes(self, raw: bytes) -> list:
        ref = [self.size, len(raw), "bytes"]
        self.parts.append(raw + b"\0" * (-len(raw) % 4))
        self.size += len(raw) + (-len(raw) % 4)
        return ref

    def blob(self, header: dict) -> bytes:
        head = json.dumps(header, separators=(",", ":")).encode()
        head += b" " * (-len(head) % 4)
        return MAGIC + struct.pack("<I", len(head)) + head + b"".join(self.parts)


def read_blob(raw: bytes) -> tuple[dict, dict]:
    """(header, {name: array}) of a blob: the arrays named by the header's "buffers" map."""
    if raw[:4] != MAGIC:
        raise ValueError("not a web scene blob")
    n = struct.unpack("<I", raw[4:8])[0]
    header = json.loads(raw[8:8 + n])
    body = memoryview(raw)[8 + n:]
    arrays = {k: (bytes(body[o:o + ln]) if dt == "bytes" else np.frombuffer(body[o:o + ln], dtype=dt))
              for k, (o, ln, dt) in header.get("buffers", {}).items()}
    return header, arrays


def _drawn_geoms(model: mujoco.MjModel) -> list:
    """The model geoms `mjv_updateScene` draws (at the model's reference pose), with the
    colour and material it gives them: what MuJoCo's renderer shows, by its own rules."""
    d = mujoco.MjData(model)
    mujoco.mj_kinematics(model, d)
    cam = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, cam)
    scn = mujoco.MjvScene(model, maxgeom=max(1000, 2 * model.ngeom))
    mujoco.mjv_updateScene(model, d, replay_option(model), None, cam, mujoco.mjtCatBit.mjCAT_ALL.value, scn)
    return [scn.geoms[i] for i in range(scn.ngeom) if scn.geoms[i].objtype == _GEOM]


def _mesh(model: mujoco.MjModel, i: int, pack: _Packer, textured: bool) -> dict:
    """One mesh as indexed corners (vertex, normal and texture coordinate of each face corner),
    simplified when it has over `SMALL_MESH_VERTS`: decimated (`web_mesh.decimate`) when it is
    drawn without a texture, else, or where decimation fails, clustered (`web_mesh.cluster`) to
    cells of `MIN_CELL_M` or more and at most `MAX_MESH_VERTS` corners. Made once per process
    for the same source arrays (`web_mesh.remembered`): every LIBERO scene has the robot's
    meshes, 0.2 s of a scene's 0.4 s here."""
    va, vn = int(model.mesh_vertadr[i]), int(model.mesh_vertnum[i])
    fa, fn = int(model.mesh_faceadr[i]), int(model.mesh_facenum[i])
    na, nn = int(model.mesh_normaladr[i]), int(model.mesh_normalnum[i])
    ta, tn = int(model.mesh_texcoordadr[i]), int(model.mesh_texcoordnum[i])
    uv_on = textured and ta >= 0 and tn > 0
    source = (model.mesh_vert[va:va + vn], model.mesh_face[fa:fa + fn], model.mesh_normal[na:na + nn],
              model.mesh_facenormal[fa:fa + fn], *((model.mesh_texcoord[ta:ta + tn],
                                                    model.mesh_facetexcoord[fa:fa + fn]) if uv_on else ()))
    key = source_key(source, (uv_on, SMALL_MESH_VERTS, MAX_MESH_VERTS, MIN_CELL_M, DECIMATED_TRIANGLE_M2))
    made = remembered(key, lambda: _web_mesh(*source))
    out = {k: made[k] for k in ("centre", "half", "vertices", "source_vertices", "simplified")}
    out.update({k: pack.add(made[k]) for k in ("pos", "normal", "index", "uv") if k in made})
    return out


def _web_mesh(verts32: np.ndarray, faces: np.ndarray, mesh_normals: np.ndarray, face_normals: np.ndarray,
              texcoords: np.ndarray | None = None, face_texcoords: np.ndarray | None = None) -> dict:
    """`_mesh`'s arrays from the mesh's own (MuJoCo's vertices, faces, normals and their face
    indices; texture coordinates and theirs where drawn textured)."""
    verts = verts32.astype(np.float64)
    fv = faces.reshape(-1).astype(np.int64)
    fnorm = face_normals.reshape(-1).astype(np.int64)
    nn, tn = len(mesh_normals), 0 if texcoords is None else len(texcoords)
    ft = face_texcoords.reshape(-1).astype(np.int64) if texcoords is not None else np.zeros_like(fv)
    key = (fv * (nn + 1) + fnorm) * (tn + 1) + ft
    uniq, first, index = np.unique(key, return_index=True, return_inverse=True)
    pos, normals = verts[fv[first]], mesh_normals[fnorm[first]].astype(np.float64)
    uv = texcoords[ft[first]].astype(np.float64) if texcoords is not None else None
    tris = index.reshape(-1, 3)
    simplified = None
    if uniq.size > SMALL_MESH_VERTS:
        decimated = decimate(verts32, fv.reshape(-1, 3), DECIMATED_TRIANGLE_M2) if uv is None else None
        if decimated is not None:
            (pos, normals, tris), simplified = decimated, "decimated"
        else:
            pos, normals, uv, tris = cluster(pos, normals, uv, tris, MAX_MESH_VERTS, MIN_CELL_M)
            simplified = "clustered"
    lo, hi = pos.min(axis=0), pos.max(axis=0)
    centre, half = (lo + hi) / 2, np.maximum((hi - lo) / 2, 1e-9)
    normals = normals * half  # for the unit-box geometry the browser scales by `half`
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    n = len(pos)
    out = {"centre": centre.tolist(), "half": half.tolist(), "vertices": int(n), "source_vertices": int(uniq.size),
           "simplified": simplified, "pos": np.round((pos - centre) / half * 32767).astype(np.int16),
           "normal": np.round(normals * 127).astype(np.int8),
           "index": tris.reshape(-1).astype(np.uint16 if n < 65536 else np.uint32)}
    if uv is not None:
        out["uv"] = uv.astype(np.float32)
    return out


def _texture(model: mujoco.MjModel, i: int, pack: _Packer) -> dict:
    """A texture as the browser gets it: a 2-D image (or a cube whose faces are one image) as a
    PNG of at most WEB_TEXTURE_PX a side, rows in MuJoCo's upload order; any texture also
    gives its mean colour (what a cube or skybox of six faces is drawn with)."""
    from PIL import Image

    w, h, texels = texture_as_uploaded(model, i, WEB_TEXTURE_PX)
    c = int(model.tex_nchannel[i])
    img = np.asarray(texels, np.uint8).reshape(h, w, c)
    mean = (img[..., :3].reshape(-1, min(c, 3)).mean(axis=0) / 255.0)
    mean = np.resize(mean, 3).tolist()
    kind = {int(mujoco.mjtTexture.mjTEXTURE_2D): "2d", int(mujoco.mjtTexture.mjTEXTURE_CUBE): "cube"}.get(
        int(model.tex_type[i]), "skybox")
    srgb = int(model.tex_colorspace[i]) == int(mujoco.mjtColorSpace.mjCOLORSPACE_SRGB)
    if srgb:  # MuJoCo uploads it as sRGB: the GPU linearises what it samples
        mean = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in mean]
    out = {"kind": kind, "mean": mean, "srgb": srgb}
    if kind == "2d" or (kind == "cube" and h == w):
        buf = io.BytesIO()
        Image.fromarray(img[..., 0] if c == 1 else img[..., :3] if c == 3 else img).save(
            buf, format="PNG", compress_level=PNG_LEVEL)
        out.update(image=pack.add_bytes(buf.getvalue()), width=w, height=h)
    return out


def scene_blob(model: mujoco.MjModel) -> bytes:
    """The web scene of `model` (see the module's docstring)."""
    pack = _Packer()
    m = model
    geoms, meshes, mesh_ids, mats, mat_ids, texs, tex_ids = [], [], {}, [], {}, [], {}

    def tex_of(t: int) -> int:
        if t not in tex_ids:
            tex_ids[t] = len(texs)
            texs.append(_texture(m, t, pack))
        return tex_ids[t]

    def mat_of(k: int) -> int:
        if k < 0:
            return -1
        if k not in mat_ids:
            t = int(m.mat_texid[k, int(mujoco.mjtTextureRole.mjTEXROLE_RGB)])
            mat_ids[k] = len(mats)
            mats.append({"texture": tex_of(t) if t >= 0 else -1, "repeat": m.mat_texrepeat[k].tolist(),
                         "uniform": bool(m.mat_texuniform[k])})
        return mat_ids[k]

    for g in _drawn_geoms(m):
        gid, kind = int(g.objid), int(m.geom_type[g.objid])
        if kind not in _TYPES:
            continue  # height fields are not drawn in the browser
        mat = mat_of(int(g.matid))
        entry = {"id": gid, "body": int(m.geom_bodyid[gid]), "type": _TYPES[kind], "size": m.geom_size[gid].tolist(),
                 "pos": m.geom_pos[gid].tolist(), "quat": m.geom_quat[gid].tolist(), "rgba": list(map(float, g.rgba)),
                 "emission": float(g.emission), "specular": float(g.specular), "shininess": float(g.shininess),
                 "material": mat}
        if kind == _MESH:
            k = int(m.geom_dataid[gid])
            textured = mat >= 0 and mats[mat]["texture"] >= 0
            if (k, textured) not in mesh_ids:
                mesh_ids[(k, textured)] = len(meshes)
                meshes.append(_mesh(m, k, pack, textured))
            entry["mesh"] = mesh_ids[(k, textured)]
        geoms.append(entry)
    d = mujoco.MjData(m)
    mujoco.mj_kinematics(m, d)
    mujoco.mj_camlight(m, d)
    lights = [{"pos": d.light_xpos[i].tolist(), "dir": d.light_xdir[i].tolist(), "diffuse": m.light_diffuse[i].tolist(),
               "ambient": m.light_ambient[i].tolist(), "specular": m.light_specular[i].tolist(),
               "directional": int(m.light_type[i]) == int(mujoco.mjtLightType.mjLIGHT_DIRECTIONAL),
               "cutoff": float(m.light_cutoff[i]), "exponent": float(m.light_exponent[i]),
               "attenuation": m.light_attenuation[i].tolist(), "active": bool(m.light_active[i])}
              for i in range(m.nlight)]
    sky = next((t for t in range(m.ntex) if int(m.tex_type[t]) == int(mujoco.mjtTexture.mjTEXTURE_SKYBOX)), None)
    hl = m.vis.headlight
    header = {
        "format": FORMAT, "nbody": int(m.nbody), "geoms": geoms, "meshes": meshes, "materials": mats, "textures": texs,
        "lights": lights,
        "headlight": {"ambient": list(map(float, hl.ambient)), "diffuse": list(map(float, hl.diffuse)),
                      "specular": list(map(float, hl.specular)), "active": bool(hl.active)},
        "cameras": [{"name": mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, i) or str(i),
                     "fovy": float(m.cam_fovy[i])} for i in range(m.ncam)],
        "znear": float(m.vis.map.znear * m.stat.extent), "zfar": float(m.vis.map.zfar * m.stat.extent),
        "extent": float(m.stat.extent), "center": m.stat.center.tolist(),
        "quality": {k: int(getattr(m.vis.quality, k)) for k in ("numslices", "numstacks", "numquads")},
        "background": tex_of(sky) if sky is not None else -1,
        "vertices": int(sum(x["vertices"] for x in meshes)),
        "source_vertices": int(sum(x["source_vertices"] for x in meshes)), "buffers": {},
    }
    header["buffers"] = {f"b{n}": ref for n, ref in enumerate(_refs(header))}
    return pack.blob(header)


def _refs(header: dict) -> list:
    """Every [offset, length, dtype] reference in the header (for `read_blob`'s map)."""
    out = []
    for mesh in header["meshes"]:
        out += [mesh[k] for k in ("pos", "normal", "index", "uv") if k in mesh]
    out += [t["image"] for t in header["textures"] if "image" in t]
    return out


def scene_key(model: mujoco.MjModel) -> str:
    """The web scene's cache name: the model's drawn assets (`render_assets_key`) and the format."""
    return f"scene-{render_assets_key(model)[:24]}-f{FORMAT}"


def _quat(xmat: np.ndarray) -> np.ndarray:
    q = np.empty(4)
    mujoco.mju_mat2Quat(q, np.asarray(xmat, float).reshape(9))
    return q


def _views(model: mujoco.MjModel, record) -> list[int]:
    """The camera ids the browser follows: the agent view and the wrist view."""
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) or "" for i in range(model.ncam)]
    agent = next((names.index(c) for c in (*AGENT_VIEWS, record.replay.camera) if c in names), None)
    wrist = next((names.index(c) for c in WRIST_VIEWS if c in names), None)
    return [i for i in dict.fromkeys((agent, wrist)) if i is not None]


def _overlay(model, d, hl: SceneHighlighter, active: Sequence[Violation], step: int, scn: mujoco.MjvScene) -> dict:
    """What a `Replayer` frame of `step` marks, from `SceneHighlighter.decorate` on a real scene
    (`scn`, reused across steps): the tinted geoms, the contact discs and each violation's arrow
    with its magnitude."""
    from replay.render.violation import format_quantity

    cam = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, cam)
    opt, cat = replay_option(model), mujoco.mjtCatBit.mjCAT_ALL.value
    mujoco.mjv_updateScene(model, d, opt, None, cam, cat, scn)
    n0 = scn.ngeom
    hl.decorate(scn, d, active, step=step)
    drawn = [scn.geoms[i] for i in range(n0)]
    rgba = np.array([g.rgba for g in drawn]).reshape(-1, 4)
    tinted = np.isclose(rgba, TINT_RGBA).all(axis=1)  # np.allclose's tolerances, per geom
    tint = sorted({int(g.objid) for g, hit in zip(drawn, tinted) if hit and g.objtype == _GEOM})
    discs = [{"pos": scn.geoms[i].pos.tolist(), "mat": scn.geoms[i].mat.reshape(9).tolist(),
              "size": scn.geoms[i].size[:2].tolist(), "rgba": scn.geoms[i].rgba.tolist()} for i in range(n0, scn.ngeom)]
    arrows = []
    for v in active:  # each violation's own arrows, labelled with what they show
        mujoco.mjv_updateScene(model, d, opt, None, cam, cat, scn)
        for tail, head in hl.decorate(scn, d, [v], step=step):
            if canonical_family(v.family) == "non_target_max_disp":
                label = format_quantity(float(np.linalg.norm(head - tail)), "m", family="non_target_max_disp")
            else:
                scored = hl.scored_force(v, step)
                hit = hl.arrow_force(d, v) if scored is None else None
                force = scored if scored is not None else float(np.linalg.norm(hit[1])) if hit else None
                label = "" if force is None else format_quantity(force, "N")
            arrows.append({"tail": np.asarray(tail).tolist(), "head": np.asarray(head).tolist(), "label": label})
    return {"tint": tint, "discs": discs, "arrows": arrows, "captions": [v.caption for v in active[:3]]}


def episode_blob(model: mujoco.MjModel, record, violations: Sequence[Violation] = (), *, window: int = WINDOW) -> bytes:
    """The per-step poses and violation marks of one episode (see the module's docstring).
    Raises ValueError for an episode too long to send whole (`MAX_POSE_FLOATS`)."""
    r, m = record.replay, model
    n = int(r.qpos.shape[0])
    if n * m.nbody * 7 > MAX_POSE_FLOATS:
        raise ValueError(f"{n} steps x {m.nbody} bodies is too long an episode to send whole")
    d = mujoco.MjData(m)
    views = _views(m, record)
    xpos = np.empty((n, m.nbody, 3))
    xquat = np.empty((n, m.nbody, 4))
    cams = np.empty((n, len(views), 7))
    for s in range(n):
        apply_state(m, d, r, s, forward=False)
        xpos[s], xquat[s] = d.xpos, d.xquat
        for j, c in enumerate(views):
            cams[s, j, :3], cams[s, j, 3:] = d.cam_xpos[c], _quat(d.cam_xmat[c])
    moving = np.flatnonzero((np.abs(xpos - xpos[:1]).max(axis=(0, 2)) > 1e-7)
                            | (np.abs(xquat - xquat[:1]).max(axis=(0, 2)) > 1e-7))
    poses = np.concatenate([xpos[:, moving], xquat[:, moving]], axis=2)
    hl = SceneHighlighter(m, record)
    marks, orbit = {}, None
    steps = sorted({s for v in violations for s in range(v.step - window, v.step + window + 1) if 0 <= s < n})
    scn = mujoco.MjvScene(m, maxgeom=10000) if steps else None
    for s in steps:
        active = [v for v in violations if abs(s - v.step) <= window]
        apply_state(m, d, r, s)
        marks[str(s)] = _overlay(m, d, hl, active, s, scn)
    if violations and violations[0].step < n:
        v = violations[0]
        apply_state(m, d, r, v.step)
        look = hl.look_at(d, v, d.cam_xmat[views[0]] if views else None)
        orbit = {"lookat": list(map(float, look.lookat)), "distance": float(look.distance),
                 "azimuth": float(look.azimuth), "elevation": float(look.elevation)}
    pack = _Packer()
    header = {
        "format": FORMAT, "n_steps": n, "moving": moving.tolist(), "window": int(window),
        "cameras": [{"name": mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_CAMERA, c), "fovy": float(m.cam_fovy[c])}
                    for c in views],
        "marks": marks, "success_step": success_step(record), "orbit": orbit,
        "violations": [{"step": v.step, "caption": v.caption} for v in violations],
        "buffers": {"static": pack.add(np.concatenate([xpos[0], xquat[0]], axis=1).astype(np.float32)),
                    "poses": pack.add(poses.astype(np.float32)), "cams": pack.add(cams.astype(np.float32))},
    }
    return pack.blob(header)


def _write(path, raw: bytes) -> None:
    """Writes whole or not at all: a reader never sees half a file."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def cached_file(folder, name: str, make) -> tuple:
    """(path, made) of `folder/name.bin`: read from the disk cache (marked recently used) or
    made by `make()` and stored, then the folder trimmed to its size limit
    (`replay.render.scene_cache.evict`, $SAFEVLA_WEB_CACHE_MB)."""
    from pathlib import Path

    from replay.render.scene_cache import evict, web_limit_bytes

    path = Path(folder) / f"{name}.bin"
    if path.is_file():
        try:
            os.utime(path)
            return path, False
        except OSError:
            pass
    _write(path, make())
    evict(path.parent, web_limit_bytes(), keep=path, suffix=".bin")
    return path, True
