"""`quantbench plan`: what the bench stages of params.yaml (with `dvc exp run -S`-style overrides)
will run, and how long that should take on this machine, before anything starts.

The overrides go through DVC's own parser (Hydra syntax, exactly what `dvc exp run -S` takes), so
the command previewed is the command run. On a CPU the timing needs the pipeline's calibration of
this machine (`reports/calibrate/this.json`) and the workloads' traffic (`reports/workloads/`):
`dvc repro calibrate workloads` makes both in a minute. On a GPU machine not yet calibrated, or
with `--hardware NAME`, a datasheet GPU stands in, the model's shape may come from the overlay's
`model_configs:` (a 7B hub model priced before its download) and missing traffic is generated
here (quantbench.estimate.priced); the plan says what it priced by. Pairs whose prediction is
missing are counted but not timed.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Any

from quantbench.bench.duration import ProbeShape, TaskShape, TrafficShape, plan_pair, render
from quantbench.bench.job import screened_by_quality, screened_workload
from quantbench.bench.served_here import served_pairs
from quantbench.config import parse_config
from quantbench.engines.registry import get_engine
from quantbench.errors import UserError
from quantbench.estimate.calibrate import read_pair_fits
from quantbench.estimate.pair_probe import PROMPT_SENTENCES, probe_point
from quantbench.estimate.pairs import bench_pairs, predict_pairs, workload_shapes
from quantbench.estimate.pipeline import follow_pipeline
from quantbench.estimate.priced import (
    pricing_hardware,
    pricing_model,
    pricing_traffic,
    traffic_context,
)
from quantbench.estimate.served import served_prompt_profiles
from quantbench.estimate.variants import variants_from_params
from quantbench.load.tokens import load_counter
from quantbench.params import read_params
from quantbench.qa import load_qa
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import PairSummary
from quantbench.schemas.quality import QualityReport
from quantbench.schemas.workloads import WorkloadSummary
from quantbench.workloads.traffic import Traffic


def _answer_tokens(tokenizer: Path, answers: list[str], cap: int) -> float | None:
    """The reference answers' mean length in tokens, each with its stop token and at most
    ``cap`` (what a served answer that matches it costs); None without a tokenizer."""
    if not answers:
        return None
    try:
        counter = load_counter(tokenizer)
    except ValueError:
        return None
    return sum(min(cap, counter.count_text(a) + 1) for a in answers) / len(answers)


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "-S",
        "--set-param",
        dest="overrides",
        action="append",
        default=[],
        metavar="OVERRIDE",
        help="a params override as `dvc exp run -S` takes it (repeatable), e.g. "
        "'++bench.pairs.gguf-q4_k_m-llamacpp.settings={parallel: 8, sweep: {}}'",
    )
    parser.add_argument(
        "--overlay",
        "--profile",  # its old name, still taken
        dest="overlay",
        type=Path,
        default=None,
        help="a params overlay: a YAML file whose `overrides:` list is applied before any -S "
        "(profiles/)",
    )
    parser.add_argument(
        "--run",
        action="store_true",
        help="after the plan, run it: `dvc exp run` with the profile's and -S overrides",
    )
    parser.add_argument(
        "--hardware",
        default=None,
        metavar="NAME",
        help="price the run on a datasheet GPU (H100, H200, L4, ...: `quantbench estimate "
        "--help` lists them) or a saved hardware JSON, whatever this machine is; default: this "
        "machine as the calibrate stage measured it, else on a GPU machine its GPU's datasheet",
    )
    parser.add_argument("--model", type=Path, default=Path("models/base"))
    parser.add_argument("--variants", type=Path, default=Path("models/variants"))
    parser.add_argument("--workloads", type=Path, default=Path("reports/workloads"))
    parser.add_argument("--calibration", type=Path, default=Path("reports/calibrate/this.json"))
    parser.add_argument(
        "--quality",
        type=Path,
        default=Path("reports/quality"),
        help="the evaluate stage's reports: a pair whose variant the quality gate already "
        "excludes is priced as its bench stage will run it, screened (bench.quality_gated)",
    )
    parser.add_argument(
        "--bench",
        type=Path,
        default=Path("reports/bench"),
        help="the bench stages' outputs: each pair's last start-up and the probe of its server "
        "(<pair>/probe.json; a pair without one is timed by the roofline)",
    )


def profile_overrides(path: Path | None) -> list[str]:
    """The ``overrides:`` list of a profile file (none without one)."""
    if path is None:
        return []
    import yaml

    if not path.is_file():
        raise UserError(f"--overlay {path}: no such file (profiles/ holds the project's)")
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    found = data.get("overrides") if isinstance(data, dict) else None
    if not isinstance(found, list) or not all(isinstance(x, str) for x in found):
        raise UserError(f"--overlay {path}: needs `overrides:`, a list of `dvc exp run -S` texts")
    return list(found)


def profile_model_configs(path: Path | None) -> dict[str, Path]:
    """The ``model_configs:`` of a profile file: the config.json of each hub model it may name,
    by hub id, for a plan before the model is prepared (paths relative to the project, as
    params.yaml's are)."""
    if path is None:
        return {}
    import yaml

    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    found = data.get("model_configs") if isinstance(data, dict) else None
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise UserError(f"--overlay {path}: model_configs must map hub ids to config.json paths")
    configs = {str(k): Path(str(v)) for k, v in found.items()}
    for hub_id, config in configs.items():
        if not config.is_file():
            raise UserError(
                f"--overlay {path}: model_configs.{hub_id}: {config} is not a file; give the "
                "path of the model's config.json, relative to the project"
            )
    return configs


def with_overrides(params: Path, overrides: list[str]) -> dict[str, Any]:
    """params.yaml with the overrides applied by DVC's own parser, as a mapping."""
    if not overrides:
        return read_params(str(params))
    from dvc.utils.hydra import apply_overrides

    with tempfile.TemporaryDirectory(prefix="qb-plan-") as tmp:
        copy = Path(tmp) / "params.yaml"
        shutil.copyfile(params, copy)
        try:
            apply_overrides(str(copy), overrides)
        except Exception as exc:  # DVC's InvalidArgumentError wraps Hydra's own message
            cause = exc.__cause__ or exc
            raise UserError(f"-S {' '.join(overrides)}: {cause}") from None
        return read_params(str(copy))


def _startup(bench_dir: Path, pair: str, engine: Any) -> float:
    """This pair's last measured start-up (its summary's ready_seconds), else the engine's."""
    path = bench_dir / pair / "summary.json"
    if path.is_file():
        try:
            summary = schema_io.read(path, PairSummary, pair=pair)
        except Exception:  # an unreadable old summary only loses its hint
            summary = None
        if summary is not None and summary.engine == engine.name:
            ready = [s.report.ready_seconds for s in summary.servers if s.report.ready_seconds]
            if ready:
                return float(max(ready))
    return float(engine.startup_estimate_s)


def _quality(quality_dir: Path, variant: str) -> QualityReport | None:
    """The variant's quality report where the evaluate stage wrote one (None: not yet)."""
    path = quality_dir / f"{variant}.json"
    return schema_io.read(path, QualityReport, name=variant) if path.is_file() else None


def run_plan(args: argparse.Namespace) -> int:
    overrides = [*profile_overrides(args.overlay), *args.overrides]
    params = with_overrides(Path(args.params), overrides)
    config = parse_config(params, args.params)  # the pipeline's checks, before any estimate
    bench, workloads, slo = config.bench, config.workloads, config.slo
    served, skipped = served_pairs(config)
    # what the run is priced by: this machine as calibrated, or a datasheet GPU; the prepared
    # model, or the overlay's config.json; the workloads' traffic, or the same generated here
    hardware = pricing_hardware(
        args.hardware, args.calibration, config.runtime.device, args.workloads
    )
    model = pricing_model(args.model, config.model, profile_model_configs(args.overlay))
    here = hardware.here and model.prepared  # what this machine measured applies
    arch, spec = model.arch, hardware.spec
    priced = arch is not None and spec is not None
    notes = [line for line in (hardware.says, model.says) if line and priced]
    fits = read_pair_fits(args.bench, served, hardware.gpu) if here else {}
    pairs = bench_pairs(served, config.pair_settings, fits)
    traffic: dict[str, Traffic] = {}
    if arch is not None and spec is not None:
        context = traffic_context(arch, served, config.pair_settings)
        tokenizer = model.folder if model.prepared else None
        traffic, counted = pricing_traffic(
            workloads, args.workloads, config.data.corpus, context, tokenizer
        )
        notes += [counted] if counted else []
    else:
        for name in workloads:
            try:
                traffic[name] = Traffic.read(args.workloads, name)
            except UserError:
                continue
    summaries: dict[str, WorkloadSummary | None] = {n: t.summary for n, t in traffic.items()}
    shapes = {
        name: TrafficShape(
            turns=summary.mean("turns", 1.0) if summary is not None else 1.0,
            think_s=summary.mean("think_s", 0.0) if summary is not None else 0.0,
        )
        for name, summary in summaries.items()
    }
    predictions = []
    if arch is None or spec is None:
        notes.append(hardware.why_not or model.why_not or "no timing")
    elif any(s is not None for s in summaries.values()):
        settings = follow_pipeline(config.estimate, slo, workloads, summaries)
        try:
            prompts = served_prompt_profiles(model.folder, workloads, traffic)
        except ValueError:  # no tokenizer (a model priced by its config.json alone)
            prompts = {}
            notes.append("the chat template's tokens not counted: no tokenizer to count them")
        predictions = predict_pairs(
            arch, model.folder,
            variants_from_params(params, args.variants if model.prepared else None), pairs,
            workload_shapes(workloads, summaries, prompts=prompts), hardware.name, spec, settings,
        )  # fmt: skip
    plans = []
    task = TaskShape()
    if config.served_task.enabled:
        items = load_qa(config.data.heldout)
        if config.evaluate.heldout_limit is not None:
            items = items[: config.evaluate.heldout_limit]
        cap = config.evaluate.heldout_max_new_tokens
        task = TaskShape(len(items), cap, config.served_task.concurrency,
                         _answer_tokens(model.folder, [i.answer for i in items], cap))  # fmt: skip
        if task.answer_tokens is None:
            notes.append(f"served task: answers priced at the {cap}-token cap ({model.folder} "
                         "holds no tokenizer to count the reference answers)")  # fmt: skip
    asked = config.estimate.probe
    for name, pair in pairs.items():
        engine = get_engine(pair.engine)
        labels = [label for label, _ in pair.settings.sweep_points()]
        measured = workloads
        asks = task
        why = screened_by_quality(config, _quality(args.quality, bench.pairs[name].variant))
        if why is not None:  # as its bench stage runs it: one setting, its first load at its
            labels = [probe_point(engine, pair.settings)[0]]  # floor, no served task
            measured = {w: screened_workload(spec) for w, spec in workloads.items()}
            asks = TaskShape()
            notes.append(f"{name}: screened, {why}")
        probe = ProbeShape()
        if bench.pairs[name].probe:  # the bench's probe for the estimate (estimate.pair_probe)
            label, point = probe_point(engine, pair.settings)
            limit = engine.max_batch(point)
            probe = ProbeShape(
                alone=asked.repeats * len(PROMPT_SENTENCES) + 1,
                batch=min(asked.max_batch, limit) if limit is not None else asked.max_batch,
                output_tokens=asked.output_tokens, server_point=label,
            )  # fmt: skip
        startup = _startup(args.bench, name, engine) if here else engine.startup_estimate_s
        plans.append(
            plan_pair(
                name, labels, measured, shapes, predictions, bench, slo, startup, asks, probe,
            )
        )  # fmt: skip
    print(render(plans))
    notes += [f"{name}: no server, {why}" for name, why in skipped.items()]
    for note in notes:
        print(note)
    command = ["dvc", "exp", "run"] + [x for o in overrides for x in ("-S", o)]
    if not overrides:
        command = ["dvc", "repro"]
    print(f"{'Running' if args.run else 'To run it'}: {shlex.join(command)}", flush=True)
    if args.run:  # this interpreter's DVC, whatever PATH holds
        import subprocess
        import sys

        return subprocess.run([sys.executable, "-m", *command], check=False).returncode
    return 0
