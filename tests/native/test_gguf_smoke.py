"""A broken llama.cpp build shows up in the first minute: a tiny GGUF of every type the default
variants use is loaded and run through the bindings and through llama-server.

On an Intel Xeon guest that advertises AMX, a build that compiled the AMX kernels loaded F16 and
died on Q8_0 and Q4_K_M (SIGILL in llama-server, a protection fault in the bindings). The model
here is random and tiny, but its widths are multiples of 256, so every quantized matrix takes the
type's own kernel (no fallback to another type), which is what faulted there.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from quantbench.native.llama_build import build_info, toolchain

REPO = Path(__file__).resolve().parents[2]


def default_gguf_types() -> list[str]:
    from quantbench.config import load_config

    config = load_config(REPO / "params.yaml")
    return sorted({v.type for v in config.variants.values() if v.format == "gguf"})


TYPES = default_gguf_types()


def probe_summary() -> str:
    info = build_info(toolchain()) or {}
    isa = info.get("isa") or {}
    return (
        f"build {toolchain().build_dir} made for {(info.get('cpu') or {}).get('model')!r}; "
        f"ISA probe kept {isa.get('kept')}, dropped {isa.get('dropped')} "
        f"(cmake flags {info.get('cmake_flags')})"
    )


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory) -> Path:
    """A 2-layer random Llama with the embedded model's (repaired) tokenizer and widths of 256."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from quantbench.model import load_embedded_tokenizer, repair_gguf_tokenizer

    tok = repair_gguf_tokenizer(load_embedded_tokenizer())
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
    )
    out = tmp_path_factory.mktemp("tiny-gguf") / "hf"
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(out)
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tiny_ggufs(tiny_hf: Path) -> dict[str, Path]:
    """One GGUF per default type, made by the project's own converter and quantizer."""
    from quantbench.formats.build import BuildRequest
    from quantbench.formats.gguf import GgufSpec, build_gguf

    files = {}
    for gguf_type in TYPES:
        out = tiny_hf.parent / gguf_type
        out.mkdir()
        spec = GgufSpec(format="gguf", type=gguf_type)
        result = build_gguf(BuildRequest(gguf_type, spec, tiny_hf, out, None, 1))
        files[gguf_type] = out / result.weights_file
    return files


BINDINGS_RUN = """
import sys, numpy as np
from quantbench.native.llama_build import load_binding
llama_cpp = load_binding()
llm = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, n_batch=64, n_ubatch=64, n_threads=1,
                      n_threads_batch=1, logits_all=True, verbose=False)
llm.eval(list(range(1, 33)))
scores = np.asarray(llm.scores[:32])
assert np.isfinite(scores).all(), "non-finite logits"
print("ok", scores.shape)
"""


@pytest.mark.parametrize("gguf_type", TYPES)
def test_bindings_run_every_default_type(tiny_ggufs: dict[str, Path], gguf_type: str) -> None:
    """In a child process, so a protection fault fails this test with a message, not the run."""
    lib = toolchain().bin_dir / "libggml-cpu.so"
    done = subprocess.run(
        [sys.executable, "-c", BINDINGS_RUN, str(tiny_ggufs[gguf_type])],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        how = (
            f"killed by {signal.Signals(-done.returncode).name}"
            if done.returncode < 0
            else f"exit {done.returncode}"
        )
        pytest.fail(
            f"the llama.cpp bindings ({lib}) could not run a {gguf_type} GGUF: {how}\n"
            f"{probe_summary()}\n{done.stderr[-2000:]}"
        )
    assert done.stdout.startswith("ok"), done.stdout


@pytest.mark.parametrize("gguf_type", TYPES)
def test_llama_server_serves_every_default_type(
    tiny_ggufs: dict[str, Path], gguf_type: str, tmp_path: Path
) -> None:
    from quantbench.engines.artifact import load_artifact
    from quantbench.engines.llamacpp import LlamaCppSettings
    from quantbench.engines.registry import get_engine
    from quantbench.engines.server import Server, ServerError
    from quantbench.ports import free_port

    artifact = load_artifact(tiny_ggufs[gguf_type])
    settings = LlamaCppSettings(parallel=1, ctx_size=256, startup_timeout_s=120)
    launch = get_engine("llamacpp").launch(artifact, settings, "127.0.0.1", free_port())
    try:
        with Server(launch, tmp_path / "server.log") as server:
            text = server.chat("Hello there", max_tokens=8, timeout_s=120)
            server.check_alive("after a request")
    except ServerError as exc:
        pytest.fail(
            f"{launch.argv[0]} could not serve a {gguf_type} GGUF: {exc}\n{probe_summary()}"
        )
    assert isinstance(text, str)


def test_the_build_records_what_it_was_made_for() -> None:
    """build-info.json says which CPU, which probe result and which flags made the build."""
    info = build_info(toolchain())
    assert info is not None, "no build-info.json: run `make llamacpp`"
    assert info["cpu"]["isa_flags"], info["cpu"]
    assert set(info["isa"]) >= {"kept", "dropped", "outcomes", "native"}
    for flag in info["isa"]["disable_flags"]:
        assert any(flag in f for f in info["cmake_flags"]), (flag, info["cmake_flags"])
    for name in info.get("excluded", {}):  # left out whatever the probe said (AMX)
        assert any(f"-mno-{name}" in f for f in info["cmake_flags"]), (name, info["cmake_flags"])
    json.dumps(info)
