"""A pair job is made of the validated config's typed values, read once (quantbench.bench.job)."""

from __future__ import annotations

from pathlib import Path

from quantbench.bench.job import JobPaths, pair_job
from quantbench.bench.served_here import served_pairs
from quantbench.config import load_config
from quantbench.decision.margins import DecisionMargins
from quantbench.load.session import build_traffic
from quantbench.slo import Slo

PAIR = "bf16-transformers"


def test_a_pair_job_is_made_of_the_typed_config(tmp_path: Path) -> None:
    """The job read params.yaml's raw mapping seven times for one pair (bench, variants, the
    engine's section, the pair's servability, workloads, slo, estimate.probe, report); it now
    takes each value from the one validated config."""
    config = load_config("params.yaml")
    variant = config.bench.pairs[PAIR].variant
    (tmp_path / "variants" / variant).mkdir(parents=True)
    (tmp_path / "variants" / variant / "config.json").write_text("{}")
    for spec in config.workloads.values():
        build_traffic(spec, None).write(tmp_path / "workloads")
    paths = JobPaths(tmp_path / "variants", tmp_path / "workloads", tmp_path / "quality")
    job = pair_job(config, PAIR, paths, with_probe=True)
    assert job.slo is config.slo and isinstance(job.slo, Slo)
    assert job.workloads == config.workloads and set(job.traffic) == set(config.workloads)
    for name, spec in config.workloads.items():
        judged_by = job.slo_for(name)
        assert isinstance(judged_by, Slo) and judged_by == spec.slo_text(config.slo)
    assert job.bench == config.bench and job.settings == config.pair_settings(PAIR)
    assert job.probe == config.estimate.probe
    assert job.margins == DecisionMargins(
        equivalence=config.report.equivalence, drift=config.report.drift
    )
    assert job.screened is None and job.not_served is None and job.references == []
    assert pair_job(config, PAIR, paths).probe is None  # the decide stage's: no probe


def test_the_pairs_served_here_come_from_the_config() -> None:
    config = load_config("params.yaml")
    served, skipped = served_pairs(config)
    assert set(served) | set(skipped) == set(config.bench.pairs)
    assert not set(served) & set(skipped)
    # a fallback runs only where the pair it stands in for cannot: exactly one of the two here
    fallback = next(n for n, p in config.bench.pairs.items() if p.fallback_for)
    assert (fallback in served) != (config.bench.pairs[fallback].fallback_for in served)
