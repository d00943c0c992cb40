"""A format and an engine from outside src/, in the project's plugins/ folder (one file for the
format, three for the engine) plus their params, through the whole pipeline under `dvc repro`:
quantize, evaluate, estimate, bench, decide and report. Then DVC's view of their code: editing the
format plugin reruns its variant's stages, editing the engine's server reruns its bench stage, and
nothing else.

The format (tests/formats/fp16_plugin.py) casts the merged model to float16; the engine
(tests/plugins/ministream_engine.py) serves it with a standard-library OpenAI-compatible server in
a venv of its own that `quantbench env ministream` creates, where quantbench is not installed. A
2-layer random model keeps every stage to seconds: what is checked is the chain, not the figures.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tests.dvcrun import dvc, dvc_repro_timed

from quantbench.fsutil import copy_checkout
from quantbench.schemas import io as schema_io
from quantbench.schemas.bench import PairSummary
from quantbench.schemas.code import CodeStamp
from quantbench.schemas.env import EnvInfo
from quantbench.schemas.estimate import EstimatesFile
from quantbench.schemas.variant import VariantRecord

pytestmark = [pytest.mark.slow, pytest.mark.server]

REPO = Path(__file__).resolve().parents[1]
FORMAT = REPO / "tests/formats/fp16_plugin.py"
ENGINE = [REPO / "tests/plugins" / name for name in (
    "ministream_engine.py", "ministream_server.py", "ministream-requirements.txt"
)]  # fmt: skip
TIMEOUT_S = 20 * 60  # a hung stage fails the test, not CI's clock


def plugin_params(source: Path, model: Path) -> dict:
    """The repository's params with one variant of the plugin format on the plugin engine."""
    params = yaml.safe_load(source.read_text())
    params["plugins"] = ["plugins/fp16_format.py", "plugins/ministream_engine.py"]
    params["model"].update(source="local", path=str(model))
    params["runtime"]["threads"] = 1
    params["lora"].update(steps=1, batch_size=2, heldout_limit=1)
    params["merge"]["probe_limit"] = 1
    params["variants"] = {"fp16": {"format": "fp16"}}
    params["evaluate"].update(max_tokens=128, heldout_limit=2)
    params["engines"] = {
        # swept over a setting of its own (its settings model's), like a built-in engine
        "ministream": {"itl_ms": 1.0, "sweep": {"itl_ms": [1.0, 3.0]}},
        **{name: {"enabled": False} for name in ("transformers", "vllm", "llamacpp")},
    }
    chat = params["workloads"]["chat"]
    chat.pop("precision", None)
    chat.update(length_scale=0.03, num_requests=4, warmup_requests=1, slo="ttft<=30s; tpot<=2s")
    chat["load"] = [{"kind": "concurrency", "concurrency": 2}]
    params["workloads"] = {"chat": chat}
    params["bench"]["pairs"] = {"fp16-ministream": {"variant": "fp16", "engine": "ministream"}}
    params["estimate"]["hardware"] = ["this", "L4"]
    # the plugin engine as the estimate's engine (`auto` would pick transformers, which the
    # plugin format adds its format to: engines.registry.also_serves)
    params["estimate"]["engine"] = "ministream"
    params["estimate"]["probe"] = {"repeats": 1, "max_batch": 2, "output_tokens": 8}
    params["report"]["confirm"]["enabled"] = False
    return params


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_model_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("plugins")
    copy_checkout(REPO, root)
    (root / "dvc.lock").unlink()  # the default run's: every stage here is new
    shutil.copy(FORMAT, root / "plugins/fp16_format.py")
    for path in ENGINE:
        shutil.copy(path, root / "plugins" / path.name)
    params = plugin_params(REPO / "params.yaml", tiny_model_dir)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    # the engine's own environment, as a user creates it after `make setup`
    created = subprocess.run(
        [sys.executable, "-m", "quantbench.cli", "env", "ministream"],
        cwd=root, capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    log = tmp_path_factory.mktemp("plugins-log") / "repro.log"
    code = dvc_repro_timed(root, TIMEOUT_S, log)
    assert code == 0, f"dvc repro failed ({code}):\n{log.read_text()[-4000:]}"
    return root


def test_the_plugins_run_through_every_stage(project: Path) -> None:
    variant = schema_io.read(project / "models/variants/fp16/variant.json", VariantRecord)
    assert variant.format == "fp16"
    assert json.loads((project / "models/variants/fp16/config.json").read_text())["dtype"] == (
        "float16"
    )
    quality = json.loads((project / "reports/quality/fp16.json").read_text())
    assert (quality["name"], quality["format"], quality["backend"]) == ("fp16", "fp16", "hf")
    # the estimator costs the plugin format's weights (2 bytes each, read from its file) on the
    # plugin engine, on this machine and on an L4
    estimates = schema_io.read(project / EstimatesFile.OUTPUT, EstimatesFile)
    assert {e.hardware_name for e in estimates.estimates} == {"this", "L4"}
    for estimate in estimates.estimates:
        assert (estimate.variant.format, estimate.engine) == ("fp16", "ministream")
        assert estimate.weights.bits_per_weight == 16.0 and estimate.weights.source == "file"
    assert {(p.pair, p.engine) for p in estimates.pairs} == {("fp16-ministream", "ministream")}
    # the bench started the plugin's server with its own environment's interpreter, and the
    # fingerprint recorded that environment
    summary = schema_io.read(project / "reports/bench/fp16-ministream/summary.json", PairSummary)
    assert summary.rows and not summary.not_served
    assert {s.server_point for s in summary.servers} == {"itl_ms=1.0", "itl_ms=3.0"}
    for server in summary.servers:  # one start per setting, each with its own interpreter
        assert server.command[0].endswith(".venv-ministream/bin/python") and not server.error
    assert summary.engine_version.startswith("ministream 1.0 (Python 3.")
    env = schema_io.read(project / EnvInfo.OUTPUT, EnvInfo)
    assert set(env.engine_envs) == {"ministream"}  # the built-in engines are disabled here
    assert (env.engine_envs["ministream"] or {}).get("pip")
    assert "fp16-ministream" in (project / "reports/summary.md").read_text()
    html = (project / "reports/index.html").read_text()
    assert "fp16" in html and "ministream's environment" in html


def test_each_plugin_has_a_code_stamp_of_its_files(project: Path) -> None:
    fp16 = schema_io.read(project / CodeStamp.output(kind="formats", name="fp16"), CodeStamp)
    assert fp16.file == "plugins/fp16_format.py" and not fp16.builtin
    engine = schema_io.read(
        project / CodeStamp.output(kind="engines", name="ministream"), CodeStamp
    )
    assert engine.file == "plugins/ministream_engine.py" and not engine.builtin
    assert set(engine.code_files) == {
        "plugins/ministream_server.py", "plugins/ministream-requirements.txt"
    }  # fmt: skip
    gptq = schema_io.read(project / CodeStamp.output(kind="formats", name="gptq"), CodeStamp)
    # the built-in module that runs: this checkout's (the scratch project's stages import the
    # installed quantbench, so its path lies outside the project and is written whole)
    assert gptq.file.endswith("src/quantbench/formats/gptq.py") and gptq.builtin


def _stale(project: Path) -> set[str]:
    """The stages `dvc status` says must run again, less `fingerprint`: it is `always_changed`
    by design (about a second; its output byte-identical on the same machine, so nothing after
    it reruns)."""
    done = dvc(["status", "--json"], project, 300)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout or "{}")) - {"fingerprint"}


