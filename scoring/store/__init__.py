"""The run store: `score_archive` writing Parquet, its jobs, locks, reading, annotations, Ray and s3/gs URIs.

May import: scoring.errors, records, registry, evaluate.
"""

from scoring.moved import forward

__getattr__ = forward(__name__, "scoring.store.write")  # the names of the former scoring/store.py
