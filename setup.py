"""Only the optional C accelerator lives here; the project metadata is in pyproject.toml."""

from setuptools import Extension, setup

# optional: without a C compiler the install still succeeds and JSONL lines are decoded
# by the pure-Python path (same records, slower); see scoring/json_fast.py
setup(ext_modules=[Extension("scoring._columns", ["scoring/_columns.c"], depends=["scoring/_json_number.h", "scoring/_pow5_table.h"],
                             optional=True)])
