"""``quantbench load``: run a workload against any running OpenAI-compatible server.

The workload comes from a named workload (``--workload chat``), from the ``workloads:`` section
of a params file (``--params``, with ``--workload`` naming one of them), from flags, or from
both (flags win). Results go to ``--out``: ``records.jsonl`` (one line per request),
``summary.json`` (the typed result), and with ``--vllm-json`` one ``vllm-<point>.json`` per point
in ``vllm bench serve``'s field names. Progress goes to stderr, a results table to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import ValidationError

from quantbench.config import load_config
from quantbench.engines.registry import engine_names, get_engine
from quantbench.errors import UserError
from quantbench.load.export import to_vllm_result
from quantbench.load.profiles import profile_names
from quantbench.load.records import read_records
from quantbench.load.session import SessionSummary, Target, run_session
from quantbench.params import describe
from quantbench.slo import Slo, SLOParseError
from quantbench.workloads.prompts import DatasetError
from quantbench.workloads.spec import NAMED_WORKLOADS, WorkloadSpec

API_KEY_ENV = "QUANTBENCH_API_KEY"


def _float_list(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


# Flags that set one WorkloadSpec field each: the field's description is their help and its
# annotation their type (choices for a Literal), so they cannot drift from the settings model.
# The names are vllm bench serve's where it has the flag (--num-requests, --seed, ...), hence
# the explicit map rather than names derived from the fields.
SPEC_FLAGS: dict[str, str] = {
    "--length-scale": "length_scale",
    "--name": "name",
    "--api": "api",
    "--num-requests": "num_requests",
    "--duration": "duration_s",
    "--warmup-requests": "warmup_requests",
    "--warmup-s": "warmup_s",
    "--seed": "seed",
    "--fixed-output-length": "fixed_output_length",
    "--timeout": "timeout_s",
    "--request-timeout": "request_timeout_s",
    "--point-timeout": "point_timeout_s",
    "--workers": "workers",
    "--percentiles": "percentiles",
    "--keep-text": "keep_text",
    "--unique-prompts": "unique_prompts",
}


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")


def _spec_flag(group: Any, flag: str, note: str = "", **kwargs: Any) -> None:
    """Add ``flag`` with the help and type of the WorkloadSpec field it sets (``SPEC_FLAGS``)."""
    info = WorkloadSpec.model_fields[SPEC_FLAGS[flag]]
    text = (info.description or "") + (f" {note}" if note else "")
    kwargs.setdefault("help", text.replace("%", "%%"))  # argparse formats help with %
    if "type" not in kwargs and "action" not in kwargs:
        annotation = info.annotation
        options = [a for a in get_args(annotation) if a is not type(None)]
        if get_origin(annotation) is Literal:
            kwargs["choices"] = list(get_args(annotation))
        elif options and get_origin(annotation) is not Literal:
            annotation = options[0]  # X | None
        if "choices" not in kwargs:
            kwargs["type"] = annotation if annotation in (int, float, str) else str
    group.add_argument(flag, **kwargs)


def add_load_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``quantbench load``'s options to ``parser``."""
    t = parser.add_argument_group("server")
    t.add_argument(
        "--url", required=True, help="base URL of the server, e.g. http://127.0.0.1:8000"
    )
    t.add_argument(
        "--engine",
        choices=list(dict.fromkeys([*profile_names(), *engine_names()])),
        default="openai",
        help="which optional request fields the server accepts (default: openai)",
    )
    t.add_argument("--model", help="'model' of the requests (default: the server's first model)")
    t.add_argument(
        "--tokenizer",
        help="local tokenizer.json or model dir, to count tokens the server does not report",
    )
    t.add_argument(
        "--header",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=VALUE",
        help="extra HTTP header (repeatable)",
    )
    t.add_argument(
        "--api-key",
        help=f"sent as 'Authorization: Bearer KEY' (default: ${API_KEY_ENV}; prefer the "
        "variable, a flag shows in `ps`); never written to outputs or logs",
    )
    w = parser.add_argument_group("workload (overrides --params)")
    w.add_argument("--params", type=Path, help="YAML file with a 'workloads:' (and 'slo:') section")
    w.add_argument(
        "--workload",
        help="a workload of --params by name, or a named workload shipped with quantbench "
        f"({', '.join(NAMED_WORKLOADS)}: docs/LOAD.md)",
    )
    for flag in ("--length-scale", "--name", "--api"):
        _spec_flag(w, flag)
    w.add_argument("--dataset", type=Path, help="JSONL prompts (id, messages|prompt, max_tokens)")
    w.add_argument("--max-tokens", type=int, help="max_tokens for dataset lines without one")
    w.add_argument("--random-input-len", type=int, help="random prompts of this many tokens")
    w.add_argument(
        "--random-output-len",
        type=int,
        help="... generating exactly this many tokens: the length is binding (the engine's "
        "ignore_eos or equivalent, as `vllm bench serve --ignore-eos`); add "
        "--no-fixed-output-length to let answers end early",
    )
    w.add_argument("--random-range-ratio", type=float, help="spread of random lengths (0-1)")
    w.add_argument("--concurrency", type=_int_list, help="closed loop: streams, e.g. 1,4,16")
    w.add_argument("--rate", type=_float_list, help="open loop: requests/s, e.g. 0.5,1,2")
    w.add_argument("--burstiness", type=float, help="open loop: gamma shape (1 = Poisson)")
    w.add_argument("--max-concurrency", type=int, help="open loop: cap on requests in flight")
    for flag in ("--num-requests", "--duration", "--warmup-requests", "--warmup-s", "--seed"):
        _spec_flag(w, flag)
    _spec_flag(
        w, "--fixed-output-length", "Default: on for random prompts, off otherwise.",
        action=argparse.BooleanOptionalAction, default=None,
    )  # fmt: skip
    w.add_argument(
        "--request-field",
        action="append",
        type=_key_value,
        default=[],
        metavar="KEY=JSON",
        help="extra request body field, e.g. temperature=0",
    )
    for flag in ("--timeout", "--request-timeout", "--point-timeout"):
        _spec_flag(w, flag)
    w.add_argument(
        "--precision",
        help="size each point from a precision target instead of a count, e.g. "
        "'ttft:p50,tpot:p50' (measure until each is within --precision-width)",
    )
    w.add_argument(
        "--precision-width", type=float, default=0.05, help="relative half-width (default 0.05)"
    )
    w.add_argument(
        "--max-requests", type=int, default=200, help="with --precision: measure at most this many"
    )
    _spec_flag(w, "--workers")
    _spec_flag(w, "--percentiles", "E.g. 50,90,95,99.", type=_float_list)
    _spec_flag(w, "--keep-text", action="store_true", default=None)
    _spec_flag(
        w, "--unique-prompts", "Default: on (docs/LOAD.md, \"What a request contains\").",
        action=argparse.BooleanOptionalAction, default=None,
    )  # fmt: skip
    o = parser.add_argument_group("results")
    o.add_argument(
        "--slo", help="constraints, e.g. 'ttft:p95<=500ms; tpot:p50<200ms; error_rate<=0.01'"
    )
    o.add_argument(
        "--confidence", type=float, default=0.95, help="confidence of every interval (0-1)"
    )
    o.add_argument("--out", type=Path, default=Path("reports/bench"), help="output directory")
    o.add_argument(
        "--vllm-json",
        action="store_true",
        help="also write vllm-<point>.json in vllm bench serve's field names",
    )


