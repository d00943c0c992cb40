"""Every JSON read in the package and the stages, classified: a stage's output is read through its
schema (`quantbench.schemas.io`), never as a raw dict.

The test finds each call of ``json.load``/``json.loads`` in ``src/quantbench`` and ``stages``
(by module and enclosing function) and requires it to be listed below, either as a read of
something that is not a stage's output (a Hugging Face file, a subprocess's answer, a cache, the
bytes of a protocol) or as a stage output still read raw, named with the file it reads. A new
raw read fails until it is classified, and a listed read that is gone fails until its entry is
removed, so the list stays the true inventory of what issue 31 has left to put under a schema.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

NOT_A_STAGE_OUTPUT = {
    ("src/quantbench/schemas/io.py", "read"): "the schema reader itself",
    ("src/quantbench/schemas/io.py", "parse_text"): "the schema reader itself (text)",
    ("src/quantbench/schemas/io.py", "parse_entries"): "the schema reader itself (a file of "
    "named entries, each versioned)",
    ("src/quantbench/bench/resume.py", "PartialStore.row"): "the bench stage's own resume state",
    ("src/quantbench/bench/resume.py", "PartialStore.server"): "the bench stage's resume state",
    ("src/quantbench/bench/resume.py", "PartialStore.task"): "the bench stage's resume state",
    ("src/quantbench/engines/vllm_kernels.py", "parse_probe"): "a probe subprocess's answer",
    ("src/quantbench/engines/vllm_kernels.py", "probe"): "the machine's probe cache",
    ("src/quantbench/estimate/checkpoint.py", "_safetensors_header"): "a safetensors header",
    ("src/quantbench/estimate/compare.py", "load_measured"): "a user's measured points, "
    "each validated as MeasuredPoint",
    ("src/quantbench/estimate/lookup.py", "resolve_hardware"): "a hardware file, validated as "
    "HardwareSpec",
    ("src/quantbench/estimate/machine.py", "_load_cache"): "the machine probe's cache",
    ("src/quantbench/cli/exchange.py", "read_file"): "another tool's result file (vllm bench "
    "serve, AIPerf, GuideLLM), parsed by its importer",
    ("src/quantbench/fingerprint.py", "other_python_versions"): "a subprocess's answer",
    ("src/quantbench/fingerprint.py", "torch_kernels"): "a subprocess's answer",
    ("src/quantbench/fingerprint.py", "accelerator"): "setup's record of the stack it installed "
    "(.venv/stack.json, quantbench.native.stack)",
    ("src/quantbench/hfconfig.py", "read_hf_config"): "a Hugging Face config.json",
    ("src/quantbench/data.py", "jsonl_rows"): "a user's data file (training chats, held-out "
    "questions), read again for what parses but is wrong",
    ("src/quantbench/lora/adopt.py", "adapter_fit_problems"): "peft's adapter_config.json",
    ("src/quantbench/model_files.py", "_has_chat_template"): "a model folder's "
    "tokenizer_config.json",
    ("src/quantbench/model_files.py", "_index_problems"): "a model folder's safetensors index",
    ("src/quantbench/safetensors_header.py", "read_header"): "a safetensors header",
    ("src/quantbench/linear_names.py", "_linear_names"): "the machine's cache",
    ("src/quantbench/cli/load.py", "workload_from_args"): "a command-line value",
    ("src/quantbench/load/forkserver.py", "_recv_request"): "the fork server's protocol",
    ("src/quantbench/workloads/plan.py", "LoadPlan.load"): "the request plan a load process gets "
    "from its parent, inside one stage",
    ("src/quantbench/load/session.py", "first_model"): "a server's /v1/models answer",
    ("src/quantbench/load/session.py", "read_meta"): "a load process's note to its session, "
    "inside one stage",
    ("src/quantbench/load/streaming.py", "StreamParser._dispatch"): "a server-sent event",
    ("src/quantbench/lora/data.py", "load_chats"): "the training data",
    ("src/quantbench/lora/merge.py", "adapter_provenance"): "peft's adapter_config.json",
    ("src/quantbench/mock_server.py", "read_log"): "the scripted server's truth log",
    ("src/quantbench/native/llama_build.py", "_download_direct"): "PyPI's JSON answer",
    ("src/quantbench/native/llama_build.py", "build_info"): "the llama.cpp build's own record",
    ("src/quantbench/qa.py", "load_qa"): "the shipped held-out task file",
    ("src/quantbench/quality/evaluate.py", "_stop_ids"): "a generation_config.json",
    ("src/quantbench/quality/refcache.py", "load"): "the reference-pass cache",
    ("src/quantbench/report/charts.py", "template_json"): "plotly's own JSON",
    ("src/quantbench/report/charts.py", "to_json"): "plotly's own JSON",
    ("src/quantbench/workloads/files.py", "json_object_lines"): "a user's conversations file "
    "or prompt dataset (one reader for both)",
}

STAGE_OUTPUT_STILL_RAW: dict[tuple[str, str], str] = {}
"""Empty: every stage output is read through its schema (issue 31). A raw read added back must
be listed here with the file it reads, and fails review."""


class _Finder(ast.NodeVisitor):
    """The json.load/json.loads calls of one module, each with its enclosing function."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.stack: list[str] = []
        self.found: set[tuple[str, str]] = set()

    def generic_visit(self, node: ast.AST) -> None:
        scoped = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        if scoped:
            self.stack.append(node.name)  # type: ignore[attr-defined]
        func = getattr(node, "func", None)
        if (
            isinstance(node, ast.Call)
            and isinstance(func, ast.Attribute)
            and func.attr in ("load", "loads")
            and isinstance(func.value, ast.Name)
            and func.value.id == "json"
        ):
            self.found.add((self.where, ".".join(self.stack) or "<module>"))
        super().generic_visit(node)
        if scoped:
            self.stack.pop()


