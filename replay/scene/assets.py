"""Portable scene files: the meshes and textures of a recorded MJCF, named so that any machine can load them.

A recorded scene must replay on a machine whose Python lives elsewhere than the recorder's. So a
scene names each asset file in one of two portable ways, and never by an absolute path:

- `package://ROOT/PATH`: PATH inside a named asset root (`assets/asset_roots.yaml`: a root is an
  installed Python package, e.g. robosuite's or the LIBERO assets' folder), resolved at load time
  to wherever that package is installed here;
- a relative path, resolved as MuJoCo resolves it (against the MJCF file's folder and the
  compiler's meshdir/texturedir/assetdir), which must stay inside that folder.

`portable_scene(xml)` rewrites a host's compiled XML (absolute paths into the installed packages)
into the first form; the recorder calls it. `resolve_scene(xml, base=...)` turns a portable scene
back into XML MuJoCo can compile here, after checking that every file it would read lies inside a
registered root or the scene's folder: nothing else on disk is read. Scenes recorded before this
change hold absolute paths of the recording machine; `legacy_reference` re-roots such a path by the
root folder it passes through (`.../site-packages/robosuite/models/...` becomes
`package://robosuite/models/...`), so old archives still load and `safevla migrate-scenes` can rewrite
them for good.
"""

from __future__ import annotations

import functools
import importlib.util
import xml.etree.ElementTree as ET
from pathlib import Path, PurePosixPath

import yaml

from scoring.errors import SafeVLAError

SCHEME = "package://"
ROOTS_FILE = Path(__file__).resolve().parents[2] / "assets" / "asset_roots.yaml"
ASSET_FILE_ATTRS = {"mesh": ("file",), "hfield": ("file",), "skin": ("file",),
                    "texture": ("file", "fileright", "fileleft", "fileup", "filedown", "filefront", "fileback")}


class SceneAssetError(SafeVLAError, ValueError):
    """A scene names an asset file that cannot be used: missing, outside the allowed places, or unknown root."""


@functools.cache
def _registry() -> dict[str, dict]:
    return yaml.safe_load(ROOTS_FILE.read_text())["roots"]


@functools.cache
def root_folders(name: str) -> tuple[Path, ...]:
    """The folders of asset root `name` on this machine (a namespace package may have several);
    empty if its package is not installed."""
    entry = _registry().get(name)
    if entry is None:
        return ()
    try:
        spec = importlib.util.find_spec(entry["package"])
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return ()
    return tuple(Path(p).resolve() for p in spec.submodule_search_locations)


def root_names() -> tuple[str, ...]:
    return tuple(_registry())


# ------------------------------------------------------------------ writing portable scenes

def portable_reference(path: str) -> str | None:
    """`package://ROOT/PATH` for an absolute path inside an installed root; None if it is in none."""
    p = Path(path).resolve()
    for name in root_names():
        for folder in root_folders(name):
            if p.is_relative_to(folder):
                return f"{SCHEME}{name}/{p.relative_to(folder).as_posix()}"
    return None


def legacy_reference(path: str) -> str | None:
    """Re-roots an absolute path of another machine by the root folder it passes through.

    `/old/python/site-packages/robosuite/models/a.stl` -> `package://robosuite/models/a.stl`. Where a
    root's name occurs more than once, the occurrence whose remainder exists here wins, else the last.
    """
    parts = PurePosixPath(path).parts
    for name in root_names():
        package = _registry()[name]["package"]
        hits = [i for i, part in enumerate(parts) if part == package]
        if not hits:
            continue
        refs = [f"{SCHEME}{name}/{'/'.join(parts[i + 1:])}" for i in hits if i + 1 < len(parts)]
        if not refs:
            continue
        return next((r for r in refs if _existing(r) is not None), refs[-1])
    return None


def portable_scene(xml: str, *, origin: str = "the scene") -> str:
    """The scene with every absolute asset path rewritten as `package://ROOT/PATH`.

    Raises SceneAssetError for an absolute path inside no registered root (the record would not
    replay anywhere else): register the root in assets/asset_roots.yaml, or keep the file next to the scene.
    """
    return _reroot(xml, origin, portable_reference,
                   f"lies outside every registered asset root ({', '.join(root_names())}); add its package to "
                   f"{ROOTS_FILE}")[0]


