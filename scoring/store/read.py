"""Reading a run store: its manifest and tables, validated, and what to do with an incomplete one.

`load_store` is what `safevla report`, `safevla compare` and the dashboard call;
`scoring.store.write` writes what it reads (and re-exports these names).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from scoring.errors import RecordError, SafeVLAError

EPISODES = "episodes.parquet"
SPEC_RESULTS = "spec_results.parquet"
MANIFEST = "manifest.json"
ERRORS = "errors.json"
PARTS = ".parts"


def read_table(store: str | os.PathLike, name: str) -> pd.DataFrame:
    """Loads one of the store's Parquet tables with a clear error when absent or corrupt."""
    path = Path(store) / name
    if not path.exists():
        raise RecordError(f"missing {name}; expected a run store written by `safevla score`", file=str(path))
    try:
        return pq.read_table(path).to_pandas()
    except (pa.ArrowException, OSError) as exc:
        raise RecordError(f"corrupt Parquet file ({exc})", file=str(path)) from None


def _read_manifest(store: Path) -> dict:
    path = store / MANIFEST
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise RecordError(f"corrupt manifest ({exc})", file=str(path)) from None


def load_store(store: str | os.PathLike, *, allow_incomplete: bool = False
               ) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """(manifest, episodes, spec_results) of a run store, validated.

    A store whose run was stopped after writing its tables but before `manifest.json`
    is incomplete: with `allow_incomplete` it loads with a stand-in manifest
    (`"incomplete": True`, the command that completes it under "complete_with"),
    otherwise the error says how to complete it.
    """
    store = Path(store)
    if not store.is_dir():
        raise SafeVLAError(f"run store {str(store)!r} does not exist or is not a directory")
    if not (store / MANIFEST).exists():
        command = completion_command(store)
        if command is None:
            raise RecordError("missing manifest.json; expected a run store written by `safevla score`",
                              file=str(store / MANIFEST))
        if allow_incomplete and (store / EPISODES).exists() and (store / SPEC_RESULTS).exists():
            episodes = read_table(store, EPISODES)
            hashes = episodes["registry_hash"].dropna().unique() if "registry_hash" in episodes else []
            manifest = {"incomplete": True, "complete_with": command, "sources": _sources_of(store),
                        "registry_hash": str(hashes[0]) if len(hashes) == 1 else None}
            return manifest, episodes, read_table(store, SPEC_RESULTS)
        raise RecordError(f"incomplete run store: a `safevla score` run stopped before writing manifest.json; "
                          f"complete it with: {command}", file=str(store / MANIFEST))
    manifest = _read_manifest(store)
    if not isinstance(manifest, dict) or "registry_hash" not in manifest:
        raise RecordError("expected a JSON object with registry_hash (written by `safevla score`)",
                          file=str(store / MANIFEST), field="registry_hash")
    return manifest, read_table(store, EPISODES), read_table(store, SPEC_RESULTS)


def completion_command(store: Path) -> str | None:
    """The `safevla score` command that completes a store stopped before its manifest; None if no run began."""
    if not ((store / EPISODES).exists() or any((store / PARTS).glob("episodes-*.parquet"))):
        return None
    sources = _sources_of(store)
    archive = " ".join(os.path.normpath(store / s) for s in sources) if sources else "ARCHIVE"
    return f"safevla score {archive} --out {store}  (it resumes: episodes already scored are kept)"


def _sources_of(store: Path) -> list[str]:
    """The archive a store's episodes came from (store-relative), read from their `source` column."""
    paths = set()
    for table in [store / EPISODES, *sorted((store / PARTS).glob("episodes-*.parquet"))]:
        try:
            column = pq.read_table(table, columns=["source"])["source"].to_pylist()
        except (pa.ArrowException, OSError, KeyError):
            continue
        for source in column:
            if isinstance(source, str) and source:
                path, sep, line = source.rpartition(":")
                paths.add(path if sep and line.isdigit() else source)
    if not paths:
        return []
    common = os.path.commonpath([os.path.normpath(store / p) for p in paths])
    return [os.path.relpath(common, store)]
