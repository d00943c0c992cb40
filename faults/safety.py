"""Safety checks: loopback by default, no shell, no remote code unless opted in, secrets kept out
of reports and logs."""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil

from faults.engine import Fault, StandinEngine, StandinSettings
from faults.pairs import run_standin_pair, workload
from faults.scenario import Checks, Context, Outcome, Scenario
from quantbench.engines.artifact import Artifact
from quantbench.engines.server import Server, ServerError
from quantbench.load.records import read_records
from quantbench.mock_server import MockServerProcess, Script

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "quantbench"
LOOPBACK = "127.0.0.1"


def _source_files() -> list[Path]:
    roots = [SRC, REPO / "stages"]
    return [p for root in roots if root.is_dir() for p in sorted(root.rglob("*.py"))]


def _grep(pattern: str) -> list[str]:
    """Lines of the sources matching `pattern` (this file, which spells the patterns, left out)."""
    regex = re.compile(pattern)
    hits = []
    for path in _source_files():
        if path == Path(__file__).resolve():
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if regex.search(line):
                hits.append(f"{path.name}:{n}")
    return hits


def bind_loopback(ctx: Context) -> Outcome:
    from quantbench.bench.spec import BenchSettings
    from quantbench.cli import build_parser
    from quantbench.engines.llamacpp import LlamaCppEngine, LlamaCppSettings
    from quantbench.engines.serve import serve
    from quantbench.engines.transformers import TransformersEngine, TransformersSettings
    from quantbench.engines.vllm import VllmEngine, VllmSettings

    chk = Checks()
    defaults = {
        "bench.host": BenchSettings().host,
        "quantbench serve --host": build_parser()
        .parse_args(["serve", "x", "--engine", "vllm"])
        .host,
        "engines.serve(host=)": inspect.signature(serve).parameters["host"].default,
        "mock server --host": _default("mock_server.py", "--host"),
        # read, not imported: importing the runner imports Locust, which monkey-patches sockets
        "load master --bind-host": _default("load/runner.py", "--bind-host"),
    }
    for where, value in defaults.items():
        chk.that(value == LOOPBACK, f"{where} defaults to {value!r}")
    artifact = Artifact("tiny", "bf16", ctx.dir, None)
    exe = Path(sys.executable)
    engines = [
        (TransformersEngine(), TransformersSettings()),
        (VllmEngine(), VllmSettings(python=exe)),
        (LlamaCppEngine(), LlamaCppSettings(binary=exe)),
    ]
    with contextlib.chdir(ctx.dir):  # the transformers launcher makes a cache folder here
        for engine, settings in engines:
            argv = engine.launch(artifact, settings, LOOPBACK, 8000).argv
            i = argv.index("--host")
            chk.that(argv[i + 1] == LOOPBACK, f"{engine.name} binds {argv[i + 1]}")
            chk.that("--trust-remote-code" not in argv, f"{engine.name} trusts remote code")
    # a live server: which addresses does it listen on?
    engine = StandinEngine(ctx.dir / "engine")
    from quantbench.ports import free_port

    spec = engine.launch(artifact, StandinSettings(), LOOPBACK, free_port(LOOPBACK))
    with ctx.tagged(), Server(spec, ctx.dir / "server.log") as server:
        assert server.process is not None
        tree = [
            psutil.Process(server.process.pid),
            *psutil.Process(server.process.pid).children(True),
        ]
        listening = sorted(
            {
                f"{c.laddr.ip}:{c.laddr.port}"
                for p in tree
                for c in p.net_connections("inet")
                if c.status == psutil.CONN_LISTEN
            }
        )
    chk.that(
        bool(listening) and all(a.startswith(f"{LOOPBACK}:") for a in listening),
        f"live server listens on {listening}",
    )
    return chk.outcome(
        f"defaults: {len(defaults)}/{len(defaults)} are {LOOPBACK}; transformers, vllm, llamacpp "
        f"argv '--host {LOOPBACK}'; live server listens on {', '.join(listening)} only"
    )


def _default(module: str, flag: str) -> str | None:
    """The default an argparse `add_argument(flag, default=...)` in a source file gives."""
    source = (SRC / module).read_text(encoding="utf-8")
    match = re.search(rf'add_argument\(\s*"{re.escape(flag)}",\s*default="([^"]*)"', source)
    return match.group(1) if match else None


