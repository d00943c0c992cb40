"""A small but realistic stage-output tree for the report, built with the project's own code.

Every file is a schema model (:mod:`quantbench.schemas`) written by ``schemas.io.write``, so the
tree has exactly the shape the stages write, and a field renamed in a schema changes it too.
Request records are synthetic (a seeded latency model per pair, server setting, workload and
load, every phase: warm-up, measured, cool-down), but everything above them is computed the way
the pipeline computes it: each repeat's point result by the load harness's ``summarize``, rows by
the bench stage's ``fold_repeats`` and ``checks``, each workload's best by ``pick_best``,
estimates by the estimate stage's ``write_estimates``; quality reports, variants and provenance
come from ``tests/schemas/examples.py``.

Two workloads, so the report has decisions to compare:

* ``chat`` (short prompts): the llama.cpp pair leads on good tokens/s, but the bf16 pair (two
  repeats, so a wide interval) cannot be separated from it on the rows alone; the decide stage's
  rounds in alternation (``reports/decide/confirm.json``) show the two equivalent, and the tie
  goes to quality, which bf16 wins (the report says what it traded). llama.cpp's ``parallel=4`` setting is the fastest of all but its server fails the served
  check (it serves something else than was evaluated): flagged, never the winner. Other flagged
  rows: a closed-loop point that did not keep its streams busy, an open-loop point whose load
  generator was CPU-bound, a point whose error rate is undecided (one failure in 40).
* ``multi-turn`` (long shared history): llama.cpp's prefix cache serves most of each prompt, so it
  wins clearly; bf16 misses the TTFT limit, and its ``continuous_batching=off`` setting also
  delivers shorter answers than asked.

Every percentile above p90 has too few requests for an interval. A vLLM pair's server never
starts (its log tail holds markup, as do a model answer and a request error, to check escaping).

Run ``python -m tests.report.conftest DIR`` (from the repository root) to build one by hand.
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.schemas import examples

from quantbench.decision.compare import pooled
from quantbench.decision.confirm import pooled_model, round_contrast
from quantbench.decision.rows import checks, failed_row, fold_repeats, pick_best, rank_metric
from quantbench.load.metrics import summarize
from quantbench.load.records import RequestRecord, write_records
from quantbench.precision import Figure
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import (
    HELDOUT_TASK,
    BenchRow,
    PairSummary,
    ServedCheck,
    ServedTask,
    ServerPoint,
    ServerReport,
    TaskAgreement,
    TaskScore,
)
from quantbench.schemas.decide import ConfirmFile, Duel, Measured, Round
from quantbench.schemas.session import PointResult, SessionSummary
from quantbench.schemas.workloads import Spread, WorkloadSummary
from quantbench.slo import parse_slo, per_request

PERCENTILES = [50.0, 90.0, 95.0, 99.0]
CONFIDENCE = 0.95
PRICE = 0.5
T0 = 5000.0  # monotonic seconds of the first send
WALL = 1_700_000_000.0 - T0  # monotonic -> epoch seconds
HOSTILE = "<script>alert('x')</script>"
OVERLOADED = "HTTP 500: <b>engine overloaded</b>"


@dataclass(frozen=True)
class Workload:
    slo: str
    prompt: int  # prompt tokens of a first turn
    output: int  # output tokens asked for (fixed output length)
    turns: int
    think_s: float
    conversations: int  # measured conversations per point
    possible_cache: float  # prompt share a prefix cache could serve (the workloads stage says)


WORKLOADS = {
    "chat": Workload("ttft:p90<=500ms; tpot:p50<=60ms; error_rate<=0.1", 40, 32, 1, 0.0, 40, 0.0),
    "multi-turn": Workload(
        "ttft:p90<=600ms; e2e:p90<=3s; error_rate<=0.1", 200, 32, 3, 0.3, 14, 0.62
    ),
}
FIXTURE_SLO = WORKLOADS["chat"].slo  # params `slo:` (workloads name their own)
FIXTURE_WORKLOADS = {name: w.slo for name, w in WORKLOADS.items()}
FIXTURE_PROFILES = {"batch": "output_tps>=40", "strict": "ttft:p99<=20ms"}


@dataclass(frozen=True)
class Server:
    """A server setting's latency model: TTFT = (base + prefill x uncached prompt tokens) x
    slowdown, ITL likewise; slowdown = 1 + slow x (streams - 1)."""

    label: str
    settings: dict[str, Any]
    base_ms: float
    prefill_ms: float
    itl_ms: float
    slow: float
    caches: bool  # reports (and uses) a prefix cache
    rss: int | None
    served: str = "match"


@dataclass(frozen=True)
class Quirk:
    """What goes wrong at one point: a failed request, idle streams, short answers, a busy
    client."""

    fail: int | None = None  # this measured request of repeat 0 fails
    idle_s: float = 0.0  # each stream idles this long after each conversation
    short: int | None = None  # every measured answer has this many tokens
    client_bound: bool = False


C1 = {"kind": "concurrency", "concurrency": 1}
C4 = {"kind": "concurrency", "concurrency": 4}
R2 = {"kind": "rate", "rate": 2.0, "burstiness": 1.0, "max_concurrency": None}

ENV = {"OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
ARGV = {
    "transformers": "transformers serve --host 127.0.0.1 --port 41001 --device cpu",
    "llamacpp": "build/llama.cpp/cmake/bin/llama-server -m "
    "models/variants/gguf-q4_k_m/model-Q4_K_M.gguf --port 41002 -t 1 --jinja --metrics",
    "vllm": "python -m vllm.entrypoints.openai.api_server --model models/variants/gptq-w4g64 "
    "--port 41003 --enforce-eager",
}

# pair -> variant, engine, server settings, load points per workload, repeats, quirks per
# (server point, workload, load point), or a start-up failure.
PAIRS: dict[str, dict[str, Any]] = {
    "bf16-transformers": {
        "variant": "bf16", "format": "bf16", "engine": "transformers", "version": "5.17.0",
        "servers": [
            Server("continuous_batching=off", {"continuous_batching": False}, 60.0, 1.5, 30.0,
                   0.55, False, 1_150_000_000),
            Server("continuous_batching=on", {"continuous_batching": True}, 60.0, 1.5, 27.0,
                   0.12, False, 1_420_000_000),
        ],
        "load": {"chat": [C1, C4], "multi-turn": [C4]},
        "repeats": 2,
        "quirks": {
            ("continuous_batching=on", "chat", "c1"): Quirk(fail=9),
            ("continuous_batching=off", "multi-turn", "c4"): Quirk(short=24),
        },
    },
    "gguf-q4_k_m-llamacpp": {
        "variant": "gguf-q4_k_m", "format": "gguf", "engine": "llamacpp",
        "version": "version: 6500 (1d2f3e4a)",
        "servers": [
            Server("default", {}, 20.0, 0.3, 11.0, 0.75, True, 310_000_000),
            Server("parallel=4", {"parallel": 4}, 15.0, 0.3, 9.0, 0.10, True, 330_000_000,
                   served="mismatch"),
        ],
        "load": {"chat": [C1, C4, R2], "multi-turn": [C4]},
        "repeats": 1,
        "quirks": {
            ("default", "chat", "c1"): Quirk(idle_s=0.25),
            ("default", "chat", "r2"): Quirk(client_bound=True),
        },
    },
    "gptq-w4g64-vllm": {
        "variant": "gptq-w4g64", "format": "gptq", "engine": "vllm", "version": "0.32.0",
        "servers": [Server("default", {}, 0.0, 0.0, 0.0, 0.0, False, None)],
        "load": {"chat": [C1, C4], "multi-turn": [C4]},
        "repeats": 1,
        "quirks": {},
        "fails": f"server exited with code 1 before it was ready; last lines of its log:\n"
        f"ValueError: group size mismatch {HOSTILE}",
    },
}  # fmt: skip

# variant -> (perplexity, mean KL, top-1 agreement, held-out correct of 13, size, bits/weight)
QUALITY: dict[str, tuple[float, float, float, int, int, float]] = {
    "bf16": (16.000, 0.0, 1.0, 13, 272_585_647, 16.0),
    "gguf-q4_k_m": (16.894, 0.061, 0.912, 12, 105_000_000, 6.17),
    "gptq-w4g64": (19.24, 0.182, 0.853, 9, 118_000_000, 6.9),
}


def label_of(shape: dict[str, Any]) -> str:
    if shape["kind"] == "concurrency":
        return f"c{shape['concurrency']}"
    return f"r{shape['rate']:g}"


# ---------------------------------------------------------------------------------------------
# request records from the latency model


class _Gen:
    """Builds one run's records: every conversation's turns, in every phase."""

    def __init__(self, rng: random.Random, point: str, repeat: int, wl: Workload, server: Server,
                 quirk: Quirk, streams: float) -> None:  # fmt: skip
        self.rng, self.point, self.repeat, self.wl = rng, point, repeat, wl
        self.server, self.quirk = server, quirk
        # the server's state differs a little from run to run (what repeats measure)
        self.factor = (1.0 + server.slow * (streams - 1.0)) * rng.lognormvariate(0, 0.04)
        self.records: list[RequestRecord] = []
        self.measured = 0

    def conversation(self, i: int, phase: str, start: float, scheduled: float | None) -> float:
        """Sends conversation ``i`` at ``start``; returns when its last turn ended."""
        t = start
        wl, s, rng = self.wl, self.server, self.rng
        for turn in range(wl.turns):
            prompt = wl.prompt + turn * (wl.output + 30)
            # a later turn resends the history: all but its new 30-token question is cached
            cached = (prompt - 30 if turn else 0) if s.caches else None
            ttft = (s.base_ms + s.prefill_ms * (prompt - (cached or 0))) * self.factor
            ttft *= rng.lognormvariate(0, 0.2) / 1000
            fails = phase == "measured" and self.quirk.fail == self.measured and self.repeat == 0
            want = wl.output
            n = self.quirk.short if (self.quirk.short and phase == "measured") else want
            first = t + ttft
            chunks, c = [first], first
            for _ in range(n - 1):
                c += s.itl_ms * self.factor * rng.lognormvariate(0, 0.12) / 1000
                chunks.append(c)
            rec = RequestRecord(
                request_id=f"{self.point}-r{self.repeat}-{i}-{turn}", index=len(self.records),
                point=self.point, scenario="fixture", prompt_id=f"p{i % 7}", phase=phase,
                worker=i % 4, send_time=t,
                scheduled_time=scheduled if turn == 0 else None, requested_tokens=want,
                conversation=f"{self.point}-{i}", turn=turn,
                first_token_time=None if fails else first,
                end_time=t + 0.2 if fails else c, chunk_times=[] if fails else chunks,
                chunk_tokens=[] if fails else [1] * n, prompt_tokens=prompt,
                cached_tokens=None if fails else cached, output_tokens=None if fails else n,
                tokens_source="usage", status="failed" if fails else "completed",
                http_status=500 if fails else 200, error=OVERLOADED if fails else None,
                finish_reason=None if fails else ("stop" if n < want else "length"),
            )  # fmt: skip
            self.records.append(rec)
            if phase == "measured":
                self.measured += 1
            t = (rec.end_time or t) + (wl.think_s if turn < wl.turns - 1 else 0.0)
        return t

    def measured_end(self) -> float:
        return max(r.end_time or 0.0 for r in self.records if r.phase == "measured")


def _phase(i: int, warm: int, n: int) -> str:
    return "warmup" if i < warm else "measured" if i < warm + n else "cooldown"


def closed_loop(gen: _Gen, streams: int) -> list[RequestRecord]:
    """``streams`` streams, each starting its next conversation when the last one ended; warm-up
    first, cool-down until every measured request has finished."""
    clock = [T0 + 0.013 * w for w in range(streams)]
    n, i, end = gen.wl.conversations, 0, None
    while True:
        w = min(range(streams), key=lambda k: clock[k])
        phase = _phase(i, streams, n)
        if phase == "cooldown":
            end = end if end is not None else gen.measured_end()
            if clock[w] >= end:
                break
        clock[w] = gen.conversation(i, phase, clock[w], None) + gen.quirk.idle_s + 0.002
        i += 1
    return gen.records


def open_loop(gen: _Gen, rate: float) -> list[RequestRecord]:
    """Poisson arrivals at ``rate``, each sent a few ms after it was due."""
    n, i, due, end = gen.wl.conversations, 0, T0, None
    while True:
        phase = _phase(i, 2, n)
        if phase == "cooldown":
            end = end if end is not None else gen.measured_end()
            if due >= end:
                break
        gen.conversation(i, phase, due + gen.rng.uniform(0.001, 0.004), due)
        due += gen.rng.expovariate(rate)
        i += 1
    return gen.records


def run_records(rng: random.Random, shape: dict[str, Any], repeat: int, wl: Workload,
                server: Server, quirk: Quirk) -> list[RequestRecord]:  # fmt: skip
    point = label_of(shape)
    if shape["kind"] == "concurrency":
        gen = _Gen(rng, point, repeat, wl, server, quirk, shape["concurrency"])
        return closed_loop(gen, shape["concurrency"])
    gen = _Gen(rng, point, repeat, wl, server, quirk, 1.5)
    return open_loop(gen, shape["rate"])


def load_meta(quirk: Quirk) -> dict[str, Any]:
    """What the load process writes beside its records: its own lag and CPU."""
    if quirk.client_bound:
        return {"stop_reason": "count", "loop_lag": {"p99_ms": 14.0}, "client_cpu_s": 0.93,
                "client_wall_s": 1.0}  # fmt: skip
    return {"stop_reason": "count", "loop_lag": {"p99_ms": 0.8}, "client_cpu_s": 0.2,
            "client_wall_s": 1.0}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# the bench stage's outputs


def _served(verdict: str) -> ServedCheck:
    if verdict == "mismatch":
        return ServedCheck(verdict="mismatch", decided=5, mismatched=3, prompts=6)
    return ServedCheck(verdict="match", decided=5, mismatched=0, prompts=6)


def mismatch_text(check: ServedCheck) -> str | None:
    """What bench.run flags for a server whose answers differ."""
    if check.verdict != "mismatch":
        return None
    return f"{check.mismatched} of {check.decided} certain answers differ"


def _point_row(out: Path, name: str, spec: dict[str, Any], server: Server, workload: str,
               shape: dict[str, Any], rng: random.Random) -> dict[str, Any]:  # fmt: skip
    """One load point's row, as bench.run measures it (records, session summaries, folding)."""
    point = label_of(shape)
    wl = WORKLOADS[workload]
    if spec.get("fails"):
        row = failed_row(spec["fails"], workload)
        return checks({**row, "load_point": point, "shape": shape})
    quirk = spec["quirks"].get((server.label, workload, point), Quirk())
    results: list[PointResult] = []
    constraints = parse_slo(wl.slo)
    for k in range(spec["repeats"]):
        records = run_records(rng, shape, k, wl, server, quirk)
        run_dir = out / server.label / workload / point / f"r{k}"
        write_records(run_dir / "records.jsonl", records)
        result = summarize(
            records, point=point, scenario=workload, shape=shape, percentiles=PERCENTILES,
            constraints=constraints, confidence=CONFIDENCE, fixed_output_length=True,
            meta=load_meta(quirk), wall_offset=WALL,
        )  # fmt: skip
        session = SessionSummary(
            url="http://127.0.0.1:41001", engine=spec["engine"], model=spec["variant"],
            workload={"name": workload, "percentiles": PERCENTILES, "fixed_output_length": True},
            slo=wl.slo, created_at=1_700_000_100.0, points=[result],
            workload_summary=WorkloadSummary(
                name=workload, prefix_reuse_share=wl.possible_cache,
                conversations=wl.conversations, requests=wl.conversations * wl.turns,
                counted_with="tokenizer", turns=None, think_s=None,
                input_tokens=_flat(float(wl.prompt), wl.conversations * wl.turns),
                output_tokens=_flat(float(wl.output), wl.conversations * wl.turns),
                context=2048, turns_dropped_to_fit=2 if wl.turns > 1 else 0,
            ),
        )  # fmt: skip
        schema_io.write(run_dir / "summary.json", session)
        results.append(result)
    row = fold_repeats(
        results, workload=workload, confidence=CONFIDENCE, price_per_hour=PRICE,
        possible_cache_share=wl.possible_cache,
    )  # fmt: skip
    row.update(load_point=point, shape=shape, error=None)
    return row


