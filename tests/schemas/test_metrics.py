"""quantbench.schemas.metrics: one declaration per reported figure, every list of metric names
derived from it, and no hand-kept list left in the package.

The ``FORMER_*`` literals are the lists as the modules kept them by hand before the registry:
each derived list must equal its former self (the report's files are byte for byte as before).
"""

from __future__ import annotations

import ast
import typing
from pathlib import Path

import pytest

from quantbench.schemas import metrics as registry
from quantbench.schemas.bench import HEADLINE_FIGURES, BenchRow
from quantbench.schemas.best_config import Expected, Tie
from quantbench.schemas.metrics import METRICS
from quantbench.schemas.report_metrics import PairBrief, Recommendation

SRC = Path(registry.__file__).resolve().parents[1]  # src/quantbench

# --- the lists as they were kept by hand ----------------------------------------------------------

# report/tables.py METRICS: name -> (label, unit, better, digits)
FORMER_METRICS = {
    "output_throughput": ("Output throughput", "tok/s", "max", 3),
    "good_output_throughput": ("Good output throughput", "tok/s", "max", 3),
    "request_throughput": ("Request throughput", "req/s", "max", 3),
    "goodput": ("Goodput", "req/s", "max", 3),
    "error_rate": ("Error rate", "", "min", 3),
    "ttft_p50_ms": ("TTFT p50", "ms", "min", 3),
    "ttft_p90_ms": ("TTFT p90", "ms", "min", 3),
    "ttft_p99_ms": ("TTFT p99", "ms", "min", 3),
    "tpot_p50_ms": ("TPOT p50", "ms", "min", 3),
    "tpot_p90_ms": ("TPOT p90", "ms", "min", 3),
    "tpot_p99_ms": ("TPOT p99", "ms", "min", 3),
    "itl_p50_ms": ("ITL p50", "ms", "min", 3),
    "itl_p99_ms": ("ITL p99", "ms", "min", 3),
    "e2e_p50_ms": ("E2E p50", "ms", "min", 3),
    "e2e_p99_ms": ("E2E p99", "ms", "min", 3),
    "cost_per_million_tokens": ("Cost per 1M output tokens", "", "min", 3),
    "load": ("Load (concurrency or req/s)", "", "max", 3),
    "peak_rss_mib": ("Peak server memory", "MiB", "min", 3),
    "size_mib": ("Size on disk", "MiB", "min", 3),
    "perplexity": ("Perplexity", "", "min", 3),
    "perplexity_ratio": ("Perplexity / merged model", "x", "min", 4),
    "kl_mean": ("KL divergence, mean", "nats", "min", 3),
    "kl_high": ("KL divergence, high percentile", "nats", "min", 3),
    "top1_agreement": ("Top-1 agreement with merged", "", "max", 3),
    "heldout_accuracy": ("Held-out accuracy", "", "max", 3),
    "task_accuracy": ("Task accuracy, served", "", "max", 3),
}
# schemas/bench.py HEADLINE_FIGURES
FORMER_HEADLINE = (
    "output_throughput", "good_output_throughput", "request_throughput", "goodput", "error_rate",
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms",
    "itl_p50_ms", "itl_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
)  # fmt: skip
# report/tables.py FIGURE_UNITS (other names: 'ms' for *_ms, else none)
FORMER_FIGURE_UNITS = {
    "output_throughput": "tok/s", "good_output_throughput": "tok/s",
    "request_throughput": "req/s", "goodput": "req/s", "error_rate": "%",
}  # fmt: skip
# report/tables.py ROW_METRICS and QUALITY_METRICS
FORMER_ROW = (*FORMER_HEADLINE, "cost_per_million_tokens")
FORMER_QUALITY = (
    "perplexity", "perplexity_ratio", "kl_mean", "kl_high", "top1_agreement", "heldout_accuracy",
)  # fmt: skip
# report/dvcfiles.py PAIR_METRICS, BRIEF, POINT_COLUMNS, PAIR_COLUMNS
FORMER_PAIR_METRICS = (
    "good_output_throughput", "output_throughput", "goodput", "ttft_p50_ms", "ttft_p90_ms",
    "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "e2e_p99_ms",
    "cost_per_million_tokens",
)  # fmt: skip
FORMER_BRIEF = (
    "rank", "ranked", "good_output_throughput", "output_throughput", "ttft_p90_ms",
    "tpot_p50_ms", "cost_per_million_tokens", "peak_rss_mib", "perplexity_ratio",
    "heldout_accuracy",
)  # fmt: skip
FORMER_POINT_COLUMNS = (
    "workload", "pair", "variant", "engine", "server_point", "load_point", "load_kind", "load",
    "slo_verdict", "ranked", "flags", *FORMER_ROW, "peak_rss_mib", "size_mib", *FORMER_QUALITY,
)  # fmt: skip
FORMER_PAIR_COLUMNS = (
    "workload", "pair", "variant", "engine", "rank", "ranked", "slo_verdict", "server_point",
    "load_point", *FORMER_PAIR_METRICS, "peak_rss_mib", "size_mib", *FORMER_QUALITY,
)  # fmt: skip
# report/recommend.py SHOWN
FORMER_SHOWN = (
    "good_output_throughput", "output_throughput", "goodput", "ttft_p50_ms", "ttft_p90_ms",
    "ttft_p99_ms", "tpot_p50_ms", "tpot_p90_ms", "tpot_p99_ms", "e2e_p99_ms", "error_rate",
)  # fmt: skip
# report/build.py EXPLORER_METRICS
FORMER_EXPLORER = (
    "good_output_throughput", "output_throughput", "goodput", "request_throughput",
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p99_ms",
    "e2e_p50_ms", "e2e_p99_ms", "cost_per_million_tokens", "error_rate", "load",
    "peak_rss_mib", "size_mib", "perplexity", "perplexity_ratio", "kl_mean", "top1_agreement",
    "heldout_accuracy",
)  # fmt: skip
# report/charts.py SWEEP_METRICS, the pair points' values, ESTIMATE_METRICS' labels
FORMER_SWEEP = (
    "good_output_throughput", "output_throughput", "goodput", "request_throughput",
    "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "e2e_p99_ms",
    "error_rate", "cost_per_million_tokens",
)  # fmt: skip
FORMER_PAIR_POINT = (
    "output_throughput", "good_output_throughput", "goodput", "peak_rss_mib", "size_mib",
    *FORMER_QUALITY, "task_accuracy",
)  # fmt: skip
FORMER_ESTIMATE_LABELS = {
    "ttft": "TTFT p50 (ms)", "tpot": "TPOT p50 (ms)", "output_tps": "Output throughput (tok/s)",
}  # fmt: skip
# report/spec.py LatencyColumn, QualityColumn
FORMER_LATENCY_AXES = (
    "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms", "itl_p99_ms",
    "e2e_p50_ms", "e2e_p99_ms",
)  # fmt: skip
FORMER_QUALITY_AXES = (
    "perplexity_ratio", "kl_mean", "kl_high", "top1_agreement", "heldout_accuracy",
    "task_accuracy",
)  # fmt: skip
# schemas/best_config.py Expected.OMIT_WHEN_NONE
FORMER_EXPECTED_OMIT = frozenset({*FORMER_HEADLINE, "rerun"})
# schemas/report_metrics.py Recommendation.OMIT_WHEN_NONE
FORMER_RECOMMENDATION_OMIT = frozenset(
    {
        "ties", "ranked_by", "ranked_low", "ranked_high", "rank", "ranked", "slo_verdict",
        "server_point", "load_point", *FORMER_PAIR_METRICS, "peak_rss_mib", "size_mib",
        *FORMER_QUALITY,
    }
)  # fmt: skip


