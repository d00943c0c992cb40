"""The deployment decision: configurations compared by tests on their differences, quality as a
gate and a tie-break, and how often the decision would come out the same (docs/BENCH.md, "How
the decision is made")."""
