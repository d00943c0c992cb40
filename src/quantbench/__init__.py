"""quantbench: merge, quantize, serve, load-test and compare deployment options for a fine-tuned LLM."""

__version__ = "0.1.0"