def migrate_scene(xml: str, *, origin: str = "the scene") -> tuple[str, int]:
    """Rewrites a scene recorded before portable names: returns (new xml, number of paths rewritten).

    Raises SceneAssetError for an absolute path that passes through no registered root."""
    return _reroot(xml, origin, legacy_reference,
                   f"passes through no registered asset root ({', '.join(root_names())}); it cannot be re-rooted")


def _reroot(xml: str, origin: str, name_of, why: str) -> tuple[str, int]:
    """Every absolute asset path replaced by `name_of(path)` (a package:// name, or None to refuse)."""
    root = _parse(xml, origin)
    n = 0
    for el, attr, ref in _references(root):
        if ref.startswith(SCHEME) or not PurePosixPath(ref).is_absolute():
            continue
        new = name_of(ref)
        if new is None:
            raise SceneAssetError(f"{el.tag} file {ref!r} in {origin} {why}")
        el.set(attr, new)
        n += 1
    return (_serialize(root), n) if n else (xml, 0)


# ------------------------------------------------------------------ loading portable scenes

def resolve_scene(xml: str, *, base: Path, origin: str) -> str:
    """XML MuJoCo can compile on this machine: includes expanded, every asset file an absolute path here.

    `base` is the scene's folder (the MJCF file's, or the record's for embedded XML); relative files
    resolve against it as MuJoCo would and must stay inside it. Raises SceneAssetError naming the file,
    the element and where it was looked for, for a missing file, an unknown or uninstalled root, an
    absolute path, or a path that leaves the allowed places.
    """
    base = Path(base).resolve()
    root = _parse(xml, origin)
    _expand_includes(root, base, origin, seen=set())
    comp: dict[str, str] = {}
    for c in root.iter("compiler"):
        comp.update(c.attrib)
    strip = comp.get("strippath", "false").lower() == "true"
    for el, attr, ref in _references(root):
        where = f"referenced by {el.tag} {el.get('name', '')!r} in {origin}"
        if ref.startswith(SCHEME):
            el.set(attr, str(_resolve_package(ref, where)))
            continue
        if PurePosixPath(ref).is_absolute():
            legacy = legacy_reference(ref)
            if legacy is None:
                raise SceneAssetError(f"{el.tag} file {ref!r} is an absolute path outside the registered asset roots "
                                      f"({', '.join(root_names())}); {where}. Only package://ROOT/... names and "
                                      "paths relative to the scene are read")
            el.set(attr, str(_resolve_package(legacy, where)))
            continue
        key = "texturedir" if el.tag == "texture" else "meshdir"
        sub = comp.get(key, comp.get("assetdir", ""))
        name = Path(ref).name if strip else ref
        path = _inside(base, Path(sub) / name, f"{el.tag} file {ref!r} ({key}={sub!r})", where)
        if not path.is_file():
            raise SceneAssetError(f"{el.tag} file {ref!r} not found: looked for {path} "
                                  f"({key}={sub!r} relative to {base}); {where}")
        el.set(attr, str(path))
    return _serialize(root)


def _resolve_package(ref: str, where: str) -> Path:
    name = ref[len(SCHEME):].split("/", 1)[0]
    if name not in _registry():
        raise SceneAssetError(f"unknown asset root {name!r} in {ref!r}; registered roots: "
                              f"{', '.join(root_names())} ({ROOTS_FILE}); {where}")
    folders = root_folders(name)
    if not folders:
        extra = _registry()[name].get("extra", "libero")
        raise SceneAssetError(f"asset root {name!r} needs the package {_registry()[name]['package']!r}, which is not "
                              f"installed: pip install 'safevla-bench[{extra}]' ({ref}, {where})")
    found = _existing(ref)
    if found is not None:
        return found
    rel = ref[len(SCHEME) + len(name) + 1:]
    tried = ", ".join(str(_inside(f, Path(rel), ref, where)) for f in folders)
    raise SceneAssetError(f"asset file {ref!r} not found: looked for {tried}; {where}")