def workload_from_args(args: argparse.Namespace) -> tuple[WorkloadSpec, Slo | None]:
    """The workload (params file, then flags) and the SLO (params file, then --slo)."""
    data: dict[str, Any] = {}
    slo: Slo | None = None
    if args.params:
        # The one place that reads params files validates them; flags then override.
        config = load_config(args.params)
        names = list(config.workloads)
        name = args.workload or names[0]
        if name not in config.workloads:
            raise ValueError(
                f"{args.params} has no workload {name!r}; its workloads: {', '.join(names)}"
            )
        chosen = config.workloads[name]
        data = chosen.model_dump(mode="json", exclude_unset=True)
        data["name"] = name
        slo = chosen.slo_text(config.slo) or None
    elif args.workload is not None:
        data = {"use": args.workload, "name": args.workload}
    if args.precision:
        data["precision"] = {
            "targets": [t.strip() for t in args.precision.split(",") if t.strip()],
            "rel_half_width": args.precision_width,
            "max_requests": args.max_requests,
        }
    simple = {field: getattr(args, _dest(flag)) for flag, field in SPEC_FLAGS.items()}
    data.update({k: v for k, v in simple.items() if v is not None})
    if args.dataset is not None:
        data.pop("use", None)
        data["prompts"] = {"source": "dataset", "path": str(args.dataset)}
        if args.max_tokens is not None:
            data["prompts"]["max_tokens"] = args.max_tokens
    elif args.random_input_len is not None or args.random_output_len is not None:
        if args.random_input_len is None or args.random_output_len is None:
            raise ValueError("random prompts need both --random-input-len and --random-output-len")
        data["prompts"] = {
            "source": "random",
            "input_len": args.random_input_len,
            "output_len": args.random_output_len,
        }
        if args.random_range_ratio is not None:
            data["prompts"]["range_ratio"] = args.random_range_ratio
        if args.fixed_output_length is None:
            # A user who asks for 32-token outputs expects 32: binding unless told otherwise
            # (without it, answers ended early and TTFT halved against vllm bench serve's).
            data["fixed_output_length"] = True
        data.pop("use", None)
    points: list[dict[str, Any]] = []
    for c in args.concurrency or []:
        points.append({"kind": "concurrency", "concurrency": c})
    for r in args.rate or []:
        point: dict[str, Any] = {"kind": "rate", "rate": r}
        if args.burstiness is not None:
            point["burstiness"] = args.burstiness
        if args.max_concurrency is not None:
            point["max_concurrency"] = args.max_concurrency
        points.append(point)
    if points:
        data["load"] = points
    if args.request_field:
        fields = dict(data.get("request_fields") or {})
        for key, raw in args.request_field:
            try:
                fields[key] = json.loads(raw)
            except json.JSONDecodeError:
                fields[key] = raw  # a bare word is a string
        data["request_fields"] = fields
    if "prompts" not in data and "use" not in data:
        raise ValueError("no prompts: give --workload NAME, --dataset, or --random-input-len/"
                         "--random-output-len, or a --params file with workloads")  # fmt: skip
    if "load" not in data and "use" not in data:
        raise ValueError("no load shape: give --concurrency or --rate (or 'load' in --params)")
    return WorkloadSpec.model_validate(data), Slo(args.slo) if args.slo is not None else slo


