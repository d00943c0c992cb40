"""Bad input: each must be refused before any work, naming the key, the value and the fix.

Every params case is one edit of the project's own params.yaml (or of a data file it names),
written into a fresh copy of the project, and given to the commands a user runs: `quantbench
validate` (what `make repro` runs first) and, for one case per kind, the pipeline's first stage
(`python stages/validate.py`, what `dvc repro` runs before anything else). A case passes when the
command exits with status 2 and its message holds every part of `must_say`. A case whose input
is accepted is reported as MISSING, which fails the run like a FAIL.

CLI cases run `quantbench load` (the load test against any server) with bad flags.
"""

from __future__ import annotations

import contextlib
import copy
import io
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from faults.scenario import Context, Outcome, Scenario

REPO = Path(__file__).resolve().parents[1]
RANDOM = {"source": "random", "input_len": 8, "output_len": 8}

Edit = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Edit:
    """An edit that sets one key (dotted; a number indexes a list) of the params mapping."""

    def edit(params: dict[str, Any]) -> None:
        node: Any = params
        parts = path.split(".")
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return edit


def _workload(path: str | None = None, **spec: Any) -> Edit:
    """An edit that makes workloads.chat a workload of its own (a dataset at ``path``, or the
    given keys) in place of the named one."""
    value: dict[str, Any] = {
        "load": [{"kind": "concurrency", "concurrency": 1}],
        "num_requests": 8,
    }
    if path is not None:
        value["prompts"] = {"source": "dataset", "path": path}
    value.update(spec)
    return _set("workloads.chat", value)


def _merge(extra: dict[str, Any]) -> Edit:
    def edit(params: dict[str, Any]) -> None:
        def deep(into: dict[str, Any], new: dict[str, Any]) -> None:
            for key, value in new.items():
                if isinstance(value, dict) and isinstance(into.get(key), dict):
                    deep(into[key], value)
                else:
                    into[key] = value

        deep(params, copy.deepcopy(extra))

    return edit


@dataclass(frozen=True)
class BadParams:
    key: str
    fault: str
    edit: Edit | None
    must_say: tuple[str, ...]
    """Parts the message must hold: the key, the value, the fix."""
    expected: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    """Files written into the project copy (relative path -> text, or raw bytes) before the
    command runs."""
    prepend: bool = False
    """The files' bytes go in front of what is there (params.yaml with a bad first line)."""
    text: Callable[[str], str] | None = None
    """An edit of the params file's text itself (for what YAML parsing hides)."""
    via_stage: bool = False
    """Also run the pipeline's first stage (python stages/validate.py) on it."""

    @property
    def injected(self) -> str:
        parts = []
        if self.text is not None:
            parts.append("params.yaml text edited")
        if self.edit is not None:
            parts.append("params.yaml edited")
        parts += [f"{name} written" for name in self.files]
        return "; ".join(parts) or "params.yaml as is"


