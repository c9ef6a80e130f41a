"""SafeVLA-Bench scoring: post-hoc STL safety scores (SR, Safety, SBU, VSI) for robot rollouts.

Pure numpy/pandas/pyarrow/scipy: nothing here imports MuJoCo or Streamlit. The subpackages, in the
order an episode flows (each imports only those before it): records -> registry -> stl -> evaluate
-> stats -> store -> report -> cli. `errors` and `moved` sit beside them and import nothing.
"""

from scoring import moved
from scoring.errors import RecordError, RegistryError, SafeVLAError
from scoring.records.schema import Contacts, EpisodeRecord, Replay

__version__ = "0.1.0"

MOVED = {  # issue 17: old module path -> where it lives now (scoring.moved keeps the old one importing)
    "scoring.annotations": "scoring.store.annotations",
    "scoring.archive": "scoring.records.archive",
    "scoring.axis_rates": "scoring.report.axis_rates",
    "scoring.clauses": "scoring.evaluate.clauses",
    "scoring.compare": "scoring.stats.compare",
    "scoring.compare_cli": "scoring.cli.compare",
    "scoring.compare_unpaired": "scoring.stats.compare_unpaired",
    "scoring.compare_verdict": "scoring.stats.compare_verdict",
    "scoring.display": "scoring.report.display",
    "scoring.io": "scoring.records.io",
    "scoring.job_plan": "scoring.store.job_plan",
    "scoring.json_fast": "scoring.records.json_fast",
    "scoring.json_record": "scoring.records.json_record",
    "scoring.metrics": "scoring.stats.metrics",
    "scoring.metrics_json": "scoring.report.metrics_json",
    "scoring.npz_format": "scoring.records.npz_format",
    "scoring.paper_grids": "scoring.report.paper_grids",
    "scoring.paper_layout": "scoring.report.paper_layout",
    "scoring.ranking": "scoring.stats.ranking",
    "scoring.ray_connect": "scoring.store.ray_connect",
    "scoring.ray_score": "scoring.store.ray_score",
    "scoring.ray_ship": "scoring.store.ray_ship",
    "scoring.readings": "scoring.report.readings",
    "scoring.registry_load": "scoring.registry.load",
    "scoring.registry_types": "scoring.registry.types",
    "scoring.schema": "scoring.records.schema",
    "scoring.score": "scoring.evaluate.score",
    "scoring.score_uri": "scoring.store.score_uri",
    "scoring.signals": "scoring.evaluate.signals",
    "scoring.stacked": "scoring.evaluate.stacked",
    "scoring.stl_parse": "scoring.stl.parse",
    "scoring.store_jobs": "scoring.store.jobs",
    "scoring.store_lock": "scoring.store.lock",
    "scoring.store_paths": "scoring.store.paths",
    "scoring.store_read": "scoring.store.read",
    "scoring.synthetic": "scoring.records.synthetic",
    "scoring.table_render": "scoring.report.table_render",
    "scoring.tables": "scoring.report.tables",
    "scoring.tags": "scoring.registry.tags",
    "scoring.torque_joints": "scoring.report.torque_joints",
    "scoring.uri": "scoring.store.uri",
    "scoring.uri_lease": "scoring.store.uri_lease",
    "scoring.uri_mirror": "scoring.store.uri_mirror",
    "scoring.vsi": "scoring.evaluate.vsi",
    "scoring.whatif": "scoring.evaluate.whatif",
}
moved.install(MOVED)

__all__ = ["Contacts", "EpisodeRecord", "RecordError", "RegistryError", "Replay", "SafeVLAError",
           "score_episode", "score_archive", "__version__"]


def __getattr__(name):
    # Scoring pulls in the registry and STL engine; keep `import scoring` light for hosts
    # that only write records.
    if name == "score_episode":
        from scoring.evaluate.score import score_episode
        return score_episode
    if name == "score_archive":
        from scoring.store.write import score_archive
        return score_archive
    raise AttributeError(f"module 'scoring' has no attribute {name!r}")
