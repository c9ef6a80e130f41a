"""From a run store to people: the paper's tables, metrics JSON, ambiguity readings, units and labels.

May import: scoring.errors, records, registry, evaluate, stats.
"""