# --- the registry --------------------------------------------------------------------------------


def test_the_registry_declares_each_metric_once_as_the_report_labelled_it() -> None:
    assert len(registry._DECLARED) == len(METRICS)
    assert {
        name: (m.label, m.unit, m.better, m.digits) for name, m in METRICS.items()
    } == FORMER_METRICS
    for name, m in METRICS.items():
        assert m.name == name and m.description.strip(), name
        assert not (m.currency and m.unit), f"{name}: the currency is its unit"


def test_every_flag_is_where_its_figure_can_come_from() -> None:
    for name, m in METRICS.items():
        if m.headline:
            assert m.source == "row", f"{name}: a headline figure is a bench row's"
        if m.axis == "latency":
            assert m.headline and m.unit == "ms", name
        if m.axis == "quality":
            assert m.source in ("quality", "served"), name
        if m.sweepable:
            assert m.source == "row", f"{name}: drawn against the load from the rows"
        if m.shown:
            assert m.headline, f"{name}: a recommendation shows the row's figures with intervals"
    assert registry.select(lambda m: True) == tuple(METRICS)


def test_every_row_figure_is_a_bench_row_field() -> None:
    fields = BenchRow.model_fields
    for name in registry.select(lambda m: m.source == "row"):
        assert name in fields, f"BenchRow has no field {name}"
        assert fields[name].annotation == float | None, name


