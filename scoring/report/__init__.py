"""From a run store to people: the paper's tables and Figure 2, metrics JSON, ambiguity readings, units and labels.

May import: scoring.errors, records, registry, evaluate, stats, store; Altair only inside a figure builder.
"""
