"""benchmarks/dashboard_bench.py: a synthetic store cached in /tmp is reused only by the code
that built it (a store left by other code measured what this code no longer writes)."""

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from dashboard_bench import ensure_store, store_stamp  # noqa: E402


def test_the_stamp_names_the_parameters_and_the_code():
    a = store_stamp(48, renderable=False, n_steps=20, contacts=2)
    assert a == store_stamp(48, renderable=False, n_steps=20, contacts=2)
    assert a != store_stamp(48, renderable=False, n_steps=21, contacts=2)
    assert a != store_stamp(49, renderable=False, n_steps=20, contacts=2)


def test_a_store_without_this_codes_stamp_is_rebuilt(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    # a store some other code left: right size, synthetic, but no stamp of this code
    (store / "manifest.json").write_text(json.dumps({"n_episodes": 12, "synthetic": True}))
    ensure_store(store, 12, n_steps=20, contacts=1)
    assert (store / "episodes.parquet").is_file()
    assert (store / ".bench_stamp").read_text() == store_stamp(12, renderable=False, n_steps=20, contacts=1)
    built = (store / "episodes.parquet").stat().st_mtime_ns
    ensure_store(store, 12, n_steps=20, contacts=1)  # now stamped: reused as it is
    assert (store / "episodes.parquet").stat().st_mtime_ns == built
