"""What `quantbench validate` checks is listed in docs/FAULTS.md, generated from the checks."""

from __future__ import annotations

import ast
from pathlib import Path

from quantbench import checks, preflight
from quantbench.validation import checks_table

REPO = Path(__file__).resolve().parents[1]


def test_the_docs_carry_the_generated_table_of_checks() -> None:
    page = (REPO / "docs/FAULTS.md").read_text(encoding="utf-8")
    assert checks_table() in page, (
        "docs/FAULTS.md's 'What validate checks' table differs from the checks: paste "
        "`python -m quantbench.validation --checks`"
    )


def test_every_preflight_check_that_problems_runs_is_registered() -> None:
    """Each `*_problems` function `preflight.problems` calls is a registered check, so a check
    added there without its line in the docs fails here."""
    tree = ast.parse(Path(preflight.__file__).read_text(encoding="utf-8"))
    body = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "problems")
    called = {
        n.func.id
        for n in ast.walk(body)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.endswith(
            "_problems")
    }  # fmt: skip
    registered = {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
        and any(
            isinstance(d, ast.Call) and getattr(d.func, "attr", None) == "check"
            for d in node.decorator_list
        )
    }
    assert called, "problems() calls no *_problems function?"
    assert called <= registered, f"not registered: {sorted(called - registered)}"
    names = [c.name for c in checks.registered() if c.where == "preflight"]
    assert len(names) == len(set(names)) >= len(called)
