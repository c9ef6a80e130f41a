"""A second thread for a compile's mesh loading, where MuJoCo's compiler loads meshes on one.

MuJoCo compiles a model's meshes on half the machine's hardware threads, at least one
(`NumCompilerThreads`, src/user/user_model.cc): one on a 2-core machine, where a LIBERO scene's
83 meshes take 0.6-0.7 s of its compile, 0.49 s of it parsing the robot's OBJ files.
`loading_meshes_beside(spec)` compiles the later meshes of `spec` (half its mesh bytes, the last
first) on a thread of its own, into MuJoCo's asset cache, while the spec's own compile loads them
from the first: the two meet once, and the compile finds what the helper loaded in the cache,
which keys a mesh by its file and modification time and checks its scale, inertia and hull.
Each mesh keeps every attribute of the spec's own (`COPIED`), so it is the same mesh either way
(tests/test_mesh_helper.py compares the models).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading

import mujoco

# What MuJoCo's mesh loading and processing reads of a file mesh
COPIED = ("file", "content_type", "scale", "inertia", "maxhullvert", "smoothnormal", "refpos", "refquat",
          "needsdf", "octree_maxdepth")
MIN_MESH_BYTES = 4 * 2**20  # below this, a second thread is not worth its start


def compiler_threads() -> int:
    """How many threads MuJoCo's compiler loads meshes on (its `NumCompilerThreads`)."""
    return max(1, (os.cpu_count() or 1) // 2)


def _helped(spec: mujoco.MjSpec) -> list[tuple[mujoco.MjsMesh, int]]:
    """(mesh, file bytes) of the spec's later file meshes that add up to half of all their bytes,
    last first; none where the helper would not pay. Left out: meshes a colliding geom uses (the
    compile needs their convex hull, which a mesh without geoms does not make) and meshes given
    any other way than by a file alone."""
    collide = {g.meshname for g in spec.geoms
               if g.type == mujoco.mjtGeom.mjGEOM_MESH and (g.contype or g.conaffinity)}
    files = []
    for m in spec.meshes:
        if not m.file or m.plugin.active or len(m.uservert) or len(m.userface) or m.name in collide:
            continue
        path = os.path.join(spec.modelfiledir, spec.compiler.meshdir, m.file)
        try:
            files.append((m, os.path.getsize(path)))
        except OSError:
            return []  # the compile says which file is missing
    total = sum(size for _, size in files)
    if total < MIN_MESH_BYTES:
        return []
    later, taken = [], 0
    for m, size in reversed(files):
        if taken + size > total / 2:
            break
        later.append((m, size))
        taken += size
    return later


@contextlib.contextmanager
def loading_meshes_beside(spec: mujoco.MjSpec):
    """Around `spec.compile()`: a helper thread loads half of its meshes into MuJoCo's asset
    cache meanwhile (module docstring). Nothing where MuJoCo's compiler already uses several
    threads or its cache is off; the helper's errors are left to the compile, which reports them."""
    cache = mujoco.mj_getCache()
    later = _helped(spec) if compiler_threads() == 1 and mujoco.mj_getCacheCapacity(cache) > 0 else []
    if not later:
        yield
        return
    helper = mujoco.MjSpec()
    helper.modelfiledir = spec.modelfiledir
    helper.compiler.meshdir = spec.compiler.meshdir
    helper.strippath = spec.strippath
    for k, (mesh, _) in enumerate(later):
        copy = helper.add_mesh()
        copy.name = f"m{k}"
        for field in COPIED:
            setattr(copy, field, getattr(mesh, field))

    def load() -> None:
        try:
            helper.compile()
        except Exception:  # noqa: BLE001 - the spec's own compile loads the mesh again and says what is wrong
            logging.getLogger(__name__).debug("loading meshes beside a compile failed", exc_info=True)

    threading.Thread(target=load, name="safevla-mesh-helper", daemon=True).start()
    yield
