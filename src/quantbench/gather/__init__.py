"""One report over experiments from several machines (``quantbench gather``).

Each machine runs its share of a sweep as DVC experiments and pushes them to a shared git remote
and DVC remote (docs/BENCH.md); ``quantbench gather`` pulls them all, reads each experiment's
results at its own commit (:mod:`.experiments`), groups them by the machine that measured them
(its fingerprint, ``reports/env.json``) and prices them at the experiment's own
``bench.price_per_hour`` (:mod:`.machines`), and writes one report where the machine is a
dimension (:mod:`.render`).
"""
