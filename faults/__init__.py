"""Fault injection: scenarios that break servers, runs and inputs on purpose, and check that a
fault costs one data point, not the run (see docs/FAULTS.md; `python -m faults`)."""
