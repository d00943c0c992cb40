"""Fixtures for the load harness tests: a fake server per test and a one-call benchmark run."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from quantbench.load.records import RequestRecord, read_records
from quantbench.load.session import SessionSummary, Target, run_session
from quantbench.mock_server import MockServerProcess, Script
from quantbench.slo import Slo
from quantbench.workloads.spec import WorkloadSpec


@dataclass
class BenchRun:
    summary: SessionSummary
    records: list[RequestRecord]
    truth: list[dict[str, Any]]
    load_meta: dict[str, Any]
    """Per point, what the load process knew of itself (load_meta.json: its CPU, its event loop's
    lateness)."""

    @property
    def point(self) -> Any:
        assert len(self.summary.points) == 1
        return self.summary.points[0]

    def truth_by_id(self) -> dict[str, dict[str, Any]]:
        return {t["request_id"]: t for t in self.truth}


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Callable[..., BenchRun]]:
    """Run a workload (dict) against a fresh fake server with the given script."""
    servers: list[MockServerProcess] = []

    def run(
        script: Script, workload: dict[str, Any], *, slo: str | None = None, engine: str = "mock"
    ) -> BenchRun:
        n = len(servers)
        server = MockServerProcess(script, tmp_path / f"server{n}").start()
        servers.append(server)
        try:
            spec = WorkloadSpec.model_validate({"progress_interval_s": 5.0, **workload})
            out = tmp_path / f"out{n}"
            summary = run_session(
                spec,
                Target(url=server.url, engine=engine),
                out,
                slo=Slo(slo) if slo is not None else None,
            )
        finally:
            server.stop()
        meta = json.loads((out / "load_meta.json").read_text(encoding="utf-8"))
        return BenchRun(summary, read_records(out / "records.jsonl"), server.truth(), meta)

    yield run
    for server in servers:
        server.stop()


@pytest.fixture
def chat_dataset(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    rows = [
        {"id": f"q{i}", "messages": [{"role": "user", "content": "word " * (i + 1)}],
         "max_tokens": 4 + i}
        for i in range(6)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path