# --- each former list, derived ------------------------------------------------------------------


def test_the_schemas_lists_are_derived() -> None:
    assert HEADLINE_FIGURES == FORMER_HEADLINE  # in the row's field order
    assert set(registry.HEADLINE) == set(FORMER_HEADLINE)
    assert Expected.OMIT_WHEN_NONE == FORMER_EXPECTED_OMIT
    assert Recommendation.OMIT_WHEN_NONE == FORMER_RECOMMENDATION_OMIT
    # the schema fields that name figures are the registry's
    assert set(Expected.model_fields) - {"rerun", "currency", "price_per_hour"} == {
        *registry.HEADLINE,
        "cost_per_million_tokens",
    }
    assert tuple(PairBrief.model_fields) == FORMER_BRIEF
    assert set(Recommendation.model_fields) & set(METRICS) == set(registry.PAIR)
    assert {"perplexity_ratio", "peak_rss_bytes", "e2e_p99_ms"} <= set(Tie.model_fields)


def test_the_reports_lists_are_derived() -> None:
    from quantbench.report import build, charts, dvcfiles, recommend, spec, tables

    assert tables.METRICS is METRICS
    for name in FORMER_METRICS:
        former = FORMER_FIGURE_UNITS.get(name, "ms" if name.endswith("_ms") else "")
        assert tables.FIGURE_UNITS.get(name, "") == former, name
    former_point = (*FORMER_ROW, "load", "peak_rss_mib", "size_mib", *FORMER_QUALITY)
    assert former_point == tables.POINT_FIGURES
    assert dvcfiles.BRIEF == FORMER_BRIEF
    assert dvcfiles.POINT_COLUMNS == FORMER_POINT_COLUMNS
    assert dvcfiles.PAIR_COLUMNS == FORMER_PAIR_COLUMNS
    assert recommend.SHOWN == FORMER_SHOWN
    assert build.EXPLORER_METRICS == FORMER_EXPLORER
    assert charts.SWEEP_METRICS == FORMER_SWEEP
    # a pair point carries its record's figures now (the charts read only their axes)
    assert set(FORMER_PAIR_POINT) <= set(charts.PAIR_FIGURES)
    assert set(charts.PAIR_FIGURES) - set(FORMER_PAIR_POINT) <= set(registry.PAIR)
    assert {k: v[0] for k, v in charts.ESTIMATE_METRICS.items()} == FORMER_ESTIMATE_LABELS
    assert typing.get_args(spec.LatencyColumn) == FORMER_LATENCY_AXES
    assert typing.get_args(spec.QualityColumn) == FORMER_QUALITY_AXES


