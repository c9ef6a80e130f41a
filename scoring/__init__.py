"""SafeVLA-Bench scoring: post-hoc STL safety scores (SR, Safety, SBU, VSI) for robot rollouts.

Pure numpy/pandas/pyarrow/scipy: nothing here imports MuJoCo or Streamlit. The subpackages, in the
order an episode flows (each imports only those before it): records -> registry -> stl -> evaluate
-> stats -> store -> report -> cli. `errors` sits beside them and imports nothing.
"""

from scoring.errors import RecordError, RegistryError, SafeVLAError
from scoring.records.schema import Contacts, EpisodeRecord, Replay

__version__ = "0.1.0"

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
