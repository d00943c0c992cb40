"""End to end: index.html built from the fixture tree, opened in a real headless Chromium.

Checks: no console error and no uncaught exception, not a single network request besides the
file itself (every other request is also aborted), every main chart drawn with visible marks, the
first screen holds each workload's status, recommendation, chart and compact table, the
explorer and the selects redraw, the print layout renders; keeps a screenshot and a PDF of the
page in build/test-artifacts/report/ (or $QB_TEST_ARTIFACTS), and the first screen of the
fixture before the decide stage ran (chat provisional) as ``report-first-screen.png``, the
picture docs/REPORT.md shows (docs/report-screenshot.png).

Chromium is Debian's ``chromium`` package, driven by Playwright over CDP (no browser download).
`make test` installs it; where it is missing and this process may use apt-get (root), the test
installs it; it skips only when it cannot be installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from quantbench.outputs import load_inputs
from quantbench.report.build import build_report
from quantbench.report.spec import ReportSettings

from .conftest import FIXTURE_PROFILES, FIXTURE_SLO, FIXTURE_WORKLOADS, build_fixture_tree

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
]
MAIN_CHARTS = (
    "chart-pareto-latency",
    "chart-pareto-quality",
    "chart-pareto-memory",
    "chart-explorer",
    "chart-sweep",
    "chart-dist",
    "chart-estimate",
)
FIRST_SCREEN_CHARTS = ("chart-overview-details-chat", "chart-overview-details-multi-turn")

FIRST_SCREEN = """() => {
  const h = window.innerHeight;
  return [...document.querySelectorAll('#overview .ov')].map((card) => {
    const box = (sel) => { const el = card.querySelector(sel); return el ? el.getBoundingClientRect() : null; };
    const parts = {status: box('.status'), headline: box('.ov-headline'), chart: box('.ov-chart'),
                   table: box('table.compact')};
    return {
      status: card.querySelector('.status').textContent.trim(),
      headline: card.querySelector('.ov-headline').textContent.trim(),
      points: card.querySelectorAll('.ov-chart .scatterlayer path.point').length,
      rows: card.querySelectorAll('table.compact tbody tr').length,
      verdicts: [...card.querySelectorAll('table.compact .verdict')].map((v) => v.textContent),
      visible: Object.fromEntries(Object.entries(parts).map(([k, r]) => [k, !!r && r.top >= 0 && r.bottom <= h && r.width > 0])),
    };
  });
}"""


def _find_chromium() -> str | None:
    for candidate in (os.environ.get("QB_CHROMIUM"), "chromium", "chromium-browser"):
        if candidate and (path := shutil.which(candidate)):
            return path
    return None


def chromium() -> str:
    """The Chromium binary, installed from Debian's archive if missing and possible."""
    found = _find_chromium()
    if found:
        return found
    if os.name != "posix" or os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and apt-get cannot be used here (not root)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update"],
        ["apt-get", "install", "-y", "--no-install-recommends", "chromium"],
    ):
        done = subprocess.run(
            cmd, capture_output=True, text=True, env=env, timeout=900, check=False
        )
        if done.returncode != 0:
            pytest.skip(f"chromium could not be installed: {' '.join(cmd)}: {done.stderr[-500:]}")
    found = _find_chromium()
    if not found:
        pytest.skip("apt-get installed chromium but no chromium binary is on PATH")
    return found


def artifacts_dir() -> Path:
    path = Path(os.environ.get("QB_TEST_ARTIFACTS") or REPO / "build" / "test-artifacts" / "report")
    path.mkdir(parents=True, exist_ok=True)
    return path


DRAWN_MARKS = """(id) => {
  const el = document.getElementById(id);
  if (!el) return {missing: true};
  return {
    drawn: el.dataset.drawn === '1',
    svg: el.querySelectorAll('svg.main-svg').length,
    traces: (el._fullData || []).length,
    points: el.querySelectorAll('.scatterlayer path.point').length,
    lines: el.querySelectorAll('.scatterlayer path.js-line').length,
    boxes: el.querySelectorAll('.boxlayer path.box').length,
    width: el.getBoundingClientRect().width,
    xtitle: (el.querySelector('.g-xtitle text') || {}).textContent || '',
  };
}"""