PARAMS_CASES = [
    BadParams(
        "empty-params", "an empty params.yaml", None, ("params.yaml is empty", "git checkout"),
        "'params.yaml is empty ... restore it with `git checkout params.yaml`'",
        text=lambda _: "# nothing\n", via_stage=True,
    ),
    BadParams(
        "duplicate-key", "a key written twice (YAML keeps the last one silently)", None,
        ("'slo'", "written twice", "lines"),
        "'key 'slo' is written twice (lines N and M) ... remove one'",
        text=lambda t: t + '\nslo: "ttft:p95<=9s"\n', via_stage=True,
    ),
    BadParams(
        "prompts-missing", "a prompts file that does not exist",
        _workload("data/no-such-prompts.jsonl"),
        ("workloads.chat.prompts.path", "data/no-such-prompts.jsonl", "does not exist"),
        "error naming workloads.chat.prompts.path and the missing file",
    ),
    BadParams(
        "prompts-empty", "an empty prompts file",
        _workload("data/empty-prompts.jsonl"),
        ("workloads.chat.prompts.path", "data/empty-prompts.jsonl", "has no lines"),
        "error naming the file: it has no lines", files={"data/empty-prompts.jsonl": "\n"},
    ),
    BadParams(
        "prompts-invalid", "a prompts line that is not JSON",
        _workload("data/bad-prompts.jsonl"),
        ("bad-prompts.jsonl:2", "not valid JSON"),
        "error naming the file and line 2",
        files={"data/bad-prompts.jsonl": '{"id": "a", "prompt": "hi", "max_tokens": 4}\n{oops\n'},
    ),
    BadParams(
        "prompts-list", "a prompts line that is a JSON list",
        _workload("data/list-prompts.jsonl"),
        ("list-prompts.jsonl:1", "must be a JSON object", "list"),
        "error naming the file and line, not a traceback",
        files={"data/list-prompts.jsonl": '["not", "an", "object"]\n'},
    ),
    BadParams(
        "conversation-line", "a conversations file with a malformed turn",
        _workload(prompts={"source": "conversations", "path": "data/convs.jsonl",
                           "max_tokens": 8}),
        ("convs.jsonl:2",),
        "error naming the file and line 2, and what is wrong there",
        files={"data/convs.jsonl": (
            '{"id": "a", "messages": [{"role": "user", "content": "hi"}]}\n'
            '{"id": "b", "messages": [{"role": "user", "content": 3}]}\n'
        )},
    ),
    BadParams(
        "trace-order", "an arrival trace that goes back in time",
        _workload(prompts={"source": "trace", "path": "data/trace.jsonl"},
                  load=[{"kind": "rate", "rate": 1}]),
        ("trace.jsonl:2", "back in time"),
        "error naming the line whose arrival is earlier than the one before",
        files={"data/trace.jsonl": (
            '{"timestamp": 1000, "input_length": 20, "output_length": 4, "hash_ids": [1]}\n'
            '{"timestamp": 500, "input_length": 20, "output_length": 4, "hash_ids": [2]}\n'
        )},
    ),
    BadParams(
        "point-below-its-load", "a point with fewer measured requests than streams",
        _set("workloads.chat.load", [{"kind": "concurrency", "concurrency": 16,
                                      "num_requests": 8}]),
        ("workloads.chat", "16 streams", "num_requests to at least 16"),
        "error: such a point never measures the load it names; the fix",
    ),
    BadParams(
        "workload-unknown", "a named workload that does not exist",
        _set("workloads.chat.use", "chatty"),
        ("workloads.chat.use", "chatty", "multi-turn"),
        "error naming the key, the value and the named workloads",
    ),
    BadParams(
        "train-missing", "a missing training file", _set("data.train", "data/nope.jsonl"),
        ("data.train", "data/nope.jsonl", "does not exist"),
        "error naming data.train and the path", via_stage=True,
    ),
    BadParams(
        "train-line", "a training line that is not JSON (read whole before any work)",
        _set("data.train", "data/bad-train.jsonl"),
        ("data.train", "bad-train.jsonl:2", '"messages"'),
        "error naming data.train, the file and line 2, and the expected shape",
        files={"data/bad-train.jsonl": (
            '{"messages": [{"role": "user", "content": "hi"}, '
            '{"role": "assistant", "content": "hello"}]}\n{oops\n'
        )},
    ),
    BadParams(
        "heldout-field", "a held-out question without its accept strings",
        _set("data.heldout", "data/bad-heldout.jsonl"),
        ("data.heldout", "bad-heldout.jsonl:1", "accept"),
        "error naming data.heldout, the file and line 1, and the missing 'accept' list",
        files={"data/bad-heldout.jsonl": '{"question": "q?", "answer": "a"}\n'},
    ),
    BadParams(
        "train-not-utf8", "a training file saved in Latin-1",
        _set("data.train", "data/latin1-train.jsonl"),
        ("data.train", "latin1-train.jsonl", "not UTF-8", "line 1", "iconv"),
        "error naming the file, the line of the first bad byte, and how to convert it",
        files={"data/latin1-train.jsonl": (
            '{"messages": [{"role": "user", "content": "caf\u00e9?"}, '
            '{"role": "assistant", "content": "oui"}]}\n'
        ).encode("latin-1")},
    ),
    BadParams(
        "params-not-utf8", "a params.yaml saved in Latin-1 (a comment with an accent)", None,
        ("params", "params.yaml", "not UTF-8", "line 1", "iconv"),
        "error naming params.yaml, the line, and how to convert it (no traceback)",
        files={"params.yaml": b"# caf\xe9\n"}, prepend=True, via_stage=True,
    ),
    BadParams(
        "lora-target", "a LoRA target module the model does not have",
        _set("lora.target_modules", ["q_proj", "qkv_proj"]),
        ("lora.target_modules", "qkv_proj", "q_proj", "down_proj"),
        "error naming the missing module and the model's linear layers, before any training",
    ),
    BadParams(
        "precision-zero", "a precision target of ±0 % (no sample can meet it)",
        _set("workloads.chat.precision", {"targets": ["tpot:p50 ±0%"]}),
        ("workloads.chat.precision", "±0%", "never be met", "between 1% and 50%"),
        "error: the target can never be met; give a half-width between 1 % and 50 %",
    ),
    BadParams(
        "calibration-blank", "a calibration file that exists but is blank",
        _set("data.calibration", "data/blank.txt"),
        ("calibration file", "data/blank.txt", "empty"),
        "error naming the calibrating variants and the blank file",
        files={"data/blank.txt": "\n   \n"},
    ),
    BadParams(
        "label-traversal", "a load point label that climbs out of its folder",
        _set("workloads.chat.load", [{"kind": "concurrency", "concurrency": 1,
                                      "label": "../../outside"}]),
        ("workloads.chat.load.0", "../../outside", "plain name"),
        "error: a label is a plain name (it names a folder; the plan file there holds headers)",
    ),
    BadParams(
        "slo-negative", "a negative SLO limit", _set("slo", "ttft:p95<=-5ms"),
        ("slo", "negative", ">= 0"), "the SLO text with a caret under -5: limits are >= 0",
    ),
    BadParams(
        "search-start", "a search that would start at concurrency 0.5",
        _set("bench.search", {"kind": "concurrency", "start": 0.5, "max": 8}),
        ("bench.search", "0.5", "whole number"),
        "error: concurrency counts streams, give a whole number >= 1",
    ),
    BadParams(
        "flash-attn-unquoted", "flash_attn: on written unquoted (YAML reads true)", None,
        ("engines.llamacpp.flash_attn", "True", "quote"),
        "the key, the boolean YAML made of it, and 'quote the word'",
        text=lambda t: t.replace("  llamacpp:\n", "  llamacpp:\n    flash_attn: on\n", 1),
    ),
    BadParams(
        "host-public", "servers asked to bind all interfaces", _set("bench.host", "0.0.0.0"),
        ("bench", "0.0.0.0", "not a loopback", "allow_non_loopback"),
        "error: not loopback; opt in with bench.allow_non_loopback",
    ),
    BadParams(
        "extra-args-host", "extra_args that would move a server off its address",
        _set("engines.vllm.extra_args", ["--host", "0.0.0.0"]),
        ("engines.vllm", "--host", "bench.host"), "error: set bench.host instead",
    ),
    BadParams(
        "secret-in-params", "a token written into params.yaml (copied into dvc.lock)",
        _set("engines.vllm.extra_env", {"HF_TOKEN": "hf_not_a_real_token"}),
        ("engines.vllm", "HF_TOKEN", "secret_env", "dvc.lock"),
        "error: pass secrets through the environment, named under secret_env",
    ),
    BadParams(
        "variant-format", "unknown variant format", _set("variants.w4", {"format": "gptx"}),
        ("variants.w4", "gptx", "gptq"), "error naming variants.w4, 'gptx' and the known formats",
    ),
    BadParams(
        "gguf-type", "unknown GGUF type", _set("variants.gguf-q9", {"format": "gguf", "type": "Q9_X"}),
        ("variants.gguf-q9", "Q9_X", "Q8_0"), "error naming the type and the allowed ones",
    ),
    BadParams(
        "group-size", "group size that does not divide the model",
        _set("variants.gptq-w4g128", {"format": "gptq", "group_size": 128}),
        ("group_size", "128", "576", "allowed here"),
        "error naming the group size, the width it does not divide and the sizes that would",
    ),
    BadParams(
        "variant-engine", "incompatible variant-engine pair",
        _set("bench.pairs.gguf-q8_0-vllm", {"variant": "gguf-q8_0", "engine": "vllm"}),
        ("gguf-q8_0", "vllm", "llamacpp"), "error: vllm cannot serve gguf; llamacpp can",
    ),
    BadParams(
        "adapter-missing", "missing adapter folder",
        _merge({"lora": {"train": False, "adapter_path": "/nonexistent/adapter"}}),
        ("lora.adapter_path", "/nonexistent/adapter"), "error naming lora.adapter_path",
    ),
    BadParams(
        "model-missing", "missing model folder",
        _merge({"model": {"source": "local", "path": "/nonexistent/model"}}),
        ("model.path", "/nonexistent/model"), "error naming model.path and the path",
    ),
    BadParams(
        "slo-syntax", "malformed SLO text", _set("slo", "ttft:p95<=500ms; ttfb:p50<200ms"),
        ("slo", "ttfb", "^^^^", "allowed metrics"), "the text with a caret under 'ttfb'",
    ),
    BadParams(
        "slo-unit", "SLO without a unit", _set("slo", "ttft:p95<=500"),
        ("slo", "needs a unit", "ms, s"), "error: ttft needs a unit; allowed ms, s",
    ),
    BadParams(
        "output-over-context", "output longer than the engine's context",
        # the llama.cpp pair at 4 slots of a 64-token context, its own sweep replaced
        _set("bench.pairs.gguf-q4_k_m-llamacpp.settings", {"ctx_size": 64, "parallel": 4, "sweep": {}}),
        ("workloads", "ctx_size 64 / parallel 4", "16 tokens"),
        "error: requests ask for more tokens than a llama.cpp slot holds",
    ),
    BadParams(
        "request-over-context", "a context with room for every answer but not the longest "
        "conversation (history and answer)", _set("engines.vllm.max_model_len", 256),
        ("workloads.multi-turn", "at least", "max_model_len", "256", "length_scale"),
        "error naming the workload, the longest request, the setting and the fixes",
    ),
    BadParams(
        "rate-zero", "zero arrival rate",
        _set("workloads.chat.load", [{"kind": "rate", "rate": 0}]),
        ("workloads.chat.load.0", "rate", "got 0", "greater than 0"),
        "error naming the rate and 0",
    ),
    BadParams(
        "concurrency-zero", "zero concurrency",
        _set("workloads.chat.load", [{"kind": "concurrency", "concurrency": 0}]),
        ("workloads.chat.load.0", "concurrency", "got 0", "greater than 0"),
        "error naming it and 0",
    ),
    BadParams(
        "engine-key", "unknown engine setting", _set("engines.vllm.max_num_seqz", 8),
        ("engines.vllm.max_num_seqz", "unknown key", "max_num_seqs"),
        "error: unknown key, listing the allowed ones",
    ),
    BadParams(
        "sweep-key", "unknown setting in an engine sweep",
        _set("engines.llamacpp.sweep", {"paralel": [1, 2]}),
        ("engines.llamacpp", "paralel", "sweepable", "parallel"),
        "error naming the sweep key and the sweepable settings",
    ),
    BadParams(
        "pair-engine", "benchmark pair on an unknown engine",
        _set("bench.pairs.gguf-q8_0-tgi", {"variant": "gguf-q8_0", "engine": "tgi"}),
        ("tgi", "known"), "error naming 'tgi' and the known engines",
    ),
]  # fmt: skip


