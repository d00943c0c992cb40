"""The engine tables of README.md and docs/ENGINES.md are the registry's, generated."""

from __future__ import annotations

from pathlib import Path

from quantbench.engines.registry import BUILTIN
from quantbench.engines.table import markdown_table

REPO = Path(__file__).resolve().parents[2]


def test_the_docs_carry_the_generated_engine_tables() -> None:
    for path, short in (("docs/ENGINES.md", False), ("README.md", True)):
        text = (REPO / path).read_text()
        assert markdown_table(short) in text, (
            f"{path}'s engine table differs from the registry's: paste "
            f"`python -m quantbench.engines.table{' --short' if short else ''}`"
        )


def test_every_engine_has_a_row_with_what_it_serves_and_its_environment() -> None:
    table = markdown_table().split("\n")[2:]
    assert [row.split("|")[1].strip(" `") for row in table] == list(BUILTIN)
    vllm = next(row for row in table if row.startswith("| `vllm`"))
    assert "bf16, gptq, awq, w8a8" in vllm and "`make vllm`" in vllm and "`/metrics`" in vllm
