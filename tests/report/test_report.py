"""The report on a fixture tree: loaders, judging, recommendation, and every output file."""

from __future__ import annotations

import csv
import io
import json
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from pydantic import ValidationError

from quantbench.bench.results import pick_best
from quantbench.load.metrics import summarize
from quantbench.report.build import build_report
from quantbench.report.html import script_json
from quantbench.report.inputs import PointKey, load_inputs
from quantbench.report.pareto import front
from quantbench.report.profiles import judge_profiles
from quantbench.report.spec import ReportSettings
from quantbench.slo import parse_slo

from .conftest import FIXTURE_PROFILES, FIXTURE_SLO, HOSTILE

SETTINGS = ReportSettings(profiles=FIXTURE_PROFILES)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def inputs(fixture_tree: Path):
    return load_inputs(fixture_tree)


@pytest.fixture(scope="module")
def files(inputs):
    return build_report(inputs, slo=FIXTURE_SLO, settings=SETTINGS, params={"slo": FIXTURE_SLO})


# --- loading ------------------------------------------------------------------------------------


def test_loads_every_stage_output(inputs) -> None:
    assert inputs.problems == []
    assert sorted(inputs.pairs) == ["bf16-transformers", "gguf-q4_k_m-llamacpp", "gptq-w4g64-vllm"]
    assert sorted(inputs.quality) == ["bf16", "gguf-q4_k_m", "gptq-w4g64"]
    assert sorted(inputs.variants) == sorted(inputs.quality)
    assert {e.variant_name for e in inputs.estimates} == set(inputs.quality)
    bf16 = inputs.pairs["bf16-transformers"]
    assert len(bf16.rows) == 4 and bf16.rows[0].repeats == 2
    repeats = inputs.records[PointKey("bf16-transformers", "continuous_batching=on", "c4")]
    assert len(repeats) == 2 and all(len(r.records) == 12 for r in repeats)  # warm-up dropped
    assert (
        inputs.env and inputs.merge and inputs.finetune and inputs.base_info and inputs.merged_info
    )


def test_missing_pieces_are_notes_not_errors(tmp_path: Path, fixture_tree: Path) -> None:
    empty = load_inputs(tmp_path)
    assert any("no benchmark results" in p for p in empty.problems)
    out = build_report(empty, slo=FIXTURE_SLO)
    assert "No benchmark results yet" in out.files[Path("summary.md")]
    assert out.best_config["default"]["status"] == "none"
    # a tree without estimates, one quality report, and one pair's records
    tree = tmp_path / "partial"
    shutil.copytree(fixture_tree, tree)
    (tree / "reports/estimate/estimates.json").unlink()
    (tree / "reports/quality/gguf-q4_k_m.json").unlink()
    (tree / "reports/bench/broken").mkdir()
    (tree / "reports/bench/broken/summary.json").write_text("{not json")
    partial = load_inputs(tree)
    notes = "\n".join(partial.problems)
    assert "estimates.json: missing" in notes
    assert "gguf-q4_k_m.json: missing" in notes
    assert "broken/summary.json: unreadable" in notes
    out = build_report(partial, slo=FIXTURE_SLO, settings=SETTINGS)
    assert "not evaluated" in out.files[Path("summary.md")]


def test_old_outputs_are_migrated_or_named_with_their_stage(
    tmp_path: Path, fixture_tree: Path
) -> None:
    tree = tmp_path / "old"
    shutil.copytree(fixture_tree, tree)
    # a quality report as written before the schemas (version 0): migrated
    path = tree / "reports/quality/bf16.json"
    data = json.loads(path.read_text())
    data.pop("schema_version")
    data["quantize"].pop("schema_version")
    path.write_text(json.dumps({**data, "report_version": 1}))
    # a variant.json of a version nothing converts: a note naming the stage to rerun
    path = tree / "models/variants/gguf-q4_k_m/variant.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "schema_version": 0}))
    inputs = load_inputs(tree)
    assert inputs.quality["bf16"].quantize is not None
    assert "gguf-q4_k_m" not in inputs.variants
    (note,) = inputs.problems
    assert "gguf-q4_k_m/variant.json: schema version 0 is older" in note
    assert note.endswith("rerun `dvc repro quantize@gguf-q4_k_m`")
    out = build_report(inputs, slo=FIXTURE_SLO, settings=SETTINGS)
    assert "dvc repro quantize@gguf-q4_k_m" in out.files[Path("index.html")]


# --- judging and picking ------------------------------------------------------------------------


