"""Benchmarks: every variant on every engine that serves it, swept over server and load settings,
judged against SLOs (spec, sweep/search, statistics over repeats, cost, best configuration)."""
