"""Results other tools read, and results from other tools.

A team compares quantbench's figures with those of the field's other harnesses, and feeds them to
comparison tools. The same word names different quantities across them (GuideLLM's "TPOT"
includes the first token; AIPerf's "inter-token latency" is what vLLM calls TPOT), so nothing
here maps a field by its name: each module says which quantity a field measures and maps it to
the one of ours that measures the same (:mod:`quantbench.exchange.figures`).

* :mod:`~quantbench.exchange.llmd`: each bench run as an llm-d benchmark report (version 0.2);
* :mod:`~quantbench.exchange.vllm_bench`, :mod:`~quantbench.exchange.aiperf`,
  :mod:`~quantbench.exchange.guidellm`: read those tools' result files into
  :class:`~quantbench.exchange.figures.ForeignRun` rows;
* :mod:`~quantbench.cli.exchange`: ``quantbench export`` and ``quantbench import``.

(``vllm bench serve``'s own JSON is written by :mod:`quantbench.load.export`.)
"""
