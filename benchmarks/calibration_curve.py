"""Quality and time against calibration tokens: the curve that sizes GPTQ's and AWQ's calibration.

Not a test and not a stage. For each recipe and each calibration size (the first N passages of a
calibration text, each cut at ``--max-tokens``), builds the variant from the merged model with the
quantize stage's own code (``quantbench.quantize.build_variant``) and scores it against the merge
with the evaluate stage's own code (``quantbench.quality.evaluate_variant``, the ``evaluate:``
settings of ``--params``). Prints a markdown table (calibration tokens; quantize seconds, wall and
CPU, the latter robust to a shared machine; KL from the merged model, same top-1 and held-out task
accuracy, each with its interval) and appends one JSON line per point to ``--out``.

    python benchmarks/calibration_curve.py \\
        --recipe gptq-asym='{"format": "gptq", "bits": 4, "group_size": 64, "sym": false}' \\
        --recipe awq='{"format": "awq", "bits": 4, "group_size": 64, "sym": false}' \\
        --pydoc-text /tmp/calibration-pydoc.txt --samples 20,32,64,128

The recipes' own ``calibration`` key is replaced by each size in turn; ``all`` as a size uses every
passage. Sizes count passages, not tokens: the table's tokens column is what the quantizer saw.
One build at a time, ``--threads`` each (1 by default, as the default run's stages).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from quantbench.runtime import configure_threads


def parse_recipe(text: str) -> tuple[str, dict[str, Any]]:
    """``name={json recipe}`` -> (name, recipe)."""
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"expected NAME=JSON, got {text!r}")
    recipe = json.loads(raw)
    if not isinstance(recipe, dict):
        raise argparse.ArgumentTypeError(f"recipe {name!r} is not a JSON object")
    return name, recipe


def parse_sizes(text: str) -> list[int | None]:
    """``20,64,all`` -> [20, 64, None] (None: every passage)."""
    return [None if s.strip() == "all" else int(s) for s in text.split(",") if s.strip()]


def calibration_tokens(merged: Path, path: Path, samples: int | None, max_tokens: int) -> int:
    """Tokens the quantizer sees: the first ``samples`` passages, each cut at ``max_tokens``."""
    from transformers import AutoTokenizer

    from quantbench.formats.base import CalibrationSpec
    from quantbench.formats.calibration import load_calibration

    tokenizer = AutoTokenizer.from_pretrained(merged)
    spec = CalibrationSpec(samples=samples, max_tokens=max_tokens)
    texts = load_calibration("curve", path, spec).texts
    return sum(
        min(max_tokens, len(tokenizer(t, add_special_tokens=False)["input_ids"])) for t in texts
    )


def pydoc_text(shipped: Path, out: Path, at_least: int = 1500) -> Path:
    """A longer calibration text of the kind the curve in docs/QUANTIZE.md used: the shipped
    passages first, then the Python Language Reference that every CPython carries
    (``pydoc_data.topics``, PSF licence; disjoint from the evaluation and training text), its
    paragraphs joined into passages of at least ``at_least`` characters, blank-line separated as
    the calibration reader expects. Written to ``out``, not shipped: it is this Python's text."""
    from pydoc_data.topics import topics

    passages = [p.strip() for p in shipped.read_text(encoding="utf-8").split("\n\n") if p.strip()]
    for name in sorted(topics):
        current = ""
        for paragraph in topics[name].split("\n\n"):
            text = " ".join(paragraph.split())
            if text:
                current = f"{current} {text}".strip()
            if len(current) >= at_least:
                passages.append(current)
                current = ""
        if current:
            passages.append(current)
    out.write_text("\n\n".join(passages) + "\n", encoding="utf-8")
    return out


def interval(figure: dict[str, Any] | None, digits: int) -> str:
    """``0.416 [0.37, 0.47]`` from an interval of the quality report (the value alone without)."""
    if not figure:
        return "-"
    v, lo, hi = (round(figure[k], digits) for k in ("value", "low", "high"))
    return f"{v} [{lo}, {hi}]"


