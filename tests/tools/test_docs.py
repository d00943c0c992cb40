"""The documentation can be navigated and points at what exists: every page is reached from the
index (docs/README.md), the index from the README, and every source file params.yaml names is
there (params.yaml pointed at two modules that had been renamed). Every path and module the pages
name: tests/test_docs.py."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# a file of the project's code named in prose: src/..., stages/... (placeholders like <engine>
# and globs are not names of one file)
CODE_PATH = re.compile(r"(?<![\w/.])((?:src|stages|tools)/[\w/.-]+\.py)")


def pages() -> list[Path]:
    return sorted((REPO / "docs").glob("*.md"))


def test_every_page_is_in_the_index_and_the_index_in_the_readme() -> None:
    index = (REPO / "docs/README.md").read_text(encoding="utf-8")
    unlinked = [p.name for p in pages() if p.name != "README.md" and f"]({p.name})" not in index]
    assert unlinked == [], f"docs/README.md does not link {unlinked}"
    assert "](docs/README.md)" in (REPO / "README.md").read_text(encoding="utf-8")


def test_every_code_path_params_names_exists() -> None:
    stale = []
    for source in [REPO / "params.yaml"]:
        for match in CODE_PATH.finditer(source.read_text(encoding="utf-8")):
            if not (REPO / match.group(1)).exists():
                stale.append(f"{source.relative_to(REPO)}: {match.group(1)}")
    assert stale == [], "\n".join(stale)


def test_the_stage_output_table_is_the_catalogue() -> None:
    """docs/ARCHITECTURE.md's table of stage outputs is generated: a schema added or a version
    bumped without the table following fails here (it had fallen behind by three rows)."""
    from quantbench.schemas.catalog import markdown_table

    text = (REPO / "docs/ARCHITECTURE.md").read_text(encoding="utf-8")
    assert markdown_table() in text, (
        "docs/ARCHITECTURE.md's stage-output table differs from the schemas: paste the output "
        "of `python -m quantbench.schemas.catalog` over it"
    )