def _figure(value: float | None, interval: Any, fmt: str = ".1f") -> str:
    if value is None:
        return "-"
    if interval is None:
        return f"{value:{fmt}}"
    return f"{value:{fmt}} [{interval.low:{fmt}}, {interval.high:{fmt}}]"


def format_table(summary: SessionSummary) -> str:
    """Per point: the sample, throughput and latencies with their intervals, checks, SLO."""
    rows: list[str] = []

    def pct(stats: Any, key: str) -> str:
        if stats is None:
            return "-"
        if key in stats.too_few:
            return f"too few requests for {key} ({stats.count})"
        return _figure(stats.percentiles_ms.get(key), stats.intervals_ms.get(key))

    for p in summary.points:
        conf = (
            f"{p.output_throughput_interval.confidence:.0%}" if p.output_throughput_interval else ""
        )
        rows.append(
            f"{p.point}: {p.completed} of {p.requests} measured requests completed "
            f"({p.failed} failed, {p.not_served} not served) over {p.duration_s:.1f} s; "
            f"intervals at {conf or 'n/a'}"
        )
        rows.append(
            f"  output tok/s {_figure(p.output_throughput, p.output_throughput_interval)}"
            + (
                f"; good {_figure(p.good_output_throughput, p.good_output_throughput_interval)}"
                if p.good_output_throughput is not None
                else ""
            )
            + f"; req/s {p.request_throughput:.2f}"
        )
        for name, stats in (("TTFT", p.ttft), ("TPOT", p.tpot), ("ITL", p.itl), ("E2E", p.e2e)):
            rows.append(f"  {name:<5} p50 {pct(stats, 'p50')} ms; p99 {pct(stats, 'p99')} ms")
        load = p.load
        rows.append(
            f"  load: offered {load.offered:g} ({load.kind}), mean in flight "
            f"{load.mean_in_flight:.2f}, peak {load.peak_in_flight}"
            + ("" if load.reached else f"  NOT REACHED: {load.note}")
        )
        if p.lengths.checked and not p.lengths.ok:
            rows.append(
                f"  LENGTHS: {p.lengths.mismatched} requests delivered another length than asked "
                f"({p.lengths.delivered_tokens} of {p.lengths.requested_tokens} tokens)"
            )
        if p.harness.client_bound:
            rows.append(f"  HARNESS: {p.harness.note}")
        if p.stop_reason:
            rows.append(f"  stopped: {p.stop_reason}")
        for r in p.slo:
            rows.append(f"    {r.verdict.upper():<9} {r.reason}")
    return "\n".join(rows)


