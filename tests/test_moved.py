"""scoring.moved: an old module path imports as the moved module itself, warns once naming the
new path, keeps pickles made before the move loadable, and leaves unknown names alone."""

from __future__ import annotations

import importlib
import pickle
import subprocess
import sys
import warnings

import pytest

from scoring import moved

OLD = "scoring.old_place_of_stats_for_a_test"


@pytest.fixture(autouse=True)
def table():
    moved.install({OLD: "scoring.stats.intervals"})
    yield
    sys.modules.pop(OLD, None)


def test_old_path_is_the_new_module_and_warns_once_naming_it():
    import scoring.stats.intervals as new
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module(OLD)
        again = importlib.import_module(OLD)
    assert old is new and again is new
    assert old.__spec__.name == "scoring.stats.intervals", "the real module's spec was overwritten by the alias"
    assert [str(w.message) for w in caught if w.category is DeprecationWarning] == [
        f"{OLD} moved to scoring.stats.intervals; import it from there (the old path will go away)"]
    assert old.wilson_interval(3, 10) == new.wilson_interval(3, 10)


def test_the_warning_points_at_the_import_line():
    code = (f"import warnings, scoring.moved as m; m.install({{{OLD!r}: 'scoring.stats.intervals'}})\n"
            f"warnings.simplefilter('always')\nimport {OLD}\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert '<string>:3: DeprecationWarning' in out.stderr, out.stderr


def test_a_pickle_made_at_the_old_path_loads_the_moved_object():
    # a pickle names a class or function by module path: one written before the move names the old path
    blob = f"c{OLD}\nwilson_interval\n.".encode()
    import scoring.stats.intervals as new
    with pytest.warns(DeprecationWarning, match="moved to scoring.stats.intervals"):
        assert pickle.loads(blob) is new.wilson_interval


def test_unknown_old_names_still_fail_as_before():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("scoring.never_was_a_module")


def test_install_is_idempotent_and_moves_lists_the_table():
    before = sum(isinstance(f, moved._MovedModules) for f in sys.meta_path)
    moved.install({OLD: "scoring.stats.intervals"})
    assert sum(isinstance(f, moved._MovedModules) for f in sys.meta_path) == before == 1
    assert moved.moves()[OLD] == "scoring.stats.intervals"


def test_every_path_issue_17_moved_imports_as_its_new_module():
    # In a fresh interpreter, so no module is imported yet under either name: each old path
    # of the MOVED tables (scoring, replay) is the new module object and warns naming it.
    code = """
import importlib, json, warnings
import scoring, replay
table = {**scoring.MOVED, **replay.MOVED}
bad = []
for old, new in sorted(table.items()):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    if module is not importlib.import_module(new):
        bad.append(f"{old}: not {new}")
    elif not any(new in str(w.message) for w in caught if w.category is DeprecationWarning):
        bad.append(f"{old}: no DeprecationWarning naming {new}")
print(json.dumps({"n": len(table), "bad": bad}))
"""
    import json

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["bad"] == [] and got["n"] >= 70


def test_a_package_that_took_a_module_s_place_still_has_its_names():
    # scoring.store was a module (score_archive lived there); now a package that finds its old names
    import scoring.store
    import scoring.store.write as write
    assert scoring.store.score_archive is write.score_archive
    from scoring.store import lock  # a submodule is imported as such
    assert lock.__name__ == "scoring.store.lock"
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        scoring.store.no_such_name
    from replay.render import Replayer  # noqa: F401  (replay.render.Replayer, as the issue names it)
    from scoring.stl import robustness, robustness_trace  # noqa: F401  (contract names)
