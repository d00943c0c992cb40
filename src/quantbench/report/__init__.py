"""The report stage: stage outputs -> index.html, summary.md, best_config.json, DVC metrics and plots."""