def project_copy(case: BadParams, root: Path) -> Path:
    """A copy of the project's params and data with the case's edit applied."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "data", root / "data", dirs_exist_ok=True)
    text = (REPO / "params.yaml").read_text(encoding="utf-8")
    if case.edit is not None:
        params = yaml.safe_load(text)
        case.edit(params)
        text = yaml.safe_dump(params, sort_keys=False)
    if case.text is not None:
        text = case.text(text)
    (root / "params.yaml").write_text(text, encoding="utf-8")
    for name, content in case.files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = content if isinstance(content, bytes) else content.encode("utf-8")
        path.write_bytes(data + path.read_bytes() if case.prepend and path.exists() else data)
    return root


def run_validate(root: Path) -> tuple[int, str]:
    """`quantbench validate` in the project copy (in this process: the console script's main)."""
    from quantbench.cli import main

    err, out = io.StringIO(), io.StringIO()
    with contextlib.chdir(root), contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        rc = main(["validate", "--quiet"])
    return rc, err.getvalue() + out.getvalue()


def run_stage(root: Path) -> tuple[int, str]:
    """The pipeline's first stage, as DVC runs it."""
    done = subprocess.run(
        [sys.executable, str(REPO / "stages/validate.py")],
        cwd=root, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return done.returncode, done.stderr + done.stdout


def check_params(case: BadParams) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        root = project_copy(case, ctx.dir / "project")
        results = [("quantbench validate", *run_validate(root))]
        if case.via_stage:
            results.append(("stages/validate.py", *run_stage(root)))
        problems = []
        for command, rc, message in results:
            if rc == 0:
                return Outcome("missing", f"{command}: accepted (exit 0)")
            lacking = [part for part in case.must_say if part not in message]
            if rc != 2 or lacking or "Traceback" in message:
                problems.append(f"{command}: exit {rc}, lacks {lacking}: {message[-300:]}")
        text = " / ".join(line.strip() for line in results[0][2].splitlines()[1:4])
        if problems:
            return Outcome("fail", " | ".join(problems))
        via = " and stages/validate.py" if case.via_stage else ""
        return Outcome("pass", f"exit 2 from quantbench validate{via}: {text}")

    return run


@dataclass(frozen=True)
class BadFlags:
    key: str
    fault: str
    argv: list[str]
    must_say: tuple[str, ...]
    expected: str


CLI_BASE = ["--url", "http://127.0.0.1:9", "--random-input-len", "8", "--random-output-len", "8"]
CLI_CASES = [
    BadFlags(
        "cli-rate",
        "negative rate (quantbench load --rate)",
        [*CLI_BASE, "--rate", "-1", "--num-requests", "4"],
        ("load.0.rate", "greater than 0", "-1.0"),
        "exit 2 before any request: 'invalid workload: load.0.rate...: greater than 0 (got -1.0)'",
    ),
    BadFlags(
        "cli-concurrency",
        "zero concurrency (quantbench load --concurrency)",
        [*CLI_BASE, "--concurrency", "0", "--num-requests", "4"],
        ("load.0.concurrency", "greater than 0", "got 0"),
        "exit 2 before any request, naming load.0.concurrency and 0",
    ),
    BadFlags(
        "cli-slo",
        "malformed SLO (quantbench load --slo)",
        [*CLI_BASE, "--concurrency", "1", "--num-requests", "4", "--slo", "ttfb:p50<200ms"],
        ("invalid SLO", "unknown metric 'ttfb'", "^^^^", "allowed metrics"),
        "exit 2 before any request, the text with a caret under the bad part",
    ),
    BadFlags(
        "cli-unforceable-length",
        "a fixed output length asked of a plain OpenAI server (as `vllm bench serve` is typed)",
        [
            "--url",
            "http://127.0.0.1:9",
            "--random-input-len",
            "16",
            "--random-output-len",
            "64",
            "--concurrency",
            "32",
            "--num-requests",
            "6000",
        ],
        ("fixed output length cannot be asked", "'openai'", "--engine", "--no-fixed-output-length"),
        "exit 2 before any request (it printed 6,000 tracebacks, measured nothing, exited 0)",
    ),
]


def check_flags(case: BadFlags) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        from quantbench.cli.load import main

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main([*case.argv, "--out", str(ctx.dir / "out")])
        message = err.getvalue().strip()
        text = " / ".join(line.strip() for line in message.splitlines())
        lacking = [part for part in case.must_say if part not in message]
        if rc != 2 or lacking or (ctx.dir / "out").exists():
            return Outcome("fail", f"rc {rc}: {text} | lacks {lacking}")
        return Outcome("pass", f"exit 2, nothing sent: {text}")

    return run


SCENARIOS = [
    *(
        Scenario(c.key, "input", c.fault, c.injected, c.expected, check_params(c), c.via_stage)
        for c in PARAMS_CASES
    ),
    *(
        Scenario(
            c.key,
            "input",
            c.fault,
            "quantbench load " + " ".join(c.argv),
            c.expected,
            check_flags(c),
            False,
        )
        for c in CLI_CASES
    ),
]