def _flat(value: float, count: int) -> Spread:
    """A length every request of the workload has."""
    return Spread(count=count, mean=value, p50=value, p90=value, max=value)


def _pair(root: Path, name: str, spec: dict[str, Any], rng: random.Random) -> PairSummary:
    out = root / "reports" / "bench" / name
    rows: list[dict[str, Any]] = []
    servers: list[ServerPoint] = []
    error = spec.get("fails")
    for server in spec["servers"]:
        argv = ARGV[spec["engine"]].split()
        if server.settings.get("continuous_batching"):
            argv.append("--continuous-batching")
        if "parallel" in server.settings:
            argv += ["-np", str(server.settings["parallel"])]
        common = {"server_point": server.label, "settings": server.settings, "command": argv,
                  "env": ENV}  # fmt: skip
        check = _served(server.served) if not error else ServedCheck(
            verdict="not checked", note="the server did not start"
        )  # fmt: skip
        for workload, shapes in spec["load"].items():
            for shape in shapes:
                row = _point_row(out, name, spec, server, workload, shape, rng)
                rows.append(checks({**common, **row}, served_mismatch=mismatch_text(check)))
        if error:
            (out / server.label).mkdir(parents=True, exist_ok=True)
            (out / server.label / "server.log").write_text(error + "\n", encoding="utf-8")
        report = ServerReport(
            engine=spec["engine"], argv=argv, env=ENV, url="http://127.0.0.1:41001",
            ready_seconds=None if error else 4.2, peak_rss_bytes=server.rss, peak_gpu_bytes=None,
            memory_samples=0 if error else 40, exit="exit code 1" if error else None,
            log=f"{out.as_posix()}/{server.label}/server.log",
        )  # fmt: skip
        servers.append(
            ServerPoint(
                **common,
                report=report,
                error=error,
                search={},
                served_check=check,
                is_default=not server.settings,
            )
        )
    peak = {s.server_point: s.report.peak_rss_bytes for s in servers}
    best: dict[str, BenchRow | None] = {}
    ties: dict[str, list[str]] = {}
    decided: dict[str, str] = {}
    any_goodput = False
    for workload in spec["load"]:
        goodput = bool(per_request(parse_slo(WORKLOADS[workload].slo)))
        any_goodput = any_goodput or goodput
        mine = [r for r in rows if r["workload"] == workload]
        winner, tied, rule = pick_best(mine, goodput, lambda r: peak.get(r["server_point"]))
        best[workload] = BenchRow.model_validate(winner) if winner else None
        ties[workload] = [BenchRow.model_validate(t).key for t in tied]
        decided[workload] = rule
    summary = PairSummary(
        pair=name, variant=spec["variant"], format=spec["format"], engine=spec["engine"],
        engine_version=spec["version"], mode="grid", slo=FIXTURE_SLO,
        ranked_by=rank_metric(any_goodput), workloads=list(spec["load"]),
        slos={w: WORKLOADS[w].slo for w in spec["load"]}, price_per_hour=PRICE, currency="USD",
        server_points=len(spec["servers"]), rows=[BenchRow.model_validate(r) for r in rows],
        servers=servers, best=best, ties=ties, decided_by=decided, wall_seconds=61.5,
        task=_served_task(servers[0].server_point),
    )  # fmt: skip
    schema_io.write(out / "summary.json", summary)
    return summary


