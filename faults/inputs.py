"""Bad input: each must be a clear error before any work starts, naming the key, the value and
the fix. Params cases go through the public loader (`quantbench.config.parse_config`, what
`dvc repro`'s stages and `quantbench validate` use); CLI cases through `quantbench bench`.

A case whose params are accepted is reported as `missing` (no validation at load time yet), with
the check that exists later, if any, quoted, so the gap is visible rather than hidden.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faults.scenario import Context, Outcome, Scenario

RANDOM = {"source": "random", "input_len": 8, "output_len": 8}


@dataclass(frozen=True)
class BadParams:
    key: str
    fault: str
    params: dict[str, Any]
    must_say: tuple[str, ...]
    """Parts the message must hold: the key, the value, the fix."""
    expected: str
    later: Callable[[], str] | None = None
    """A check that exists outside params loading (stage time, library): returns its message."""


def _error_of(call: Callable[[], Any]) -> str:
    from quantbench.errors import UserError

    try:
        call()
    except (UserError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return "(accepted)"


def _variant_spec(data: dict[str, Any]) -> Callable[[], str]:
    def later() -> str:
        from pydantic import TypeAdapter
        from quantbench.quantize.spec import VariantSpec

        msg = _error_of(lambda: TypeAdapter(VariantSpec).validate_python(data))
        return f"quantize/spec.py alone says: {' '.join(msg.split())}"

    return later


def _group_size_vs_model() -> str:
    from types import SimpleNamespace

    from quantbench.quantize.spec import GptqSpec, validate_against_model

    arch = SimpleNamespace(hidden_size=576, intermediate_size=1536)  # SmolLM2-135M
    spec = GptqSpec(format="gptq", group_size=128)
    msg = _error_of(lambda: validate_against_model("gptq-w4g128", spec, arch))
    return f"the quantize stage checks before quantizing: {msg}"


def _pair_check() -> str:
    from quantbench.engines.registry import check_pair

    return f"engines/registry.check_pair (used by `quantbench serve`): {_error_of(lambda: check_pair('gguf-q8_0', 'gguf', 'vllm'))}"


def _model_folder() -> str:
    from quantbench.model import check_local_folder

    msg = _error_of(lambda: check_local_folder(Path("/nonexistent/model")))
    return f"the prepare stage checks at its start: {msg}"


def _adapter() -> str:
    return (
        "the finetune stage checks at its start, after prepare has run (lora/adopt.py): "
        "'lora.adapter_path: /nonexistent/adapter is not a folder; give a peft adapter folder "
        "(adapter_config.json + adapter_model.safetensors) or set lora.train: true'"
    )


PARAMS_CASES = [
    BadParams(
        "variant-format",
        "unknown variant format",
        {"variants": {"w4": {"format": "gptx"}}},
        ("variants.w4", "gptx", "gptq"),
        "params error naming variants.w4.format, 'gptx' and the allowed formats",
        _variant_spec({"format": "gptx"}),
    ),
    BadParams(
        "gguf-type",
        "unknown GGUF type",
        {"variants": {"gguf-q9": {"format": "gguf", "type": "Q9_X"}}},
        ("variants.gguf-q9", "Q9_X", "Q8_0"),
        "params error naming variants.gguf-q9.type, 'Q9_X' and the allowed types",
        _variant_spec({"format": "gguf", "type": "Q9_X"}),
    ),
    BadParams(
        "group-size",
        "group size that does not divide the model",
        {"variants": {"gptq-w4g128": {"format": "gptq", "group_size": 128}}},
        ("group_size", "128", "576"),
        "error naming variants.gptq-w4g128.group_size, 128, the width it does not divide and the "
        "sizes that would",
        _group_size_vs_model,
    ),
    BadParams(
        "variant-engine",
        "incompatible variant-engine pair",
        {
            "variants": {"gguf-q8_0": {"format": "gguf", "type": "Q8_0"}},
            "engines": {"vllm": {"enabled": True}},
            "bench": {"pairs": {"gguf-q8_0-vllm": {"variant": "gguf-q8_0", "engine": "vllm"}}},
        },
        ("gguf-q8_0", "vllm", "llamacpp"),
        "params error: engine 'vllm' cannot serve 'gguf-q8_0' (gguf); engines that do: llamacpp",
        _pair_check,
    ),
    BadParams(
        "adapter-missing",
        "missing adapter folder",
        {"lora": {"train": False, "adapter_path": "/nonexistent/adapter"}},
        ("lora.adapter_path", "/nonexistent/adapter"),
        "params error naming lora.adapter_path and the path",
        _adapter,
    ),
    BadParams(
        "model-missing",
        "missing model folder",
        {"model": {"source": "local", "path": "/nonexistent/model"}},
        ("model.path", "/nonexistent/model"),
        "params error naming model.path and the path",
        _model_folder,
    ),
    BadParams(
        "slo-syntax",
        "malformed SLO text",
        {"slo": "ttft:p95<=500ms; ttfb:p50<200ms"},
        ("slo", "ttfb", "^^^^", "allowed metrics"),
        "params error quoting the text with a caret under 'ttfb' and the allowed metrics",
    ),
    BadParams(
        "slo-unit",
        "SLO without a unit",
        {"slo": "ttft:p95<=500"},
        ("slo", "ttft:p95<=500", "needs a unit", "ms, s"),
        "params error: ttft needs a unit; allowed ms, s",
    ),
    BadParams(
        "output-over-context",
        "impossible workload: output longer than the context",
        {
            "engines": {"llamacpp": {"ctx_size": 4096, "parallel": 4}},
            "variants": {"gguf-q8_0": {"format": "gguf", "type": "Q8_0"}},
            "bench": {
                "pairs": {"gguf-q8_0-llamacpp": {"variant": "gguf-q8_0", "engine": "llamacpp"}}
            },
            "workload": {
                "prompts": {"source": "random", "input_len": 512, "output_len": 2048},
                "load": [{"kind": "concurrency", "concurrency": 1}],
                "num_requests": 4,
            },
        },
        ("output_len", "2048", "ctx_size"),
        "params error: 512 + 2048 tokens exceed llamacpp's 1024-token slot (ctx_size/parallel)",
    ),
    BadParams(
        "rate-zero",
        "zero arrival rate",
        {"workload": {"prompts": RANDOM, "load": [{"kind": "rate", "rate": 0}], "num_requests": 4}},
        ("workload.load.0", "rate", "got 0", "greater than 0"),
        "params error naming workload.load.0 rate, 0, 'greater than 0'",
    ),
    BadParams(
        "rate-negative",
        "negative arrival rate",
        {
            "workload": {
                "prompts": RANDOM,
                "load": [{"kind": "rate", "rate": -2}],
                "num_requests": 4,
            }
        },
        ("workload.load.0", "rate", "got -2", "greater than 0"),
        "params error naming workload.load.0 rate, -2, 'greater than 0'",
    ),
    BadParams(
        "concurrency-zero",
        "zero concurrency",
        {
            "workload": {
                "prompts": RANDOM,
                "load": [{"kind": "concurrency", "concurrency": 0}],
                "num_requests": 4,
            }
        },
        ("workload.load.0", "concurrency", "got 0", "greater than 0"),
        "params error naming workload.load.0 concurrency, 0, 'greater than 0'",
    ),
    BadParams(
        "engine-key",
        "unknown engine setting (params)",
        {"engines": {"vllm": {"max_num_seqz": 8}}},
        ("engines.vllm.max_num_seqz", "unknown key", "max_num_seqs"),
        "params error: unknown key, listing the allowed ones (max_num_seqs among them)",
    ),
    BadParams(
        "sweep-key",
        "unknown setting in an engine sweep",
        {"engines": {"llamacpp": {"sweep": {"paralel": [1, 2]}}}},
        ("engines.llamacpp", "paralel", "sweepable", "parallel"),
        "params error naming the sweep key and the sweepable settings",
    ),
    BadParams(
        "pair-engine",
        "benchmark pair on an unknown engine",
        {"bench": {"pairs": {"q8-tgi": {"variant": "q8", "engine": "tgi"}}}},
        ("bench.pairs.q8-tgi", "tgi", "transformers, vllm, llamacpp"),
        "params error naming the pair, 'tgi' and the known engines",
    ),
]


def check_params(case: BadParams) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        from quantbench import preflight
        from quantbench.config import ConfigError, parse_config
        from quantbench.errors import UserError

        try:
            # what `make repro` runs before any stage: the file, then what it points to
            preflight.check(parse_config(case.params))
        except (ConfigError, UserError) as exc:
            message = str(exc)
        else:
            message = ""
        if not message:
            later = case.later() if case.later is not None else "no check anywhere"
            return Outcome("missing", f"params load: accepted. {later}")
        lacking = [part for part in case.must_say if part not in message]
        text = " / ".join(line.strip() for line in message.splitlines()[1:])
        if lacking:
            return Outcome("fail", f"{text} | the message lacks {lacking}")
        return Outcome("pass", text)

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
        "negative rate (quantbench bench --rate)",
        [*CLI_BASE, "--rate", "-1", "--num-requests", "4"],
        ("load.0.rate", "greater than 0", "-1.0"),
        "exit 2 before any request: 'invalid workload: load.0.rate...: greater than 0 (got -1.0)'",
    ),
    BadFlags(
        "cli-concurrency",
        "zero concurrency (quantbench bench --concurrency)",
        [*CLI_BASE, "--concurrency", "0", "--num-requests", "4"],
        ("load.0.concurrency", "greater than 0", "got 0"),
        "exit 2 before any request, naming load.0.concurrency and 0",
    ),
    BadFlags(
        "cli-slo",
        "malformed SLO (quantbench bench --slo)",
        [*CLI_BASE, "--concurrency", "1", "--num-requests", "4", "--slo", "ttfb:p50<200ms"],
        ("invalid SLO", "unknown metric 'ttfb'", "^^^^", "allowed metrics"),
        "exit 2 before any request, the text with a caret under the bad part",
    ),
]


def check_flags(case: BadFlags) -> Callable[[Context], Outcome]:
    def run(ctx: Context) -> Outcome:
        from quantbench.load.cli import main

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
        Scenario(c.key, "input", c.fault, f"params: {c.params}", c.expected, check_params(c), False)
        for c in PARAMS_CASES
    ),
    *(
        Scenario(
            c.key,
            "input",
            c.fault,
            "quantbench bench " + " ".join(c.argv),
            c.expected,
            check_flags(c),
            False,
        )
        for c in CLI_CASES
    ),
]
