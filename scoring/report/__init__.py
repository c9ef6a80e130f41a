"""From a run store to people: the paper's tables, metrics JSON, ambiguity readings, units and labels.

May import: scoring.errors, records, registry, evaluate, stats.
"""

from scoring.moved import forward

__getattr__ = forward(__name__, "scoring.report.outputs")  # the names of the former scoring/report.py
