"""The first screen of index.html and summary.md: per workload the recommendation with its
status, one chart (the ranked figure against quality, marker area memory, what may not be
recommended greyed) and a compact table of the pairs with a one-word verdict; the statistics,
the comparisons, the reasons and the boxes about inputs and unserved pairs below, linked."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from quantbench.outputs import load_inputs
from quantbench.report.build import build_report
from quantbench.report.charts import BEST_COLOR, GREYED
from quantbench.report.markdown import slug
from quantbench.report.overview import VERDICTS, OverviewRow, text_chart
from quantbench.report.spec import ReportSettings

from .conftest import FIXTURE_PROFILES, FIXTURE_SLO, FIXTURE_WORKLOADS, build_fixture_tree

SETTINGS = ReportSettings(profiles=FIXTURE_PROFILES, quality={})
COLUMNS = (
    "|  | configuration | setting @ load | KL (nats) | peak memory | good tok/s | TTFT p90 (ms) "
    "| TPOT p50 (ms) | verdict |"
)


@pytest.fixture(scope="module")
def unconfirmed(tmp_path_factory: pytest.TempPathFactory):
    """Before the decide stage: chat provisional (bf16 not yet separable from llama.cpp);
    one pair not served on this machine, so there is a box to put below."""
    tree = build_fixture_tree(tmp_path_factory.mktemp("unconfirmed"), confirm=False)
    inputs = load_inputs(tree)
    inputs.not_served = {"gptq-w4g64-transformers": "served by gptq-w4g64-vllm instead"}
    settings = SETTINGS.model_copy(update={"quality_axis": "kl_mean"})
    return build_report(inputs, slo=FIXTURE_SLO, settings=settings, workloads=FIXTURE_WORKLOADS)


@pytest.fixture(scope="module")
def confirmed(fixture_tree: Path):
    inputs = load_inputs(fixture_tree)
    settings = SETTINGS.model_copy(update={"quality_axis": "kl_mean"})
    return build_report(inputs, slo=FIXTURE_SLO, settings=settings, workloads=FIXTURE_WORKLOADS)


def _first_screen(text: str) -> str:
    return text.split("\n---\n")[0]


def _table(section: str) -> list[list[str]]:
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in rows[1:]]


def test_summary_md_opens_with_each_workloads_status_chart_and_table(unconfirmed) -> None:
    text = unconfirmed.files[Path("summary.md")]
    first = _first_screen(text)
    # a person reads it in a minute: the two workloads in well under a page of a terminal
    assert len(first.splitlines()) <= 70, len(first.splitlines())
    assert "## Workload" not in first and "Against the leader" not in first
    assert "Stability" not in first and "## Pairs not served" not in first
    assert "Notes at the end: 1 pair not served on this machine." in first
    chat = first[first.index("### `chat`") : first.index("### `multi-turn`")]
    multi = first[first.index("### `multi-turn`") :]
    assert chat.startswith("### `chat`: provisional") and multi.startswith(
        "### `multi-turn`: decided"
    )
    assert "**Provisional: deploy gguf-q4_k_m on llamacpp" in chat
    assert "**Deploy gguf-q4_k_m on llamacpp (default settings" in multi
    assert "Decided by: the highest good output throughput, separable" in multi
    for section, workload in ((chat, "chat"), (multi, "multi-turn")):
        slo = FIXTURE_WORKLOADS[workload]
        fragment = slug(f"Workload {workload}: {slo}")
        assert f"(#{fragment})" in section  # GitHub's fragment of the details' heading
        assert f"\n## Workload `{workload}`: `{slo}`\n" in text.split("\n---\n", 1)[1]
        assert "```text\nGood output throughput (tok/s)\n" in section
        assert COLUMNS in section
        rows = _table(section)
        assert [r[0] for r in rows] == ["A", "B", "C"]
        assert all(r[-1] in VERDICTS for r in rows)
    chat_rows = {r[1].strip("*"): r for r in _table(chat)}
    assert chat_rows["gguf-q4_k_m on llamacpp"][-1] == "winner"
    assert chat_rows["bf16 on transformers"][-1] == "unsettled"
    assert chat_rows["gptq-w4g64 on vllm"][-1] == "failed"
    assert chat_rows["bf16 on transformers"][5] == "97.2 \\[65.5, 129\\]"
    multi_rows = {r[1].strip("*"): r for r in _table(multi)}
    assert multi_rows["bf16 on transformers"][-1] == "missed"
    # in the chart, the table's letters: the greyed row in lower case
    chart = multi[multi.index("```text") : multi.index("```\n\n|")]
    assert re.search(r"┤A$", chart, re.M) is None and "A" in chart and "b" in chart
    assert "Verdicts: *winner*: the recommendation; *unsettled*: not yet separable" in first


def _page_data(page: str) -> dict:
    start = page.index('<script type="application/json" id="qb-data">') + len(
        '<script type="application/json" id="qb-data">'
    )
    return json.loads(page[start : page.index("</script>", start)])


def test_index_html_opens_with_each_workloads_status_chart_and_table(unconfirmed) -> None:
    page = unconfirmed.files[Path("index.html")]
    overview = page.index('<section id="overview">')
    # the first screen comes before the red boxes, the cards of figures and every table
    for later in ('id="not-served"', '<section id="recommendation">', '<section id="ranking">'):
        assert overview < page.index(later), later
    assert page.index('href="#not-served"') < overview  # named at the top, shown below
    first = page[overview : page.index('id="not-served"')]
    cards = first.split('<div class="ov ')[1:]
    assert [c.split('"')[0] for c in cards] == ["provisional", "decided"]
    chat, multi = cards
    assert '<span class="status provisional">provisional</span> Workload <b>chat</b>' in chat
    assert "Provisional: deploy gguf-q4_k_m on llamacpp" in chat
    assert "What would settle it" in chat and "<code>report.confirm.enabled: true</code>" in chat
    assert '<span class="status decided">decided</span> Workload <b>multi-turn</b>' in multi
    assert 'href="#details-chat"' in chat and 'id="details-chat"' in page
    for card, workload in ((chat, "chat"), (multi, "multi-turn")):
        assert f'data-overview="{workload}"' in card and 'class="qb-chart ov-chart"' in card
        assert card.count("<tr") == 1 + 3  # the header, each pair
        assert "<th>KL (nats)</th><th>peak memory</th><th>good tok/s</th>" in card
    assert '<span class="verdict v-unsettled" title="not yet separable' in chat
    assert '<span class="verdict v-missed"' in multi
    # the statistics, comparisons and reasons are still all there, below
    recs = page[page.index('<section id="recommendation">') : page.index('<section id="ranking">')]
    assert "Against the leader" in recs and "Stability" in recs


def test_the_first_screens_chart_greys_what_may_not_be_recommended(unconfirmed) -> None:
    data = _page_data(unconfirmed.files[Path("index.html")])
    fig = data["views"]["multi-turn"]["overview"]
    grey, ranked = fig["data"]
    assert grey["marker"]["color"] == [GREYED] and grey["text"] == ["B"]  # bf16 misses its SLO
    assert ranked["text"] == ["A ★"] and ranked["marker"]["color"] != [GREYED]
    assert ranked["marker"]["line"]["color"] == [BEST_COLOR]  # the winner ringed
    assert fig["layout"]["xaxis"]["title"]["text"].startswith("KL divergence, mean (nats)")
    # the marker's area follows the server's memory: bf16 (1,354 MiB) above llama.cpp (296 MiB)
    assert grey["marker"]["size"][0] > ranked["marker"]["size"][0]
    # each point's interval as its bar
    assert ranked["error_y"]["array"][0] > 0 and ranked["error_y"]["arrayminus"][0] > 0
    chat = data["views"]["chat"]["overview"]
    assert [t["text"] for t in chat["data"]] == [["A ★", "B"]]  # both ranked, none grey


def test_a_tie_lost_reads_tied_and_a_gated_variant_gated(confirmed, fixture_tree) -> None:
    table = _table(_first_screen(confirmed.files[Path("summary.md")]).split("### `multi")[0])
    verdicts = {r[1].strip("*"): r[-1] for r in table}
    assert verdicts == {
        "bf16 on transformers": "winner",
        "gguf-q4_k_m on llamacpp": "tied",  # the leader, equivalent: quality chose bf16
        "gptq-w4g64 on vllm": "failed",
    }
    gate = SETTINGS.model_copy(update={"quality": {"kl_mean": 0.05}})  # llama.cpp's 0.061 is out
    out = build_report(load_inputs(fixture_tree), slo=FIXTURE_SLO, settings=gate,
                       workloads=FIXTURE_WORKLOADS)  # fmt: skip
    table = _table(_first_screen(out.files[Path("summary.md")]).split("### `multi")[1])
    assert {r[1].strip("*"): r[-1] for r in table}["gguf-q4_k_m on llamacpp"] == "gated"


def test_the_ranking_calls_a_contender_not_yet_separable_not_a_tie(unconfirmed, confirmed) -> None:
    """The cross-workload table labelled rows that are only "not separable" "(tie)"."""
    ranking = unconfirmed.files[Path("summary.md")].split("## Ranking across workloads")[1]
    bf16 = next(line for line in ranking.splitlines() if line.startswith("| bf16-transformers"))
    assert "2 (not yet separable): 97.2" in bf16 and "(tie)" not in bf16
    ranking = confirmed.files[Path("summary.md")].split("## Ranking across workloads")[1]
    gguf = next(line for line in ranking.splitlines() if line.startswith("| gguf-q4_k_m"))
    assert "2 (tie): 106" in gguf
    page = unconfirmed.files[Path("index.html")]
    html = page[page.index('<section id="ranking">') : page.index('<section id="summary">')]
    assert '<span class="badge undecided">not yet separable</span>' in html


def _row(mark: str, quality: float | None, value: float, verdict: str) -> OverviewRow:
    """A row of the first screen as the text chart reads it (its figure, quality, verdict)."""
    row = SimpleNamespace(measured=True, metric=lambda name: value)
    return OverviewRow("p", "v", "e", SimpleNamespace(row=row), verdict, quality, None, mark)  # type: ignore[arg-type]


def test_the_text_chart_puts_each_letter_where_its_row_lies() -> None:
    rows = [_row("A", 0.0, 100.0, "winner"), _row("B", 0.06, 50.0, "missed")]
    chart = text_chart(rows, "good_output_throughput", "kl_mean", width=20, height=5)
    assert chart[0] == "Good output throughput (tok/s)"
    grid = chart[1:6]
    assert grid[0].split("┤")[1].startswith("A") or grid[0].split("┤")[1].lstrip() == "A"
    assert grid[-1].rstrip().endswith("b")  # greyed: lower case, bottom right
    assert chart[-1].strip() == "KL (nats), lower is better"
    assert text_chart([_row("A", None, 1.0, "winner")], "good_output_throughput", "kl_mean") == []
