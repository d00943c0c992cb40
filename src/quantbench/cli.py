"""`quantbench`: one-off commands beside the DVC pipeline (validate params, estimate, bench ...)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from quantbench.errors import UserError

Handler = Callable[[argparse.Namespace], int]


def _validate(args: argparse.Namespace) -> int:
    from quantbench.config import load_config

    config = load_config(args.params)
    print(f"{args.params}: valid")
    for name, section in config:
        shown = section.model_dump(mode="json") if hasattr(section, "model_dump") else section
        print(f"  {name}: {shown}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from quantbench.config import load_config
    from quantbench.engines.serve import serve

    config = load_config(args.params)
    return serve(args.variant, args.engine, config.engines, host=args.host, port=args.port)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quantbench",
        description="Merge, quantize, serve, load-test and compare a fine-tuned LLM's deployment "
        "options. The full pipeline runs with `make repro` (dvc repro); these are one-off commands.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    validate = sub.add_parser("validate", help="check params.yaml and print the resolved settings")
    validate.add_argument("--params", default="params.yaml")
    validate.set_defaults(handler=_validate)

    serve = sub.add_parser(
        "serve", help="serve one variant on one engine until Ctrl-C (127.0.0.1 unless --host)"
    )
    serve.add_argument("variant", help="variant name (models/variants/<name>) or a model path")
    serve.add_argument("--engine", required=True, help="transformers | vllm | llamacpp")
    serve.add_argument("--host", default="127.0.0.1", help="bind address (default: loopback only)")
    serve.add_argument("--port", type=int, default=None, help="default: a free port")
    serve.add_argument("--params", default="params.yaml")
    serve.set_defaults(handler=_serve)

    from quantbench.load.cli import add_bench_arguments, run_bench

    bench = sub.add_parser(
        "bench", help="load-test a running OpenAI-compatible server (see docs/LOAD.md)"
    )
    add_bench_arguments(bench)
    bench.set_defaults(handler=run_bench)

    from quantbench.estimate.cli import add_estimate_arguments, run_estimate

    estimate = sub.add_parser(
        "estimate", help="roofline estimate of a variant on a device (see docs/ESTIMATE.md)"
    )
    add_estimate_arguments(estimate)
    estimate.set_defaults(handler=run_estimate)
    return parser


def main(argv: list[str] | None = None) -> int:
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