def _existing(ref: str) -> Path | None:
    name, _, rel = ref[len(SCHEME):].partition("/")
    for folder in root_folders(name):
        p = (folder / rel).resolve()
        if p.is_relative_to(folder) and p.is_file():
            return p
    return None


def _inside(folder: Path, rel: Path, what: str, where: str) -> Path:
    if rel.is_absolute():
        raise SceneAssetError(f"{what} resolves to an absolute path; only paths inside {folder} are read; {where}")
    p = (folder / rel).resolve()
    if not p.is_relative_to(folder):
        raise SceneAssetError(f"{what} leaves its folder {folder} (resolves to {p}); only files inside it are read; "
                              f"{where}")
    return p


def _expand_includes(root: ET.Element, base: Path, origin: str, *, seen: set) -> None:
    """Replaces each <include file=.../> by the children of the included file's root, as MuJoCo does."""
    for parent in list(root.iter()):
        for i, child in reversed(list(enumerate(parent))):
            if child.tag != "include":
                continue
            ref = child.get("file", "")
            where = f"included from {origin}"
            path = _inside(base, Path(ref), f"included MJCF file {ref!r}", where)
            if not path.is_file():
                raise SceneAssetError(f"included MJCF file {ref!r} not found: looked for {path} ({where})")
            if path in seen:
                raise SceneAssetError(f"included MJCF file {ref!r} includes itself ({where})")
            inner = _parse(path.read_text(), str(path))
            _expand_includes(inner, base, str(path), seen=seen | {path})
            parent.remove(child)
            for j, node in enumerate(list(inner)):
                parent.insert(i + j, node)


def _references(root: ET.Element):
    for el in root.iter():
        for attr in ASSET_FILE_ATTRS.get(el.tag, ()):
            ref = el.get(attr)
            if ref:
                yield el, attr, ref


def _parse(xml: str, origin: str) -> ET.Element:
    try:
        return ET.fromstring(xml)
    except ET.ParseError as exc:
        raise SceneAssetError(f"the MJCF ({origin}) is not valid XML: {exc}") from None


def _serialize(root: ET.Element) -> str:
    return ET.tostring(root, encoding="unicode")


# ------------------------------------------------------------------ migrating archives and stores

def scene_files(paths) -> list[Path]:
    """The scene MJCF files of archives, run stores or single files: every `*.xml` whose root is
    <mujoco> under a folder, plus the scenes a run store's trajectories point at."""
    found: dict[Path, None] = {}
    for given in map(Path, paths):
        if given.is_file():
            found[given.resolve()] = None
            continue
        if not given.is_dir():
            raise SceneAssetError(f"no such file or folder: {given}")
        for xml in sorted(given.rglob("*.xml")):
            if _is_mjcf(xml):
                found[xml.resolve()] = None
        for xml in _store_scenes(given):
            found[xml] = None
    return list(found)


def _is_mjcf(path: Path) -> bool:
    with open(path, "rb") as fh:
        return b"<mujoco" in fh.read(4096)


def _store_scenes(store: Path) -> list[Path]:
    episodes = store / "episodes.parquet"
    if not episodes.is_file():
        return []
    import pandas as pd

    from scoring.records.io import load_record, resolve_mjcf

    out = {}
    for rel in pd.read_parquet(episodes, columns=["trajectory"])["trajectory"].dropna().unique():
        rec = load_record(store / rel)
        if rec.replay is not None and not rec.replay.mjcf_is_xml:
            out[Path(resolve_mjcf(rec)).resolve()] = None
    return list(out)


def migrate_scene_files(paths, *, dry_run: bool = False) -> dict[str, int]:
    """Rewrites the absolute asset paths of every scene under `paths` as package:// names, in place and
    atomically. Returns {scene file: paths rewritten} for the files that changed."""
    from scoring.records.io import atomic_write_bytes

    changed = {}
    for path in scene_files(paths):
        xml, n = migrate_scene(path.read_text(), origin=str(path))
        if n:
            changed[str(path)] = n
            if not dry_run:
                atomic_write_bytes(path, xml.encode())
    return changed
