"""tools/layers.py: the packages import down the layers, with no cycle at import time; a planted
upward import, an import cycle, a package in no layer and a stale exception each fail it."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tools import dag, layers

REPO = Path(__file__).resolve().parents[2]


def test_the_repository_passes() -> None:
    assert layers.check(REPO / "src") == []


def tree(root: Path, files: dict[str, str]) -> Path:
    """A package ``quantbench`` of the given modules (their folders' __init__.py made too)."""
    src = root / "src"
    for name, code in files.items():
        path = src / "quantbench" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        for folder in [path.parent, *path.parent.parents]:
            if folder == src:
                break
            (folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(code))
    return src


CLEAN = {
    "errors.py": "class UserError(Exception): ...\n",
    "load/session.py": "from quantbench.errors import UserError\n",
    "engines/server.py": "from quantbench.load.session import UserError\n",
}


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    assert layers.check(tree(tmp_path, CLEAN), known={}) == []


def test_an_upward_import_fails_even_inside_a_function(tmp_path: Path) -> None:
    # the harness reaching up into the engines, "hidden" in a function
    src = tree(tmp_path, {**CLEAN, "load/session.py": """
        def start():
            from quantbench.engines.server import UserError
            return UserError
        """})  # fmt: skip
    problems = layers.check(src, known={})
    assert len(problems) == 1, problems
    assert problems[0].startswith("quantbench/load/session.py:3: quantbench.load.session imports")
    assert "engines is not below load" in problems[0]


def test_an_import_cycle_at_import_time_fails(tmp_path: Path) -> None:
    # inside one package: the order between packages cannot see it
    src = tree(tmp_path, {
        **CLEAN,
        "load/a.py": "from quantbench.load import b\n",
        "load/b.py": "from quantbench.load.a import x\nx = 1\n",
    })  # fmt: skip
    assert layers.check(src, known={}) == [
        "import cycle at import time: quantbench.load.a -> quantbench.load.b"
    ]
    # an import under TYPE_CHECKING or in a function does not run at import time
    src = tree(tmp_path / "lazy", {
        **CLEAN,
        "load/a.py": "from quantbench.load import b\n",
        "load/b.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from quantbench.load.a import x
            def f():
                from quantbench.load.a import x
                return x
            """,
    })  # fmt: skip
    assert layers.check(src, known={}) == []


def test_a_package_in_no_layer_and_a_stale_exception_fail(tmp_path: Path) -> None:
    src = tree(tmp_path, {**CLEAN, "newthing/core.py": "x = 1\n"})
    stale = "quantbench.load.session -> quantbench.engines.server"
    assert layers.check(src, known={stale: "was needed once"}) == [
        "newthing: in no layer (add it to LAYERS in tools/layers.py)",
        f"{stale}: no longer imported; remove it from KNOWN in tools/layers.py",
    ]


def test_a_known_exception_is_allowed_and_the_command_line_imports_any_layer(
    tmp_path: Path,
) -> None:
    src = tree(tmp_path, {
        **CLEAN,
        "engines/base.py": "x = 1\n",
        "load/session.py": "from quantbench.engines.base import x\n",
        # the command line (`quantbench load`) is the top layer
        "cli/load.py": "from quantbench.engines.server import UserError\n",
    })  # fmt: skip
    edge = "quantbench.load.session -> quantbench.engines.base"
    assert layers.check(src, known={edge: "moving it is planned"}) == []
    assert len(layers.check(src, known={})) == 1


def test_make_check_dag_runs_the_layer_check(tmp_path: Path, capsys) -> None:
    assert dag.main(["--check"]) == 0
    assert "every import goes down the layers" in capsys.readouterr().out


def test_the_architecture_page_draws_the_layers() -> None:
    page = (REPO / "docs" / "ARCHITECTURE.md").read_text()
    assert layers.draw() in page, "docs/ARCHITECTURE.md: paste `python tools/layers.py --draw`"
