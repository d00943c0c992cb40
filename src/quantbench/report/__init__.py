"""The report stage: the decision (quantbench.decision) rendered into index.html, summary.md,
best_config.json, DVC metrics and plots."""
