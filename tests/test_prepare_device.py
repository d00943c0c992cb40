"""The prepare stage resolves runtime.device first of all: nothing in it computes (the base is
read and written as it is), but a `cuda` that cannot be met is refused at the first stage."""

from __future__ import annotations

import pytest
from tests.stage_script import (
    Reached,
    device_env_kept,  # noqa: F401 (autouse)
    load_stage,
    params_file,
    run_stage,
)

from quantbench.accelerator.nvidia import DEVICE_ENV
from quantbench.errors import UserError


def test_cuda_without_a_gpu_is_refused_before_the_base_is_read(
    no_gpu, monkeypatch, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    stage = load_stage("prepare", monkeypatch)
    monkeypatch.setattr(stage, "prepare_base", lambda *a: pytest.fail("the base was prepared"))
    with pytest.raises(UserError, match=r"^runtime\.device: device cuda, but no NVIDIA GPU"):
        run_stage(stage, monkeypatch, params_file(tmp_path, "cuda"), "--out", str(tmp_path / "b"))
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize(("machine", "device"), [("fake_gpu", "cuda"), ("no_gpu", "cpu")])
def test_the_resolved_device_is_handed_on_to_what_the_stage_starts(
    machine, device, request, monkeypatch, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    import os

    request.getfixturevalue(machine)
    stage = load_stage("prepare", monkeypatch)

    def prepare_base(*args: object) -> None:
        raise Reached(exported=os.environ.get(DEVICE_ENV))

    monkeypatch.setattr(stage, "prepare_base", prepare_base)
    with pytest.raises(Reached) as reached:
        run_stage(stage, monkeypatch, params_file(tmp_path, "auto"), "--out", str(tmp_path / "b"))
    assert reached.value.seen == {"exported": device}
