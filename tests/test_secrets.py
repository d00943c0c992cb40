"""A secret given as documented never appears in any output (quantbench.secrets): not in
validate's messages or printout, not in a launch error, not in a stage's outputs, logs, the
report or its HTML; and a secret written into params.yaml by mistake is refused at validate
without being shown (DVC copies params into dvc.lock, which is committed)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from quantbench.cli.main import main
from quantbench.secrets import REDACTED, redact_mapping, secret_env_problem

REPO = Path(__file__).resolve().parents[1]


def _secret() -> str:
    return f"hf_{uuid.uuid4().hex}"


def _params_with(tmp_path: Path, secret_env: list[object], **vllm: object) -> Path:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["engines"]["vllm"].update(secret_env=secret_env, **vllm)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def test_secret_env_written_name_equals_value_is_refused_without_showing_it(
    tmp_path, capsys
) -> None:
    """`secret_env: [HF_TOKEN=hf_...]` was accepted, and the launch's error printed the whole
    entry; engines is a params dependency of the bench stages, so the value reached dvc.lock.
    Now validate refuses it, showing the name only, and so does the pipeline's first stage:
    no stage runs, and DVC records nothing."""
    secret = _secret()
    path = _params_with(tmp_path, [f"HF_TOKEN={secret}"])
    assert main(["validate", "--params", str(path)]) == 2
    out = capsys.readouterr()
    assert secret not in out.out + out.err
    assert "secret_env: 'HF_TOKEN=***' is not a variable name" in out.err
    assert "list the name alone (secret_env: [HF_TOKEN]) and export HF_TOKEN=..." in out.err
    stage = subprocess.run(
        [sys.executable, str(REPO / "stages/validate.py"), "--params", str(path),
         "--out", str(tmp_path / "validate.json"), "--code", str(tmp_path / "code")],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert stage.returncode == 2, stage.stderr
    assert secret not in stage.stdout + stage.stderr
    assert not (tmp_path / "validate.json").exists()


def test_no_message_about_secret_env_shows_a_value(tmp_path, capsys) -> None:
    """An entry that is wrong in another way (beside one not a string), or one swept."""
    secret = _secret()
    for entries, extra, shown in (
        ([f"TOKEN={secret}", 5], {}, "secret_env.1: got 5"),
        ([f"TOKEN={secret}", "a b"], {}, f"'TOKEN={REDACTED}', 'a b' is not a variable name"),
        ([], {"sweep": {"secret_env": [[f"A={secret}", 5]]}}, f"['A={REDACTED}', 5]"),
        ([], {"extra_args": ["--api-key", f"{secret}\n"]}, "extra_args: got [...]; item 1"),
        ([], {"sweep": {"extra_args": [["--api-key", secret]]}}, "extra_args=[...] is not"),
    ):
        path = _params_with(tmp_path, entries, **extra)
        assert main(["validate", "--params", str(path)]) == 2
        out = capsys.readouterr()
        assert secret not in out.out + out.err, out.err
        assert shown in out.err, out.err
    assert secret_env_problem(["HF_TOKEN", "VLLM_API_KEY"]) is None
    assert "not a variable name" in str(secret_env_problem(["my token"]))


def test_a_launch_missing_a_secret_names_the_variable_only(monkeypatch) -> None:
    from quantbench.engines.base import Engine
    from quantbench.engines.vllm import VllmSettings
    from quantbench.errors import UserError

    monkeypatch.delenv("QB_TEST_SECRET", raising=False)
    settings = VllmSettings.model_construct(**{**VllmSettings().__dict__,
                                               "secret_env": ["QB_TEST_SECRET=hf_x1y2z3"]})  # fmt: skip
    with pytest.raises(UserError) as err:
        Engine.base_env(settings)
    assert "hf_x1y2z3" not in str(err.value) and "export QB_TEST_SECRET=..." in str(err.value)


def test_the_printout_masks_by_what_a_value_is_not_by_a_word_in_its_key(capsys) -> None:
    """merge.min_next_token_agreement (a share) was shown as *** for the word 'token' in it."""
    assert main(["validate", "--params", str(REPO / "params.yaml"), "--no-preflight"]) == 0
    out = capsys.readouterr().out
    assert "'min_next_token_agreement': 1.0" in out
    assert redact_mapping({"HF_TOKEN": "hf_abc", "max_tokens": 32, "api_key": None,
                           "env": {"MY_API_KEY": "k", "OMP_NUM_THREADS": "1"}}) == {
        "HF_TOKEN": REDACTED, "max_tokens": 32, "api_key": None,
        "env": {"MY_API_KEY": REDACTED, "OMP_NUM_THREADS": "1"}}  # fmt: skip


@pytest.mark.server
def test_a_secret_through_the_environment_reaches_no_output_report_or_html(
    tmp_path, monkeypatch, caplog
) -> None:
    """HF_TOKEN in quantbench's environment, named under secret_env, reaches the server: not
    the pair's summary, records, server reports, our log, nor the report built from them
    (summary.md, index.html, best_config.json)."""
    import logging
    import shutil

    from faults.engine import Fault
    from faults.pairs import run_standin_pair, workload
    from faults.scenario import Context

    from quantbench.outputs import load_inputs
    from quantbench.report.build import build_report

    secret = _secret()
    monkeypatch.setenv("HF_TOKEN", secret)
    ctx = Context(tmp_path / "run")
    ctx.dir.mkdir()
    caplog.set_level(logging.DEBUG)
    run = run_standin_pair(
        ctx, Fault(), spec=workload(load=[{"kind": "concurrency", "concurrency": 2,
                                           "num_requests": 2}]),
        settings={"secret_env": ["HF_TOKEN"]},
    )  # fmt: skip
    assert run.summary["rows"][0]["env"]["HF_TOKEN"] == REDACTED
    root = tmp_path / "project"
    shutil.copytree(run.out, root / "reports/bench" / run.summary["pair"])
    report = build_report(load_inputs(root), slo="ttft:p50<=10s")
    texts = {str(p): p.read_text(errors="replace") for p in run.out.rglob("*") if p.is_file()}
    texts |= {f"report/{p}": t for p, t in report.files.items()}
    texts["log"] = caplog.text
    assert "report/index.html" in texts
    assert [name for name, text in texts.items() if secret in text] == []


@pytest.mark.server
def test_an_api_key_by_flag_or_environment_reaches_no_output(tmp_path) -> None:
    """`quantbench load --api-key` and QUANTBENCH_API_KEY: the fault suite's row, run here."""
    from faults.catalogue import SCENARIOS
    from faults.scenario import run_scenario

    scenario = next(s for s in SCENARIOS if s.run.__name__ == "api_key_remote")
    outcome = run_scenario(scenario, tmp_path)
    assert outcome.status == "pass", outcome.observed
