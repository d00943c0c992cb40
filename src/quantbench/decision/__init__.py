"""The deployment decision, in one package: each bench row folded from its repeats and checked
(``rows``), judged under every SLO profile (``rejudge``, ``profiles``), compared by
tests on their differences with quality as a gate and a tie-break (``compare``, ``rules``,
``gate``), how often it would come out the same (``stability``), what it leaves open and what the
decide stage measures again (``settlement``, ``plan``, ``confirm``); docs/BENCH.md, "How the
decision is made". It reads the stage outputs through :mod:`quantbench.outputs`; the report
renders it."""
