"""A Locust master and worker processes run one plan; their records merge into one file."""

from __future__ import annotations

from collections import Counter

import pytest

from quantbench.mock_server import Behaviour, Script

# timing: workers keep an arrival schedule: run alone
pytestmark = [pytest.mark.server, pytest.mark.timing]

RANDOM = {"source": "random", "input_len": 8, "output_len": 6, "num_prompts": 16}


def test_two_workers_closed_loop(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=10, itl_ms=5, output_tokens=5)]),
        {"prompts": RANDOM, "load": [{"kind": "concurrency", "concurrency": 4}],
         "num_requests": 30, "warmup_requests": 2, "workers": 2},
    )  # fmt: skip
    assert run.point.completed == 30 and run.point.warmup_excluded == 2
    counted = [r for r in run.records if r.phase != "cooldown"]
    assert sorted(r.index for r in counted) == list(range(32))
    # each worker takes every other conversation
    assert Counter(r.worker for r in counted) == {0: 16, 1: 16}
    assert {r.request_id for r in run.records} == {t["request_id"] for t in run.truth}
    assert run.point.total_output_tokens == 150


def test_two_workers_open_loop_keep_the_schedule(bench) -> None:  # type: ignore[no-untyped-def]
    run = bench(
        Script(behaviours=[Behaviour(ttft_ms=5, output_tokens=2)]),
        {"prompts": RANDOM, "load": [{"kind": "rate", "rate": 30.0}], "num_requests": 40,
         "workers": 2},
    )  # fmt: skip
    assert run.point.completed == 40
    lags = sorted(r.send_time - r.scheduled_time for r in run.records)
    assert lags[-1] < 0.05  # both workers started on the same clock
    assert {r.worker for r in run.records} == {0, 1}


def test_a_process_without_the_token_gets_no_plan(tmp_path) -> None:
    """The plan holds the request headers (an API key): a local process connecting as a worker
    without the run's token must not receive it, and the master refuses to run."""
    import subprocess

    from quantbench.load.procs import TOKEN_ENV, child_env, spawn_module, stop_group
    from quantbench.ports import free_port
    from quantbench.workloads.plan import BodyRules, Conversation, LoadPlan, Turn

    plan = LoadPlan(
        url="http://127.0.0.1:9", path="/v1/chat/completions", api="chat", point="c1",
        mode="closed", users=1, conversations=[Conversation("p", "s", [Turn("hi", 2)])],
        rules=BodyRules(model="m", profile="mock", stream_usage={}, fixed_length=(),
                        fixed_output_length=False),
        measured_conversations=1, headers={"Authorization": "Bearer sk-very-secret"},
    )  # fmt: skip
    plan_path = tmp_path / "plan.json"
    plan.save(plan_path)
    port = free_port()
    env = {**child_env(), TOKEN_ENV: "the-right-token"}
    master = spawn_module(
        "quantbench.load.runner",
        ["master", "--plan", str(plan_path), "--records", str(tmp_path / "out.jsonl"),
         "--workers", "1", "--bind-port", str(port), "--wait-workers-s", "8"],
        env=env, stderr=subprocess.PIPE,
    )  # fmt: skip
    rogue_env = {k: v for k, v in env.items() if k != TOKEN_ENV}
    rogue = spawn_module(
        "quantbench.load.runner", ["worker", "--master-port", str(port)], env=rogue_env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        rc = master.wait(timeout=60)
        err = master.stderr.read()
    finally:
        stop_group(rogue)
        stop_group(master)
    out = rogue.stdout.read()
    assert rc == 2, err
    assert "with this run's token" in err
    assert "sk-very-secret" not in out