def test_default_profile_keeps_the_bench_verdicts(inputs) -> None:
    default = judge_profiles(inputs, FIXTURE_SLO, SETTINGS)[0]
    assert default.name == "default"
    for judged in default.rows:
        original = next(
            r
            for r in inputs.pairs[judged.pair].rows
            if (r.server_point, r.load_point) == (judged.row.server_point, judged.row.load_point)
        )
        assert judged.row.slo_passed == original.slo_passed
        assert judged.row.goodput == original.goodput


def test_winner_is_pick_best_over_all_pairs(inputs) -> None:
    default = judge_profiles(inputs, FIXTURE_SLO, SETTINGS)[0]
    rows = [{**r.model_dump(), "pair": name} for name, s in inputs.pairs.items() for r in s.rows]
    expected = pick_best(rows, rank_by_goodput=True)
    assert expected is not None and default.best is not None
    assert (default.best.pair, default.best.row.load_point) == (
        expected["pair"],
        expected["load_point"],
    )
    # and each pair's own best is what its bench stage wrote
    for name, summary in inputs.pairs.items():
        best = default.pair_best(name)
        if summary.best is None:
            assert best is None
        else:
            assert best is not None and best.row.load_point == summary.best.load_point


def test_other_profiles_are_judged_from_the_records(inputs) -> None:
    profiles = {p.name: p for p in judge_profiles(inputs, FIXTURE_SLO, SETTINGS)}
    strict = profiles["strict"]
    assert strict.best is None and strict.rank_by_goodput
    judged = next(r for r in strict.rows if r.row.measured)
    assert judged.judged_from == "records"
    key = PointKey(judged.pair, judged.row.server_point, judged.row.load_point)
    direct = [
        summarize(rep.records, point="x", scenario="s", shape={}, percentiles=[50, 99],
                  constraints=parse_slo(FIXTURE_PROFILES["strict"]))
        for rep in inputs.records[key]
    ]  # fmt: skip
    assert judged.row.slo_passed == all(d.slo_passed for d in direct)
    assert judged.verdicts and judged.verdicts[0].metric == "ttft"
    batch = profiles["batch"]
    assert batch.ranked_by == "output_throughput" and batch.best is not None
    assert all(r.row.goodput is None for r in batch.rows)  # no per-request SLO: no goodput


def test_without_records_aggregates_are_checked(tmp_path: Path, fixture_tree: Path) -> None:
    tree = tmp_path / "norecords"
    shutil.copytree(fixture_tree, tree)
    for path in (tree / "reports/bench").rglob("records.jsonl"):
        path.unlink()
    inputs = load_inputs(tree)
    profiles = judge_profiles(
        inputs, FIXTURE_SLO, ReportSettings(profiles={"p99": "ttft:p99<=1s", "p95": "ttft:p95<=1s"})
    )
    p99, p95 = profiles[1], profiles[2]
    measured = [r for r in p99.rows if r.row.measured]
    assert all(r.judged_from == "aggregates" for r in measured)
    assert any(r.row.slo_passed for r in measured)
    assert not any(r.row.slo_passed for r in p95.rows)  # p95 is not in the rows: no value
    assert "no value" in p95.rows[0].row.slo_reasons[0]


def test_quality_gate_excludes_a_variant(inputs) -> None:
    gated = ReportSettings(max_perplexity_ratio=1.05)
    default = judge_profiles(inputs, FIXTURE_SLO, gated)[0]
    assert "gguf-q4_k_m" in default.gated and "bf16" not in default.gated
    assert default.best is not None and default.best.variant == "bf16"


def test_settings_validation() -> None:
    with pytest.raises(ValidationError, match="top-level"):
        ReportSettings(profiles={"default": "rps>=1"})
    with pytest.raises(ValidationError, match="unknown metric"):
        ReportSettings(profiles={"x": "latency<=1s"})
    with pytest.raises(ValidationError, match="extra"):
        ReportSettings.model_validate({"profile": {}})


def test_pareto_front() -> None:
    pts = [(1.0, 10.0), (2.0, 20.0), (3.0, 15.0), None, (2.0, 20.0), (0.5, 5.0)]
    # minimise x (latency), maximise y (throughput)
    assert front(pts, "min", "max") == [5, 0, 1, 4]
    assert front(pts, "max", "max") == [1, 4, 2]


# --- outputs ------------------------------------------------------------------------------------