def test_the_axes_settings_accept_the_registrys_axes_only() -> None:
    from pydantic import ValidationError

    from quantbench.report.spec import ReportSettings

    props = ReportSettings.model_json_schema()["properties"]
    assert tuple(props["latency_axis"]["enum"]) == FORMER_LATENCY_AXES
    assert tuple(props["quality_axis"]["enum"]) == FORMER_QUALITY_AXES
    assert ReportSettings(latency_axis="itl_p50_ms").latency_axis == "itl_p50_ms"
    with pytest.raises(ValidationError):
        ReportSettings(latency_axis="ttft_p90_ms")  # not a Pareto axis
    with pytest.raises(ValidationError):
        ReportSettings(quality_axis="perplexity")


# --- no list of metric names kept by hand ---------------------------------------------------------

# Lists of metric names still kept by hand outside the registry (assigned name -> where, and what
# deriving it takes): the check fails on any other, and on one listed here that is gone.
KNOWN = {
    "RATES": "decision/rows.py: the rates pooled with the drift (the row figures in tok/s or "
    "req/s); the decision's own module",
    "GateMetric": "decision/gate.py: the quality gate's limits, one of them "
    "(heldout_accuracy_loss) no reported figure; the gate's LIMITS declare them",
    "QUALITY_HEADERS": "report/overview.py: the overview's short headers of the quality axes "
    "(a short label in the registry would derive them)",
}


def _spelled_out(node: ast.AST) -> set[str]:
    """The metric names a literal collection spells out (three or more count): a tuple, list or
    set of strings (a Literal[...] of them too), or a dict from them to constants (a table of
    labels or units; a dict of computed values is a record, not a list)."""
    elts: list[ast.expr] = []
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        elts = list(node.elts)
    elif isinstance(node, ast.Dict) and all(
        isinstance(v, ast.Constant)
        or (isinstance(v, ast.Tuple) and all(isinstance(e, ast.Constant) for e in v.elts))
        for v in node.values
    ):
        elts = [k for k in node.keys if k is not None]
    names = {e.value for e in elts if isinstance(e, ast.Constant) and e.value in METRICS}
    return names if len(names) >= 3 else set()


def hand_kept_lists(root: Path) -> dict[str, str]:
    """Who spells out three or more metric names in one literal, outside the registry: the
    name assigned (or 'function()' holding it) -> 'file:line'."""
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*.py")):
        if path == root / "schemas" / "metrics.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if not _spelled_out(node):
                continue
            owner, up = "<module>", parents.get(node)
            while up is not None:
                if isinstance(up, ast.Assign | ast.AnnAssign):
                    target = up.targets[0] if isinstance(up, ast.Assign) else up.target
                    owner = getattr(target, "id", None) or getattr(target, "attr", "?")
                    break
                if isinstance(up, ast.FunctionDef | ast.AsyncFunctionDef):
                    owner = f"{up.name}()"
                    break
                up = parents.get(up)
            out.setdefault(owner, f"{path.relative_to(root)}:{node.lineno}")
    return out


def test_no_list_of_metric_names_is_kept_by_hand() -> None:
    found = hand_kept_lists(SRC)
    new = {name: where for name, where in found.items() if name not in KNOWN}
    assert not new, (
        f"metric names listed by hand: {new}; derive the list from quantbench.schemas.metrics"
    )
    gone = set(KNOWN) - set(found)
    assert not gone, f"no longer kept by hand: remove {sorted(gone)} from KNOWN in {__file__}"


def test_the_check_finds_a_planted_list(tmp_path: Path) -> None:
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "metrics.py").write_text('X = ("goodput", "kl_mean", "load")\n')
    (tmp_path / "planted.py").write_text(
        'COLUMNS = ("pair", "goodput", "ttft_p50_ms", "e2e_p99_ms")\n'
        'UNITS = {"goodput": "req/s", "kl_mean": "nats", "size_mib": "MiB"}\n'
        "def f(x):\n"
        '    return x in ("goodput", "kl_mean", "size_mib")\n'
        'DATA = {"goodput": 1 + 1, "kl_mean": x, "size_mib": y}\n'  # a record, not a list
    )
    assert hand_kept_lists(tmp_path) == {
        "COLUMNS": "planted.py:1",
        "UNITS": "planted.py:2",
        "f()": "planted.py:4",
    }