def _served_task(server_point: str) -> ServedTask:
    """9 of 13 right served, the same 9 offline plus one (exact McNemar p = 1)."""
    score = TaskScore(task=HELDOUT_TASK, metric="acc", correct=9, total=13, accuracy=9 / 13,
                      interval=(0.42, 0.87), answers=[])  # fmt: skip
    agreement = TaskAgreement(
        served_only=0, offline_only=1, both=9, neither=3, p_value=1.0, differs=False,
        difference=Figure(value=-1 / 13, low=-0.33, high=0.18, confidence=0.95, n=13,
                          method="Newcombe paired square-and-add (Wilson)"),
    )  # fmt: skip
    return ServedTask(verdict="agrees", server_point=server_point, scores=[score],
                      agreement=agreement, harness="0.4.13", seconds=12.0,
                      note="9 of 13 right served, 10 offline")  # fmt: skip


def _quality(root: Path, name: str) -> None:
    ppl, kl, top1, correct, size, bpw = QUALITY[name]
    wrong = "<img src=x onerror=alert(1)> no idea"
    report = examples.quality_report(name, ppl, kl, top1, correct, size, bpw, wrong)
    schema_io.write(root / "reports" / "quality" / f"{name}.json", report)
    record = examples.variant_record(name, size, bpw)
    schema_io.write(root / "models" / "variants" / name / "variant.json", record)