def run_load(args: argparse.Namespace) -> int:
    """Run ``quantbench load``; 0 when the run completed, 2 on bad input or no server."""
    try:
        spec, slo = workload_from_args(args)
        if args.engine in engine_names():
            get_engine(args.engine)  # loaded: its request profile is registered with it
        target = Target(
            url=args.url,
            engine=args.engine,
            model=args.model,
            tokenizer=args.tokenizer,
            headers=dict(args.header),
            api_key=args.api_key or os.environ.get(API_KEY_ENV) or None,
        )
        if not 0 < args.confidence < 1:
            raise ValueError(f"--confidence must lie between 0 and 1, got {args.confidence}")
        summary = run_session(spec, target, args.out, slo=slo, confidence=args.confidence)
    except ValidationError as e:
        print(f"error: invalid workload:\n{_pydantic_errors(e)}", file=sys.stderr)
        return 2
    except SLOParseError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ValueError, DatasetError, RuntimeError, OSError, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.vllm_json:
        records = read_records(args.out / "records.jsonl")
        for point in summary.points:
            mine = [r for r in records if r.point == point.point]
            data = to_vllm_result(
                point, model=summary.model, api=spec.api, percentiles=spec.percentiles,
                tokenizer=args.tokenizer, records=mine,
            )  # fmt: skip
            (args.out / f"vllm-{point.point}.json").write_text(json.dumps(data), encoding="utf-8")
    print(format_table(summary))
    print(f"results: {args.out / 'summary.json'}, {args.out / 'records.jsonl'}", file=sys.stderr)
    if not any(p.completed for p in summary.points):
        # a run that measured nothing is a failure, whatever stopped it (records kept)
        print(
            "error: no request completed at any point: nothing was measured; the records say "
            f"why ({args.out / 'records.jsonl'}: status and error of each request)",
            file=sys.stderr,
        )
        return 1
    return 0


def _pydantic_errors(e: ValidationError) -> str:
    return "\n".join(f"  {describe(err, '', WorkloadSpec)}" for err in e.errors())


def main(argv: list[str] | None = None) -> int:
    """Standalone entry point until the top-level CLI wires ``bench`` in."""
    parser = argparse.ArgumentParser(prog="quantbench load", description=__doc__)
    add_load_arguments(parser)
    return run_load(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