def test_report_in_headless_chromium(fixture_tree: Path, tmp_path: Path) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: `make test` installs requirements-dev.txt")
    binary = chromium()
    out = tmp_path / "reports"
    settings = ReportSettings(profiles=FIXTURE_PROFILES)
    build_report(
        load_inputs(fixture_tree), slo=FIXTURE_SLO, settings=settings, workloads=FIXTURE_WORKLOADS
    ).write(out)
    page_url = (out / "index.html").resolve().as_uri()
    artifacts = artifacts_dir()

    started = time.monotonic()
    console_errors: list[str] = []
    page_errors: list[str] = []
    requests: list[str] = []
    blocked: list[str] = []
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "profile"),  # a fresh user-data-dir
            executable_path=binary,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
            offline=True,
        )
        try:

            def route(r):
                if r.request.url == page_url:
                    r.continue_()
                else:
                    blocked.append(r.request.url)
                    r.abort()

            context.route("**/*", route)
            page = context.new_page()
            page.on("console", lambda m: m.type == "error" and console_errors.append(m.text))
            page.on("pageerror", lambda e: page_errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.on("websocket", lambda ws: requests.append(ws.url))
            page.goto(page_url, wait_until="load")
            page.wait_for_function(
                "window.qbReport && window.qbReport.expected > 0 && "
                "window.qbReport.drawn >= window.qbReport.expected",
                timeout=60_000,
            )
            state = page.evaluate("window.qbReport")
            assert state["failures"] == [], state
            assert state["expected"] == len(MAIN_CHARTS) + len(FIRST_SCREEN_CHARTS)

            for chart in (*MAIN_CHARTS, *FIRST_SCREEN_CHARTS):
                marks = page.evaluate(DRAWN_MARKS, chart)
                assert not marks.get("missing"), f"{chart} is not in the page"
                assert marks["drawn"] and marks["svg"] >= 1 and marks["traces"] >= 1, (chart, marks)
                assert marks["points"] + marks["lines"] + marks["boxes"] > 0, (chart, marks)
                assert marks["width"] > 300, (chart, marks)
            # the first screen, without scrolling: per workload its status, its recommendation,
            # its chart (drawn, a marker per pair measured) and its compact table
            cards = page.evaluate(FIRST_SCREEN)
            assert [c["status"] for c in cards] == ["decided", "decided"], cards
            assert cards[0]["headline"].startswith("★ Deploy bf16 on transformers"), cards
            assert cards[1]["headline"].startswith("★ Deploy gguf-q4_k_m on llamacpp"), cards
            for card in cards:
                assert all(card["visible"].values()), card
                assert card["rows"] == 3 and card["verdicts"][0] == "winner", card
                assert card["points"] >= 2, card
            # the recommendation per workload is on top, the star on the Pareto chart
            recommendation = page.inner_text("#recommendation")
            assert "Deploy bf16 on transformers" in recommendation  # chat
            assert "Deploy gguf-q4_k_m on llamacpp" in recommendation  # multi-turn
            assert "too few requests for p99" in recommendation
            assert page.locator("#chart-pareto-latency .scatterlayer path.point").count() >= 10

            page.screenshot(path=str(artifacts / "report-fixture.png"))
            page.locator("#pareto").screenshot(path=str(artifacts / "report-fixture-pareto.png"))
            page.screenshot(path=str(artifacts / "report-fixture-full.png"), full_page=True)

            # interaction: the explorer follows its axes, the selects swap figures
            page.select_option("#explorer-x", "ttft_p99_ms")
            page.wait_for_function(
                "document.querySelector('#chart-explorer .g-xtitle text').textContent.includes('TTFT p99')"
            )
            page.select_option("select[data-group=dist]", "e2e")
            page.wait_for_function(
                "document.querySelector('#chart-dist .gtitle').textContent.includes('End-to-end')"
            )
            page.select_option("select[data-group=sweep]", "concurrency:ttft_p99_ms")
            page.wait_for_function(
                "document.querySelector('#chart-sweep .gtitle').textContent.includes('TTFT p99')"
            )
            page.click("#summary table th:nth-child(8)")  # sort by good output throughput
            assert page.locator("#summary th[data-order]").count() == 1
            # the workload select redraws every chart with that workload's rows
            page.select_option("#qb-workload", "multi-turn")
            page.wait_for_function(
                "document.querySelector('#chart-pareto-latency .gtitle').textContent"
                ".startsWith('multi-turn')"
            )
            page.wait_for_function("document.querySelector('#chart-explorer').data.length >= 1")
            assert page.locator("#chart-pareto-latency .scatterlayer path.point").count() >= 4
            assert page.evaluate("window.qbReport.failures") == []
            # readable when printed: the print layout renders, collapsed sections open
            page.emulate_media(media="print")
            page.evaluate("window.dispatchEvent(new Event('beforeprint'))")
            assert page.evaluate("[...document.querySelectorAll('details')].every(d => d.open)")
            page.pdf(path=str(artifacts / "report-fixture.pdf"), format="A4", landscape=True)
        finally:
            context.close()
        first_screen(pw, binary, tmp_path, artifacts)
    elapsed = time.monotonic() - started

    assert console_errors == [], console_errors
    assert page_errors == [], page_errors
    assert requests == [page_url], f"network requests besides the file: {requests}"
    assert blocked == []
    assert (artifacts / "report-fixture.png").stat().st_size > 10_000
    assert 10_000 < (artifacts / "report-first-screen.png").stat().st_size < 300_000
    print(f"browser check took {elapsed:.1f} s; screenshots in {artifacts}")


def first_screen(pw: Any, binary: str, tmp_path: Path, artifacts: Path) -> None:
    """The fixture before the decide stage ran: chat's decision is provisional, and its first
    screen says so, with what would settle it, beside multi-turn's decided one (1400 x 1000,
    the picture in docs/REPORT.md)."""
    tree = build_fixture_tree(tmp_path / "unconfirmed", confirm=False)
    out = tmp_path / "unconfirmed-reports"
    settings = ReportSettings(profiles=FIXTURE_PROFILES, quality={})
    build_report(
        load_inputs(tree), slo=FIXTURE_SLO, settings=settings, workloads=FIXTURE_WORKLOADS
    ).write(out)
    context = pw.chromium.launch_persistent_context(
        str(tmp_path / "profile-first-screen"), executable_path=binary, headless=True,
        args=CHROMIUM_ARGS, viewport={"width": 1400, "height": 1000}, offline=True,
    )  # fmt: skip
    try:
        page = context.new_page()
        page.goto((out / "index.html").resolve().as_uri(), wait_until="load")
        page.wait_for_function(
            "window.qbReport && window.qbReport.drawn >= window.qbReport.expected",
            timeout=60_000,
        )
        cards = page.evaluate(FIRST_SCREEN)
        assert [c["status"] for c in cards] == ["provisional", "decided"], cards
        assert "The variant and engine are unsettled" in cards[0]["headline"], cards
        assert "unsettled" in cards[0]["verdicts"], cards
        settle = page.locator("#overview .ov-open").first.bounding_box()
        assert settle is not None and settle["y"] + settle["height"] <= 1000
        for card in cards:
            assert all(card["visible"].values()), card
        page.screenshot(path=str(artifacts / "report-first-screen.png"))
    finally:
        context.close()
