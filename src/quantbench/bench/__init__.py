"""Benchmarks: every variant on every engine that serves it, swept over server and load settings,
judged against SLOs (spec, sweep/search, the rows of quantbench.decision.rows); the bench stage
(``stage``) and the decide stage's measuring again (``decide``)."""
