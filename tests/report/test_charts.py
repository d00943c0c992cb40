"""Free text that reaches a chart title or hover is escaped (plotly renders its own HTML tags
there), whatever validation let through: the currency label is one (bench.currency, a
settings.Label, refuses markup before any work)."""

from __future__ import annotations

from quantbench.report import charts


def test_a_label_in_a_chart_title_is_escaped() -> None:
    label = '<img src=x onerror="alert(1)">'
    layout = charts._layout(f"cost ({label})", charts.axis_title("cost_per_million_tokens", label),
                            "y")  # fmt: skip
    texts = [layout["title"]["text"], layout["xaxis"]["title"]["text"]]
    assert all("<img" not in t and "&lt;img" in t for t in texts), texts