def test_best_config_is_ready_to_deploy(files, inputs) -> None:
    config = files.best_config
    assert list(config) == ["default", *FIXTURE_PROFILES]
    best = config["default"]
    assert best["status"] == "ok"
    assert (best["variant"], best["engine"]) == ("gguf-q4_k_m", "llamacpp")
    row = next(
        r
        for r in inputs.pairs[best["pair"]].rows
        if r.load_point == best["measured_at"]["load_point"]
    )
    assert best["command"] == row.command and best["env"] == row.env
    assert best["command_line"].startswith("build/llama.cpp/cmake/bin/llama-server -m ")
    assert {v["metric"] for v in best["slo_verdicts"]} == {"ttft", "tpot", "error_rate"}
    assert all(v["passed"] for v in best["slo_verdicts"])
    assert best["quality"]["perplexity_ratio"] == pytest.approx(16.894 / 16.0)
    assert best["quality"]["reference_heldout_accuracy"] == 1.0
    assert best["memory"]["peak_rss_bytes"] == 310_000_000
    assert config["strict"]["status"] == "none" and config["strict"]["closest"]
    text = files.files[Path("best_config.json")]
    assert "NaN" not in text and json.loads(text) == config


def test_summary_markdown(files) -> None:
    text = files.files[Path("summary.md")]
    assert "Deploy gguf-q4\\_k\\_m" not in text  # underscores stay readable
    assert "Deploy gguf-q4_k_m on llamacpp" in text
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(table) == 1 + 3  # header + one line per pair
    assert all(line.count(" | ") == 11 for line in table)  # no cell text broke the table
    assert HOSTILE not in text and "\\<script\\>" in text


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_html_is_self_contained_and_escaped(files) -> None:
    page = files.files[Path("index.html")]
    parser = _Collector()
    parser.feed(page)
    for tag, attrs in parser.tags:
        for name in ("src", "href", "action", "data"):
            value = attrs.get(name) or ""
            assert not value or value.startswith("#"), (
                f"<{tag} {name}={value!r}> would load something"
            )
    scripts = [a for t, a in parser.tags if t == "script"]
    assert len(scripts) == 3 and all("src" not in a for a in scripts)
    assert "<link" not in page
    # text from a server log and from a model, escaped wherever it appears
    assert HOSTILE not in page and "&lt;script&gt;alert(" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<b>engine overloaded</b>" not in page
    marker = '<script type="application/json" id="qb-data">'
    start = page.index(marker) + len(marker)
    data = json.loads(page[start : page.index("</script>", start)])
    assert set(data["figures"]) == {"pareto_latency", "pareto_quality", "pareto_memory"}
    assert set(data["groups"]) == {"sweep", "dist", "estimate"}
    assert "concurrency:output_throughput" in data["groups"]["sweep"]
    assert "rate:output_throughput" in data["groups"]["sweep"]
    assert len(data["explorer"]["points"]) == 7
    assert "template" not in data["figures"]["pareto_latency"]["layout"]


def test_script_json_cannot_close_its_element() -> None:
    text = script_json({"a": "</script><!-- & \u2028", "b": float("nan")})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & \u2028", "b": None}


def test_metrics_and_plot_data(files) -> None:
    metrics = files.metrics
    assert metrics["recommended"]["default"]["pair"] == "gguf-q4_k_m-llamacpp"
    assert metrics["recommended"]["strict"] == {"pair": None, "found": False}
    assert metrics["counts"] == {
        "pairs": 3,
        "pairs_meeting_slo": 2,
        "points": 7,
        "points_meeting_slo": 4,
    }
    pair = metrics["pairs"]["gptq-w4g64-vllm"]
    assert pair["slo_passed"] is False and pair["output_throughput"] is None
    points = list(csv.DictReader(io.StringIO(files.files[Path("plots/points.csv")])))
    assert len(points) == 7 and float(points[0]["output_throughput"]) > 0
    pairs = list(csv.DictReader(io.StringIO(files.files[Path("plots/pairs.csv")])))
    assert [p["pair"] for p in pairs] == sorted(metrics["pairs"])


def test_stage_writes_every_file(tmp_path: Path, fixture_tree: Path) -> None:
    tree = tmp_path / "stage"
    shutil.copytree(fixture_tree, tree)
    (tree / "params.yaml").write_text(f'slo: "{FIXTURE_SLO}"\n', encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(REPO / "stages/report.py")],
        cwd=tree,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "deploy gguf-q4_k_m on llamacpp" in done.stdout
    for rel in ("index.html", "summary.md", "best_config.json", "report_metrics.json",
                "plots/points.csv", "plots/pairs.csv"):  # fmt: skip
        assert (tree / "reports" / rel).is_file(), rel
    assert not list((tree / "reports").glob(".*.tmp-*"))
