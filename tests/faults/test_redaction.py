"""Secrets in server command lines, environments and load-test targets are never shown."""

from __future__ import annotations

import sys

from quantbench.engines.base import LaunchSpec
from quantbench.load.session import Target
from quantbench.secrets import is_secret_name


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


def test_short_secret_flags_and_secret_values_everywhere() -> None:
    """llama.cpp's -hft TOKEN was shown as it is; a value given as a secret is hidden wherever it
    appears, also inside another argument or a log line."""
    s = spec(
        ["llama-server", "-hft", "hf_abcdef123", "--alias", "m", "--note=see hf_abcdef123"],
        {"HF_TOKEN": "hf_abcdef123", "OTHER": "x hf_abcdef123 y"},
    )
    assert s.redacted_argv() == ["llama-server", "-hft", "***", "--alias", "m", "--note=see ***"]
    assert s.redacted_env() == {"HF_TOKEN": "***", "OTHER": "x *** y"}
    log = "main: command line: llama-server -hft hf_abcdef123 --port 8080"
    assert s.redact(log) == "main: command line: llama-server -hft *** --port 8080"


def test_secret_env_values_are_hidden_whatever_their_name() -> None:
    s = LaunchSpec("x", ["srv"], {"MY_CREDS": "s3cr3t-value"}, "127.0.0.1", 1, "/health", None,
                   "m", 1, secret_env=("MY_CREDS",))  # fmt: skip
    assert s.redacted_env() == {"MY_CREDS": "***"}
    assert "s3cr3t-value" not in s.redact("echo s3cr3t-value")


def test_a_failed_servers_log_tail_is_redacted(tmp_path) -> None:
    from quantbench.engines.server import Server, ServerExitedError

    script = "import sys; print('starting with -hft', sys.argv[2]); sys.exit(3)"
    launch = LaunchSpec("x", [sys.executable, "-c", script, "-hft", "hf_leaky_token"], {},
                        "127.0.0.1", 9, "/health", None, "m", 10)  # fmt: skip
    server = Server(launch, tmp_path / "server.log")
    try:
        with server:
            pass
    except ServerExitedError as exc:
        message = str(exc)
    else:
        raise AssertionError("the server should have exited")
    assert "hf_leaky_token" in (tmp_path / "server.log").read_text()  # the raw log keeps it
    assert "hf_leaky_token" not in message and "-hft ***" in message


def test_secrets_in_params_are_refused_with_the_way_to_pass_them() -> None:
    import pytest

    from quantbench.engines.vllm import VllmSettings

    with pytest.raises(ValueError, match=r"HF_TOKEN holds a secret.*secret_env: \[HF_TOKEN\]"):
        VllmSettings(extra_env={"HF_TOKEN": "hf_abc"})
    with pytest.raises(ValueError, match="--api-key takes a secret.*VLLM_API_KEY"):
        VllmSettings(extra_args=["--api-key", "abc"])
    assert VllmSettings(secret_env=["HF_TOKEN"]).secret_env == ["HF_TOKEN"]
