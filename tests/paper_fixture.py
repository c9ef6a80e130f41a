"""A small fixed run store for the paper-layout tests: synthetic records (scoring.records.synthetic),
3 models x the 4 LIBERO suites x 2 tasks x 2 episodes, plus 2 RoboCasa-365 tasks, with
a Train label on two of the models. Fixed seeds: the same store on every machine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from scoring.records.io import save_record
from scoring.records.synthetic import make_record
from scoring.store.write import score_archive

MODELS = {"policy-a": "SFT", "policy-b": "RL", "policy-c": None}
LIBERO = ("libero-spatial", "libero-object", "libero-goal", "libero-10")
ROBOCASA_TASKS = ("PickPlaceCounterToStove", "OpenDrawer")


def build_store(root: Path) -> Path:
    """Writes the archive under root/archive and scores it into root/store."""
    rng = np.random.default_rng(18)
    archive = root / "archive"
    cells = [(b, f"task_{t}") for b in LIBERO for t in (0, 1)] + [("robocasa-365", t) for t in ROBOCASA_TASKS]
    for m_index, (model, train) in enumerate(MODELS.items()):
        for bench, task in cells:
            for ep in range(2):
                eid = f"{bench}/{task}/{model}/ep_{ep:03d}"
                rec = make_record(rng, episode_id=eid, benchmark=bench, task_id=task, model=model, n_steps=60,
                                  contacts_per_step=4, severity=0.5 + 1.5 * m_index)
                meta = {**rec.meta, "suite": bench, **({"train": train} if train else {})}
                save_record(dataclasses.replace(rec, meta=meta), archive / f"{eid.replace('/', '__')}.npz")
    score_archive([archive], root / "store", progress=False)
    return root / "store"