def no_shell(ctx: Context) -> Outcome:
    chk = Checks()
    hits = _grep(r"shell\s*=\s*True|os\.system\(|os\.popen\(|commands\.getoutput")
    chk.that(not hits, f"shell use in {hits}")
    markers = [ctx.dir / f"marker-{i}" for i in range(4)]
    hostile = (
        f"; touch {markers[0]}",
        f"$(touch {markers[1]})",
        f"`touch {markers[2]}`",
        f"&& touch {markers[3]}",
    )
    engine = StandinEngine(ctx.dir / "engine", Fault(extra_args=hostile))
    from quantbench.ports import free_port

    spec = engine.launch(
        Artifact("tiny", "bf16", ctx.dir), StandinSettings(faulty=True), LOOPBACK, free_port()
    )
    message = ""
    with ctx.tagged():
        try:
            with Server(spec, ctx.dir / "server.log"):
                pass
        except ServerError as exc:
            message = str(exc)
    made = [m.name for m in markers if m.exists()]
    chk.that(not made, f"shell metacharacters ran: {made}")
    chk.that(
        all(arg in message for arg in hostile),
        "the arguments did not reach the server verbatim",
    )
    return chk.outcome(
        f"no shell=True/os.system/os.popen in {len(_source_files())} files; 4 arguments like "
        f"'$(touch …)' reached the server verbatim (its own 'unrecognized arguments' error), "
        "0 commands ran"
    )


REMOTE_CODE_CHECK = r"""
import json, sys
from pathlib import Path
from quantbench.model import load_folder
folder, trust = Path(sys.argv[1]), sys.argv[2] == "1"
try:
    load_folder(folder, "float32", trust)
    print(json.dumps({"error": None}))
except Exception as exc:
    print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
"""


def _remote_code_folder(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    auto = {
        "AutoConfig": "configuration_qb.QbConfig",
        "AutoModelForCausalLM": "modeling_qb.QbForCausalLM",
        "AutoTokenizer": ["tokenization_qb.QbTokenizer", None],
    }
    (folder / "config.json").write_text(json.dumps({"model_type": "qb_remote", "auto_map": auto}))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {"auto_map": {"AutoTokenizer": auto["AutoTokenizer"]}, "tokenizer_class": "QbTokenizer"}
        )
    )
    markers = []
    for module in ("configuration_qb", "modeling_qb", "tokenization_qb"):
        marker = folder / f"RAN-{module}"
        (folder / f"{module}.py").write_text(
            f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
        )
        markers.append(marker)
    return markers


def remote_code(ctx: Context) -> Outcome:
    from quantbench.config import ModelSettings

    chk = Checks()
    chk.that(ModelSettings().trust_remote_code is False, "model.trust_remote_code defaults to true")
    hits = _grep(r"trust_remote_code\s*=\s*True")
    chk.that(not hits, f"trust_remote_code=True hard-coded in {hits}")
    results = {}
    for trust in (False, True):
        folder = ctx.dir / f"model-trust-{int(trust)}"
        markers = _remote_code_folder(folder)
        env = ctx.env(
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            HF_HOME=str(ctx.dir / "hf-home"),
            HF_MODULES_CACHE=str(ctx.dir / "hf-modules"),
        )
        out = subprocess.run(
            [sys.executable, "-c", REMOTE_CODE_CHECK, str(folder), str(int(trust))],
            capture_output=True, text=True, env=env, timeout=300, check=False,
        )  # fmt: skip
        lines = [x for x in out.stdout.splitlines() if x.startswith("{")]
        error = json.loads(lines[-1])["error"] if lines else f"no result: {out.stderr[-300:]}"
        results[trust] = (error, [m.name for m in markers if m.exists()])
    refused, ran = results[False]
    chk.that(not ran, f"with trust_remote_code false the folder's code ran: {ran}")
    chk.that(
        "contains custom code which must be executed" in (refused or "")
        and "trust_remote_code=True" in (refused or ""),
        f"not refused: {refused}",
    )
    chk.that(bool(results[True][1]), "opting in did not run the code (the check is blind)")
    return chk.outcome(
        "default false; no hard-coded opt-in; engines pass no --trust-remote-code; a folder with "
        "custom code: refused by transformers ('... contains custom code which must be executed "
        "... pass the argument `trust_remote_code=True`'), 0 of 3 modules ran; "
        f"with the opt-in {len(results[True][1])} ran (the check can see it)"
    )


def _leaks(secret: str, texts: dict[str, str]) -> list[str]:
    return [name for name, text in texts.items() if secret in text]


