"""The applicability registry: spec library, host benchmarks, task templates, tags -> active specs.

May import: scoring.errors only. `scoring.registry.load_registry` / `active_specs` are contract names.
"""

from scoring.registry.lookup import *  # noqa: F401,F403  (the names of the former scoring/registry.py)
from scoring.registry.lookup import __all__  # noqa: F401
