"""`quantbench`: one-off commands beside the DVC pipeline (validate params, estimate, bench ...)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from quantbench.accelerator import detect, resolve_device
from quantbench.cli.estimate import add_estimate_arguments, run_estimate
from quantbench.cli.exchange import (
    add_export_arguments,
    add_import_arguments,
    run_export,
    run_import,
)
from quantbench.cli.gather import add_gather_arguments, run_gather
from quantbench.cli.load import add_load_arguments, run_load
from quantbench.cli.plan import add_plan_arguments, run_plan
from quantbench.config import load_config
from quantbench.engines.environment import create_environment
from quantbench.engines.registry import engine_environments, engine_names, get_engine, valid_pairs
from quantbench.engines.serve import serve
from quantbench.errors import UserError
from quantbench.params import read_params
from quantbench.preflight import notes
from quantbench.secrets import redact_mapping
from quantbench.validation import validate_config

Handler = Callable[[argparse.Namespace], int]


def _validate(args: argparse.Namespace) -> int:
    config = load_config(args.params) if args.no_preflight else validate_config(args.params)
    print(f"{args.params}: valid" + ("" if args.no_preflight else " (preflight checks passed)"))
    if not args.no_preflight:
        for note in notes(config):  # said, not refused
            print(f"  note: {note}")

    if config.runtime.device != "cuda" or detect().has_gpu:  # (without --no-preflight: refused)
        print(f"  device: {resolve_device(config.runtime.device)} ({detect().describe()})")
    if not args.quiet:
        for name, section in config:
            shown = section.model_dump(mode="json") if hasattr(section, "model_dump") else section
            if isinstance(shown, dict):  # engines and variants: a mapping of settings models
                shown = {
                    k: v.model_dump(mode="json") if hasattr(v, "model_dump") else v
                    for k, v in shown.items()
                }
            print(f"  {name}: {redact_mapping(shown)}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    config = load_config(args.params)
    return serve(args.variant, args.engine, config.engines, host=args.host, port=args.port)


def _pairs(args: argparse.Namespace) -> int:
    config = load_config(args.params)
    formats = {name: spec.format for name, spec in config.variants.items()}
    pairs = valid_pairs(formats, config.engines)
    print("# every valid pair of the configured variants and enabled engines; paste under bench:")
    print("  pairs:")
    here = []
    for variant, engine in pairs:
        line = f"{variant}-{engine}: {{variant: {variant}, engine: {engine}}}"
        # a pair its engine cannot run on this machine (a kernel its build here lacks) is shown
        # commented out, with why: pasted as it is, it runs nothing
        why = get_engine(engine).unservable_here(formats[variant], config.engine(engine))
        print(f"    # {line}  # not on this machine: {why}" if why else f"    {line}")
        if not why:
            here.append((variant, engine))
    missing = [f"{v}-{e}" for v, e in here if f"{v}-{e}" not in config.bench.pairs]
    if missing:
        print(f"# not yet in {args.params}: {', '.join(missing)}", file=sys.stderr)
    return 0


def _env(args: argparse.Namespace) -> int:
    params = read_params(args.params)
    environments = engine_environments(params)
    names = args.engines or list(environments)
    for name in names:
        get_engine(name)  # an unknown name: the registry's error, which lists the known ones
        if name not in environments:
            print(f"{name}: runs in quantbench's own environment (or is disabled); nothing to do")
            continue
        print(create_environment(name, environments[name], Path(args.params).resolve().parent))
    return 0


def _mock_server(args: argparse.Namespace) -> int:
    from quantbench import mock_server  # deferred: aiohttp, which no other command needs

    return mock_server.main(args.rest)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quantbench",
        description="Merge, quantize, serve, load-test and compare a fine-tuned LLM's deployment "
        "options. The full pipeline runs with `make repro` (dvc repro); these are one-off commands.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    validate = sub.add_parser("validate", help="check params.yaml and print the resolved settings")
    validate.add_argument("--params", default="params.yaml")
    validate.add_argument("--quiet", action="store_true", help="print only the verdict")
    validate.add_argument(
        "--no-preflight",
        action="store_true",
        help="check the file only, not what it points to (model folder, group sizes, contexts)",
    )
    validate.set_defaults(handler=_validate)

    pairs = sub.add_parser("pairs", help="print every valid (variant, engine) pair as params YAML")
    pairs.add_argument("--params", default="params.yaml")
    pairs.set_defaults(handler=_pairs)

    served = sub.add_parser(
        "serve", help="serve one variant on one engine until Ctrl-C (127.0.0.1 unless --host)"
    )
    served.add_argument("variant", help="variant name (models/variants/<name>) or a model path")
    served.add_argument(
        "--engine", required=True, help=f"{' | '.join(engine_names())}, or a plugin's engine"
    )
    served.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    served.add_argument("--port", type=int, default=None, help="default: a free port")
    served.add_argument("--params", default="params.yaml")
    served.set_defaults(handler=_serve)

    env = sub.add_parser(
        "env",
        help="create the environments of their own that enabled engines declare (a plugin's venv "
        "from its requirements; vLLM's by `make vllm`)",
    )
    env.add_argument("engines", nargs="*", help="engine names (default: every one that has one)")
    env.add_argument("--params", default="params.yaml")
    env.set_defaults(handler=_env)

    # `load`, not `bench`: the pipeline's bench stages (quantbench.bench) start servers and run
    # many points; this tests one server that is already running. `bench` stays as an alias.
    load = sub.add_parser(
        "load",
        aliases=["bench"],
        help="load-test a running OpenAI-compatible server (see docs/LOAD.md)",
    )
    add_load_arguments(load)
    load.set_defaults(handler=run_load)

    mock = sub.add_parser(
        "mock-server",
        help="a scripted OpenAI-compatible streaming server, for testing clients (docs/LOAD.md)",
        add_help=False,
    )
    mock.set_defaults(handler=_mock_server)

    plan = sub.add_parser(
        "plan",
        help="the bench stages' points and expected duration for params.yaml and -S overrides "
        "(as dvc exp run takes them), before anything starts",
    )
    add_plan_arguments(plan)
    plan.set_defaults(handler=run_plan)

    export = sub.add_parser(
        "export",
        help="the bench runs in another tool's format: llm-d's benchmark report 0.2, or "
        "`vllm bench serve` JSON (docs/REPORT.md)",
    )
    add_export_arguments(export)
    export.set_defaults(handler=run_export)
    imported = sub.add_parser(
        "import",
        help="read `vllm bench serve`, AIPerf or GuideLLM results as quantbench's figures "
        "(docs/REPORT.md)",
    )
    add_import_arguments(imported)
    imported.set_defaults(handler=run_import)

    gathered = sub.add_parser(
        "gather",
        help="one report over DVC experiments from several machines, the machine a dimension "
        "(docs/BENCH.md)",
    )
    add_gather_arguments(gathered)
    gathered.set_defaults(handler=run_gather)

    estimate = sub.add_parser(
        "estimate", help="roofline estimate of a variant on a device (see docs/ESTIMATE.md)"
    )
    add_estimate_arguments(estimate)
    estimate.set_defaults(handler=run_estimate)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["mock-server"]:  # its own options, parsed by quantbench.mock_server
        args = argparse.Namespace(handler=_mock_server, rest=argv[1:])
    else:
        args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    try:
        return handler(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
