"""params.yaml validation: bad values give errors that name the key, the value and what is allowed."""

from __future__ import annotations

from pathlib import Path

import pytest

from quantbench.config import Config, ConfigError, load_config, parse_config

REPO = Path(__file__).resolve().parents[1]


def error_text(raw: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_config(raw)
    return str(info.value)


def test_repository_params_are_valid() -> None:
    config = load_config(REPO / "params.yaml")
    assert isinstance(config, Config)
    assert config.model.source == "embedded"
    assert config.runtime.threads >= 1


def test_missing_sections_take_documented_defaults() -> None:
    config = parse_config({"runtime": {"threads": 1}})
    assert config.lora.r == 16
    assert config.merge.dtype == "bfloat16"


def test_an_empty_params_file_is_refused(tmp_path) -> None:
    """An empty params.yaml used to validate as 'all defaults' (no variants, no pairs: a run
    that benchmarks nothing); it is now an error that says how to restore the file."""
    from quantbench.config import ConfigError, load_config

    empty = tmp_path / "params.yaml"
    empty.write_text("# nothing here\n")
    with pytest.raises(ConfigError, match="is empty.*git checkout params.yaml"):
        load_config(empty)


def test_literal_error_names_key_value_and_allowed() -> None:
    text = error_text({"model": {"source": "web"}})
    assert "model.source" in text
    assert "'web'" in text
    assert "'embedded'" in text and "'local'" in text and "'hub'" in text


def test_unknown_key_lists_the_allowed_keys() -> None:
    text = error_text({"lora": {"rank": 8}})
    assert "lora.rank: unknown key" in text
    assert "r, alpha" in text


def test_unknown_section_is_an_error() -> None:
    assert "modle: unknown key" in error_text({"modle": {}})


def test_every_bad_value_is_reported_at_once() -> None:
    text = error_text({"lora": {"r": 0, "learning_rate": -1}, "runtime": {"threads": "two"}})
    assert "lora.r: got 0" in text
    assert "lora.learning_rate: got -1" in text
    assert "runtime.threads: got 'two'" in text


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"model": {"source": "local"}}, "model.path is not set"),
        ({"model": {"source": "hub"}}, "model.hub_id is not set"),
        ({"lora": {"train": False}}, "lora.adapter_path is not set"),
    ],
)
def test_source_needs_its_field(raw: dict, expected: str) -> None:
    assert expected in error_text(raw)


def test_missing_file_and_bad_yaml(tmp_path) -> None:
    with pytest.raises(ConfigError, match="no such parameters file"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("lora: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(listy)


def test_a_pair_of_an_undefined_variant_says_what_to_do() -> None:
    """It listed the variants and stopped there; now it says the fix too."""
    import copy

    import pytest

    from quantbench.config import ConfigError, parse_config
    from quantbench.params import read_params

    raw = copy.deepcopy(read_params("params.yaml"))
    raw["bench"]["pairs"]["nope-vllm"] = {"variant": "nope", "engine": "vllm"}
    with pytest.raises(ConfigError, match=r"no variant 'nope' under variants: \(bf16, .*\); name "
                       r"one of them, or add the variant under variants:"):  # fmt: skip
        parse_config(raw)


def test_the_slo_is_a_typed_value_from_the_validated_config() -> None:
    """params.yaml's ``slo:`` and each workload's own are parsed once, where the config is
    validated, and travel as Slo values; the config still dumps them as the text written."""
    from quantbench.slo import Slo

    text = "ttft:p95<=500ms; tpot:p50<200ms; rps>=2"
    config = parse_config(
        {
            "slo": text,
            "workloads": {"chat": {"use": "chat"}, "own": {"use": "rag", "slo": "e2e<=9s"}},
        }
    )
    assert isinstance(config.slo, Slo) and config.slo == text
    assert [c.metric for c in config.slo.constraints] == ["ttft", "tpot", "rps"]
    own = config.workloads["own"]
    assert isinstance(own.slo, Slo) and own.slo_text(config.slo).constraints[0].metric == "e2e"
    named = config.workloads["chat"].slo_text(config.slo)  # a named workload's own profile
    assert isinstance(named, Slo) and named.constraints
    dumped = config.model_dump(mode="json")
    assert dumped["slo"] == text and dumped["workloads"]["own"]["slo"] == "e2e<=9s"
    assert type(dumped["slo"]) is str
    assert parse_config({"runtime": {"threads": 1}}).slo.constraints == ()


def test_a_workloads_bad_slo_is_refused_where_the_config_is_validated() -> None:
    """A workload's own SLO was parsed first when a bench stage judged by it: a typo there
    surfaced mid-run. It is now part of the config's validation, with the caret."""
    text = error_text({"workloads": {"chat": {"use": "chat", "slo": "ttfb:p50<200ms"}}})
    assert "workloads.chat.slo" in text and "ttfb" in text and "^^^^" in text


STAGES_ON_CONFIG = ("bench", "decide", "estimate", "report", "workloads")


@pytest.mark.parametrize("stage", STAGES_ON_CONFIG)
def test_a_stage_reads_params_through_the_validated_config_alone(stage: str) -> None:
    """These stages read params.yaml as the one typed config (load_config) and nothing else: no
    raw mapping, no section read of their own (the report stage kept its own reader of the
    workloads, with other defaults than the bench stages')."""
    import ast

    tree = ast.parse((REPO / "stages" / f"{stage}.py").read_text(encoding="utf-8"))
    imported = {
        (node.module, alias.name)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert ("quantbench.config", "load_config") in imported
    assert not {m for m, _ in imported} & {"quantbench.params", "quantbench.slo"}
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert not names & {"read_params", "section", "slo_section", "workloads_section"}
