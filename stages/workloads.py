"""DVC stage `workloads`: the traffic of every workload, written out before any server starts.

For each workload of params.yaml (named, a dataset, a conversations file or a trace) writes
reports/workloads/<name>.jsonl (the conversations the bench stages send, lengths cut with the
model's own tokenizer and fitted to the smallest context any benchmarked engine allows) and
reports/workloads/<name>.json (what it is made of: lengths, turns, think times, the share of
prompt tokens a prefix cache could serve, and where its shape comes from).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from quantbench.config import load_config
from quantbench.engines.registry import smallest_context
from quantbench.errors import run_main
from quantbench.fsutil import atomic_dir
from quantbench.load.tokens import load_counter
from quantbench.model import model_context as read_model_context
from quantbench.progress import setup_logging
from quantbench.workloads.traffic import materialize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--model", type=Path, default=Path("models/base"))
    parser.add_argument("--out", type=Path, default=Path("reports/workloads"))
    args = parser.parse_args()
    setup_logging()
    config = load_config(args.params)
    workloads, data, bench = config.workloads, config.data, config.bench
    engines = {  # each pair's own settings: the smallest context over them bounds the prompts
        name: config.pair_settings(name) for name in bench.pairs
    }
    model_context = read_model_context(args.model)
    limits = [smallest_context(bench.pairs[n].engine, s) for n, s in engines.items()]
    limit = min((x for x in limits if x is not None), default=None)
    context = min(model_context, limit[0]) if limit else model_context
    counter = load_counter(args.model)
    with atomic_dir(args.out) as tmp:
        for name, spec in workloads.items():
            traffic = materialize(
                spec, data.corpus, count=counter.count_text, cut=counter.cut, context=context
            )
            assert traffic.summary is not None  # materialize always summarizes
            s = traffic.summary = traffic.summary.model_copy(
                update={
                    "context_from": limit[1]
                    if limit and limit[0] <= model_context
                    else "the model's context"
                }
            )
            traffic.write(tmp)
            ins, outs = s.input_tokens, s.output_tokens
            print(
                f"workloads: {name}: {s.conversations} conversations, {s.requests} requests, "
                f"input p50 {ins.p50 if ins else 0:.0f} tokens, output p50 "
                f"{outs.p50 if outs else 0:.0f}, prefix reuse {s.prefix_reuse_share:.0%}"
            )
            for note in traffic.notes:  # where a prompt misses its asked length, by how much
                print(f"workloads: {name}: prompt lengths: {note}")


if __name__ == "__main__":
    run_main(main)
