"""Every scenario of `python -m faults`, as a test: the same code `make faults` runs."""

from __future__ import annotations

import pytest
from faults.catalogue import SCENARIOS
from faults.scenario import Scenario, run_scenario


def _params(scenarios: list[Scenario]) -> list[object]:
    return [
        pytest.param(s, id=s.key, marks=[pytest.mark.server] if s.starts_processes else [])
        for s in scenarios
    ]


@pytest.mark.parametrize("scenario", _params(SCENARIOS))
def test_scenario(scenario: Scenario, tmp_path) -> None:
    outcome = run_scenario(scenario, tmp_path)
    # strict: an input check that was removed (status "missing") fails here, never an xfail
    assert outcome.status == "pass", f"{outcome.status}: {outcome.observed}"
    assert outcome.orphans == 0 and outcome.lost == 0
