"""The STL dialect of the registry: its parser and the batched offline robustness engine.

May import: scoring.errors only. `scoring.stl.robustness` / `robustness_trace` are contract names.
"""

from scoring.stl.engine import *  # noqa: F401,F403  (the names of the former scoring/stl.py)
from scoring.stl.engine import __all__  # noqa: F401
