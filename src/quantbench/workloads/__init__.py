"""Traffic like production: named workloads, user conversation files and traces, as conversations.

Every workload becomes a list of :class:`quantbench.workloads.plan.Conversation` (one or more turns,
each with its output length and think time; open-loop traces also with arrival times), written
by the `workloads` stage to ``reports/workloads/<name>.jsonl`` with a summary of its lengths and of
the share of prompt tokens a prefix cache could serve. The bench stages send exactly those.

* :mod:`.builtin`: the named workloads (chat, rag, long-generation, multi-turn, bursty), each with
  where its shape comes from;
* :mod:`.generate`: the seeded generators behind them;
* :mod:`.files`: user conversation files (OpenAI messages) and arrival traces;
* :mod:`.stats`: length statistics and prefix reuse, computed from the prompts.
"""
