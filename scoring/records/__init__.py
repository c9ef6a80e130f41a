"""Trajectory records in and out: schema v1, Appendix B JSON/JSONL, columnar .npz, archives, synthetic records.

May import: scoring.errors only. Everything else in scoring reads episodes through here.
"""
