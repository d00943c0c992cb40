"""Quality of a variant against the merged model: perplexity, KL divergence, top-1 agreement,
held-out accuracy, size and peak memory, measured the same way for every format; each quality
figure with its interval (``intervals``), and two variants compared paired (``compare``).
"""

from quantbench.quality.evaluate import EvaluationError, evaluate_variant
from quantbench.quality.spec import EvaluateSettings

__all__ = ["EvaluateSettings", "EvaluationError", "evaluate_variant"]
