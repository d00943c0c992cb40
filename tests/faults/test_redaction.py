"""Secrets in server command lines, environments and load-test targets are never shown."""

from __future__ import annotations

from quantbench.engines.base import LaunchSpec, is_secret_name
from quantbench.load.session import Target


def spec(argv: list[str], env: dict[str, str]) -> LaunchSpec:
    return LaunchSpec("x", argv, env, "127.0.0.1", 1, "/health", None, "m", 1)


def test_secret_names() -> None:
    for name in (
        "--api-key",
        "--api_key",
        "--hf-token",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "DB_PASSWORD",
    ):
        assert is_secret_name(name), name
    for name in ("--max-num-batched-tokens", "--cb-max-batch-tokens", "TOKENIZERS_PARALLELISM",
                 "--ssl-keyfile", "VLLM_CPU_KVCACHE_SPACE", "--port"):  # fmt: skip
        assert not is_secret_name(name), name


def test_redacted_argv_and_env() -> None:
    s = spec(
        [
            "serve",
            "--api-key",
            "K1",
            "--hf-token=K2",
            "--max-num-batched-tokens",
            "512",
            "--port",
            "1",
        ],
        {"HF_TOKEN": "K3", "OMP_NUM_THREADS": "1"},
    )
    assert s.redacted_argv() == [
        "serve", "--api-key", "***", "--hf-token=***", "--max-num-batched-tokens", "512", "--port", "1",
    ]  # fmt: skip
    assert s.redacted_env() == {"HF_TOKEN": "***", "OMP_NUM_THREADS": "1"}


def test_bench_target_sends_the_key_and_never_shows_it() -> None:
    target = Target(url="http://127.0.0.1:1", api_key="sk-secret", headers={"X-A": "b"})
    assert target.request_headers() == {"X-A": "b", "Authorization": "Bearer sk-secret"}
    shown = repr(target) + str(target) + target.model_dump_json()
    assert "sk-secret" not in shown
    assert Target(url="http://127.0.0.1:1").request_headers() == {}