def run_point(
    args: argparse.Namespace, name: str, raw: dict[str, Any], samples: int | None, work: Path
) -> dict[str, Any]:
    """Build one (recipe, size) variant in ``work`` and evaluate it; the JSON line."""
    from quantbench.formats.registry import recipe
    from quantbench.params import read_params, section
    from quantbench.quality import evaluate_variant
    from quantbench.quality.spec import EvaluateSettings
    from quantbench.quantize import build_variant

    label = f"{name}@{samples or 'all'}"
    spec = recipe({**raw, "calibration": {"samples": samples, "max_tokens": args.max_tokens}})
    out = work / label.replace("@", "-")
    start, cpu = time.perf_counter(), time.process_time()
    build_variant(label, spec, args.merged, out, args.calibration, args.threads, args.device)
    quantize_s, quantize_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    settings = section(read_params(args.params), "evaluate", EvaluateSettings)
    report = evaluate_variant(
        label, out, args.merged, args.eval_text, args.heldout, settings, args.threads, args.device
    )
    intervals = report.model_dump(mode="json").get("intervals") or {}
    return {
        "name": name,
        "recipe": spec.model_dump(mode="json"),
        "calibration": str(args.calibration),
        "samples": samples,
        "tokens": calibration_tokens(args.merged, args.calibration, samples, args.max_tokens),
        "quantize_s": round(quantize_s, 1),
        "quantize_cpu_s": round(quantize_cpu_s, 1),
        "kl": report.kl_divergence.mean,
        "top1": report.top1_agreement,
        "heldout": report.heldout_accuracy,
        "perplexity_ratio": report.perplexity_ratio,
        "intervals": intervals,
    }


def table_row(line: dict[str, Any]) -> str:
    iv = line["intervals"]
    seconds = f"{line['quantize_s']} ({line['quantize_cpu_s']} CPU)"
    return (
        f"| {line['name']} | {line['tokens']} | {seconds} | "
        f"{interval(iv.get('kl_mean'), 3)} | {interval(iv.get('top1_agreement'), 3)} | "
        f"{interval(iv.get('heldout_accuracy'), 3)} |"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--recipe",
        action="append",
        type=parse_recipe,
        required=True,
        metavar="NAME=JSON",
        help="a variants: entry as JSON (repeatable)",
    )
    p.add_argument(
        "--samples",
        type=parse_sizes,
        default=[None],
        help="calibration sizes in passages, comma-separated; 'all' for every one",
    )
    p.add_argument("--max-tokens", type=int, default=512, help="token limit per passage")
    p.add_argument("--calibration", type=Path, default=Path("data/calibration.txt"))
    p.add_argument(
        "--pydoc-text",
        type=Path,
        default=None,
        metavar="PATH",
        help="write --calibration's passages and then Python's Language Reference to PATH "
        "(pydoc_data.topics) and calibrate on that",
    )
    p.add_argument("--merged", type=Path, default=Path("models/merged"))
    p.add_argument("--eval-text", type=Path, default=Path("data/eval.txt"))
    p.add_argument("--heldout", type=Path, default=Path("data/heldout.jsonl"))
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--out", type=Path, default=Path("calibration_curve.jsonl"))
    p.add_argument("--work", type=Path, default=None, help="where variants go (default: temp)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = p.parse_args(argv)
    configure_threads(args.threads)
    if args.pydoc_text is not None:
        args.calibration = pydoc_text(args.calibration, args.pydoc_text)
    rows = []
    with tempfile.TemporaryDirectory(prefix="curve-") as tmp:
        work = args.work or Path(tmp)
        for name, raw in args.recipe:
            for samples in args.samples:
                line = run_point(args, name, raw, samples, work)
                with args.out.open("a", encoding="utf-8") as f:
                    f.write(json.dumps(line) + "\n")
                rows.append(table_row(line))
                print(rows[-1], flush=True)
    print("\n| variant | calibration tokens | quantize s | KL mean | top-1 | task accuracy |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
