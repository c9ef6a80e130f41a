"""The run store: `score_archive` writing Parquet, its jobs, locks, reading, annotations, Ray and s3/gs URIs.

May import: scoring.errors, records, registry, evaluate.
"""
