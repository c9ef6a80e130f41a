"""Episodes to verdicts: derived signals, stacked batches, registry clauses, per-episode score, VSI, what-if.

May import: scoring.errors, records, registry, stl.
"""