def _edited(project: Path, file: str) -> set[str]:
    """The stages stale after appending a comment to ``file`` and rerunning validate (which
    stamps the engines' and formats' code; the closures stage before it stamps each stage's);
    the file is restored, and validate rerun, before returning."""
    path = project / file
    original = path.read_text()
    try:
        path.write_text(original + "\n# edited\n")
        done = dvc(["repro", "validate"], project, 300)
        assert done.returncode == 0, done.stderr
        return _stale(project)
    finally:
        path.write_text(original)
        assert dvc(["repro", "validate"], project, 300).returncode == 0


def test_a_plugin_edit_reruns_its_own_stages_and_nothing_changed_runs_nothing(
    project: Path,
) -> None:
    assert _stale(project) == set()
    stale = _edited(project, "plugins/fp16_format.py")
    assert {"quantize@fp16", "evaluate@fp16"} <= stale
    assert "bench@fp16-ministream" not in stale  # its engine's stamp did not change
    stale = _edited(project, "plugins/ministream_server.py")  # a declared code file
    assert "bench@fp16-ministream" in stale
    assert not stale & {"quantize@fp16", "evaluate@fp16"}
    assert _stale(project) == set()


def test_a_library_edit_reruns_the_stages_whose_closure_holds_it(project: Path) -> None:
    """dvc.yaml lists each stage's closure stamp (reports/closures/, tools/dag.py), not its
    modules: editing the report's tables reruns the report and nothing before it; editing the
    LoRA trainer reruns the fine-tuning and, through its outputs, what follows it."""
    stale = _edited(project, "src/quantbench/report/tables.py")
    assert "report" in stale
    assert not stale & {"prepare", "finetune", "quantize@fp16", "evaluate@fp16"}
    assert not any(s.startswith("bench@") for s in stale)
    stale = _edited(project, "src/quantbench/lora/train.py")
    assert {"finetune"} <= stale and "prepare" not in stale
    assert _stale(project) == set()