def _provenance(root: Path) -> None:
    for output in (
        examples.base_model_info(),
        examples.merged_model_info(),
        examples.merge_report(),
        examples.finetune_report(),
        examples.env_info(),
    ):
        schema_io.write(root / output.OUTPUT, output)
    examples.estimates_file(root)  # also writes models/merged/config.json


CHAT_CONTENDER = "bf16-transformers/continuous_batching=on/chat/c4"
CHAT_LEADER = "gguf-q4_k_m-llamacpp/default/chat/c4"


def confirm_file(summaries: dict[str, PairSummary]) -> ConfirmFile:
    """The decide stage's rounds: bf16 (continuous batching) against llama.cpp on chat at 4
    streams, twice each in alternation, equivalent within ±5 %."""
    metric = "good_output_throughput"

    def value(key: str) -> float:
        pair, rest = key.split("/", 1)
        row = next(r for r in summaries[pair].rows if r.key == rest)
        return float(row.metric(metric) or 0.0)

    def measured(key: str, factor: float, index: int) -> Measured:
        v = value(key) * factor
        fig = Figure(value=v, low=v * 0.985, high=v * 1.015, confidence=CONFIDENCE, n=10,
                     method="batch means over 10 slices")  # fmt: skip
        return Measured(key=key, figure=fig, slo_verdict="pass", rankable=True, wall_s=20.0,
                        records=f"rounds/{key.replace('/', '__')}/round{index}/records.jsonl")  # fmt: skip

    base = value(CHAT_LEADER) / value(CHAT_CONTENDER)  # the rounds measure them about equal
    rounds = [
        Round(index=i, order="ab" if i % 2 else "ba",
              a=measured(CHAT_CONTENDER, base * f, i), b=measured(CHAT_LEADER, 1.0, i))
        for i, f in ((1, 0.99), (2, 0.995))
    ]  # fmt: skip
    contrasts = [round_contrast(r.a, r.b) for r in rounds]
    both = pooled([c for c in contrasts if c is not None])
    assert both is not None
    duel = Duel(
        workload="chat", purpose="contender", a=CHAT_CONTENDER, b=CHAT_LEADER, metric=metric,
        screened="not yet separable", rounds=rounds, contrast=pooled_model(both, CONFIDENCE),
        verdict=both.verdict(0.05, CONFIDENCE), stopped="equivalent after 2 rounds",
    )  # fmt: skip
    return ConfirmFile(budget_s=300, max_rounds=4, wall_s=95.0, duels=[duel])


def build_fixture_tree(root: Path, confirm: bool = True) -> Path:
    """Write the whole fake tree below root (root plays the repository root); ``confirm``: with
    the decide stage's rounds."""
    rng = random.Random(7)
    _provenance(root)
    summaries = {name: _pair(root, name, spec, rng) for name, spec in PAIRS.items()}
    for name in QUALITY:
        _quality(root, name)
    if confirm:
        schema_io.write(root / ConfirmFile.OUTPUT, confirm_file(summaries))
    return root


if __name__ == "__main__":
    print(build_fixture_tree(Path(sys.argv[1])))