def _files_text(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): p.read_text(encoding="utf-8", errors="replace")
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def api_key_remote(ctx: Context) -> Outcome:
    chk = Checks()
    key = f"sk-qb-{ctx.tag[:16]}"
    runs = {}
    with ctx.tagged(), MockServerProcess(Script(api_key=key), ctx.dir / "server") as server:
        for name, how, extra_env in (
            ("env", [], {"QUANTBENCH_API_KEY": key}),
            ("flag", ["--api-key", key], {}),
            ("wrong", ["--api-key", key[::-1], "--model", "mock-model"], {}),
        ):
            out = ctx.dir / f"out-{name}"
            argv = [
                sys.executable,
                "-m",
                "quantbench.cli.load",
                "--url",
                server.url,
                "--engine",
                "mock",
            ]
            argv += ["--random-input-len", "8", "--random-output-len", "4", "--concurrency", "2"]
            argv += ["--num-requests", "4", "--vllm-json", "--out", str(out), *how]
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=ctx.env(**extra_env),
                timeout=120,
                check=False,
            )
            texts = {"stdout": proc.stdout, "stderr": proc.stderr, **_files_text(out)}
            records = (
                read_records(out / "records.jsonl") if (out / "records.jsonl").is_file() else []
            )
            runs[name] = (
                proc.returncode,
                records,
                _leaks(key, texts),
                _leaks(key[::-1], texts),
                len(texts),
            )
    for name in ("env", "flag"):
        rc, records, leaks, _, _ = runs[name]
        measured = [r for r in records if r.phase == "measured"]
        chk.that(
            rc == 0 and len(measured) == 4 and all(r.status == "completed" for r in measured),
            f"{name}: key not accepted (rc {rc}, {len(measured)} measured requests)",
        )
        chk.that(not leaks, f"{name}: key written to {leaks}")
    rc, records, _, leaks, _ = runs["wrong"]
    # Every request the server answered was refused; a cool-down filler still in flight when the
    # point stopped has its own reason (it was never answered), as on any point.
    answered = [r for r in records if r.status in ("completed", "failed")]
    measured = [r for r in records if r.phase == "measured"]
    chk.that(
        len(measured) == 4
        and all(r in answered for r in measured)
        and all((r.error or "").startswith("HTTP 401") for r in answered),
        "a wrong key was not refused with HTTP 401",
    )
    chk.that(not leaks, f"wrong key written to {leaks}")
    outputs = sum(r[4] for r in runs.values())
    return chk.outcome(
        f"key from $QUANTBENCH_API_KEY and --api-key: 8/8 measured requests accepted; wrong key: "
        f"{len(answered)}/{len(answered)} answered requests 'HTTP 401'; the key in 0 of {outputs} outputs (stdout, stderr, records, summaries, vllm json)",
        requests=sum(len(r[1]) for r in runs.values()),
        failed_requests=len(runs["wrong"][1]),
    )


def secrets_in_reports(ctx: Context) -> Outcome:
    chk = Checks()
    secret = f"hf_{ctx.tag[:20]}"
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    # secrets reach a server only from quantbench's own environment, named under secret_env
    # (params.yaml refuses them in extra_env and extra_args: its values are copied into dvc.lock)
    saved = {k: os.environ.get(k) for k in ("HF_TOKEN", "OPENAI_API_KEY")}
    os.environ.update(HF_TOKEN=secret, OPENAI_API_KEY=secret)
    try:
        run = run_standin_pair(
            ctx,
            Fault(),
            spec=workload(load=[{"kind": "concurrency", "concurrency": 2, "num_requests": 2}]),
            settings={"secret_env": ["HF_TOKEN", "OPENAI_API_KEY"]},
        )
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    texts = {"log": buffer.getvalue(), **_files_text(run.out)}
    leaks = _leaks(secret, texts)
    chk.that(not leaks, f"secret written to {leaks}")
    row = run.summary["rows"][0]
    chk.that(
        row["env"].get("HF_TOKEN") == "***" and row["env"].get("OPENAI_API_KEY") == "***",
        f"the report does not show the secret variables redacted: {row['env']}",
    )
    chk.that(all(r["completed"] for r in run.summary["rows"]), "the server did not serve")
    records = run.records()
    return chk.outcome(
        f"HF_TOKEN, OPENAI_API_KEY given through secret_env: shown as '***' in rows and server "
        f"reports; the secret in 0 of {len(texts)} outputs (summary, records, server logs, our log)",
        requests=len(records),
    )


SCENARIOS = [
    Scenario(
        "bind-loopback",
        "safety",
        "servers bind 127.0.0.1 unless a host is set",
        "read the defaults; build each engine's command line; list a live server's listening sockets",
        "every default is 127.0.0.1; the live server listens on 127.0.0.1 only",
        bind_loopback,
    ),
    Scenario(
        "no-shell",
        "safety",
        "server arguments never pass through a shell",
        "engine extra_args '; touch M', '$(touch M)', '`touch M`', '&& touch M'; scan the sources",
        "no marker file made; the arguments reach the server verbatim; no shell calls in the code",
        no_shell,
    ),
    Scenario(
        "remote-code",
        "safety",
        "remote code in a model folder is not executed",
        "a model folder whose auto_map names .py files that write a marker when imported, "
        "loaded as model.source: local would load it",
        "refused with transformers' trust_remote_code error, no marker; with the opt-in it runs",
        remote_code,
    ),
    Scenario(
        "api-key",
        "safety",
        "API key for a remote endpoint never written",
        "mock server requiring 'Authorization: Bearer KEY'; quantbench load with the key from "
        "$QUANTBENCH_API_KEY, from --api-key, and a wrong one",
        "requests accepted (401 with the wrong key); the key in no output or log",
        api_key_remote,
    ),
    Scenario(
        "secrets-redacted",
        "safety",
        "engine secrets kept out of reports and logs",
        "HF_TOKEN=K and OPENAI_API_KEY=K in quantbench's environment, named under "
        "engines.<engine>.secret_env, on a benchmark pair",
        "shown as '***'; K in no report, record or log line",
        secrets_in_reports,
    ),
]