def json_reads(base: Path = REPO) -> set[tuple[str, str]]:
    """(file, enclosing function) of every json.load/json.loads call under ``base``'s package
    and stages."""
    found: set[tuple[str, str]] = set()
    for path in [*base.glob("src/quantbench/**/*.py"), *base.glob("stages/*.py")]:
        finder = _Finder(path.relative_to(base).as_posix())
        finder.visit(ast.parse(path.read_text(encoding="utf-8")))
        found |= finder.found
    return found


def test_every_json_read_is_classified() -> None:
    """A stage output read as a raw dict (a new json.loads of a stage's file) fails here: read
    it with ``schemas.io.read(path, Model)``, or, for what is not a stage's output, add it to
    the list above with what it reads."""
    known = set(NOT_A_STAGE_OUTPUT) | set(STAGE_OUTPUT_STILL_RAW)
    unclassified = sorted(json_reads() - known)
    assert not unclassified, (
        "JSON read outside quantbench.schemas.io; read stage outputs through their schema, "
        f"classify anything else in this test: {unclassified}"
    )


def test_the_inventory_lists_only_reads_that_exist() -> None:
    gone = sorted((set(NOT_A_STAGE_OUTPUT) | set(STAGE_OUTPUT_STILL_RAW)) - json_reads())
    assert not gone, f"no longer read there; remove from this test's lists: {gone}"


def test_the_finder_sees_a_planted_raw_read(tmp_path: Path) -> None:
    """The scan itself: a module reading a stage output as a raw dict is found, with its
    function."""
    package = tmp_path / "src" / "quantbench" / "report"
    package.mkdir(parents=True)
    (package / "winner.py").write_text(
        "import json\n\n\nclass Best:\n    def chat(self, path):\n"
        "        return json.loads(path.read_text())['chat']\n",
        encoding="utf-8",
    )
    assert json_reads(tmp_path) == {("src/quantbench/report/winner.py", "Best.chat")}
