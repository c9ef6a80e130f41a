"""The pages run with Streamlit's magic off (dashboard/app.py): no page script holds an
expression magic would draw, so turning it off changes nothing on the page but the script's
first compile."""

import ast
from pathlib import Path

import pytest

pytest.importorskip("streamlit")

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "dashboard" / "app.py", *sorted((ROOT / "dashboard" / "views").glob("*.py"))]
_DOC_PARENTS = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef)


def _magic_expressions(source: str) -> list[int]:
    """Lines of statements Streamlit's magic would turn into st.write (runtime/scriptrunner/
    magic.py: a bare expression that is not a call, an await, a yield or a docstring)."""
    found = []
    for parent in ast.walk(ast.parse(source)):
        for attr in ("body", "orelse", "finalbody"):
            body = getattr(parent, attr, None)
            if not isinstance(body, list):
                continue
            for i, node in enumerate(body):
                if not isinstance(node, ast.Expr) or isinstance(node.value, (ast.Call, ast.Await, ast.Yield,
                                                                            ast.YieldFrom)):
                    continue
                docstring = (i == 0 and attr == "body" and isinstance(parent, _DOC_PARENTS)
                             and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))
                if not docstring:
                    found.append(node.lineno)
    return found


def test_the_check_finds_what_magic_draws():
    assert _magic_expressions('"""doc"""\nimport x\nx\n"a note"\nif x:\n    "drawn"\nprint(x)\n') == [3, 4, 6]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_page_relies_on_magic(page):
    assert _magic_expressions(page.read_text()) == []


def test_the_app_turns_magic_off():
    from streamlit import config

    from dashboard_helpers import app, ok

    ok(app(ROOT / "assets" / "demo" / "store", page="overview"))
    assert config.get_option("runner.magicEnabled") is False
