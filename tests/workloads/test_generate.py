"""Named workloads: deterministic for a seed, shaped as documented, fitted to the context."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from quantbench.workloads import stats
from quantbench.workloads.builtin import NAMED
from quantbench.workloads.generate import Corpus, LengthDist, conversations
from quantbench.workloads.spec import WorkloadSpec
from quantbench.workloads.traffic import materialize

REPO = Path(__file__).resolve().parents[2]
CORPUS = [REPO / "data/eval.txt", REPO / "data/calibration.txt"]


def spec(use: str, **extra) -> WorkloadSpec:
    return WorkloadSpec(name=use, use=use, num_requests=8, **extra)


@pytest.mark.parametrize("name", sorted(NAMED))
def test_each_named_workload_is_deterministic_for_a_seed(name: str) -> None:
    a = materialize(spec(name, seed=7, conversations=20), CORPUS)
    b = materialize(spec(name, seed=7, conversations=20), CORPUS)
    c = materialize(spec(name, seed=8, conversations=20), CORPUS)
    assert a.conversations == b.conversations and a.summary == b.summary
    assert a.conversations != c.conversations


def test_lengths_follow_the_documented_means() -> None:
    """Chat: the ShareGPT means (161 in, 338 out) within tolerance over many draws (the
    instruction adds a few words; log-normal spreads make the sample mean noisy: 10 %)."""
    traffic = materialize(spec("chat", conversations=2000), CORPUS)
    s = traffic.summary
    assert s.output_tokens.mean == pytest.approx(338, rel=0.10)
    assert s.input_tokens.mean == pytest.approx(161 + 4, rel=0.10)
    assert s.output_tokens.p50 < s.output_tokens.mean  # right-skewed


def test_length_scale_keeps_the_shape() -> None:
    full = materialize(spec("chat", conversations=1000), CORPUS).summary
    small = materialize(spec("chat", conversations=1000, length_scale=0.1), CORPUS).summary
    ratio_full = full.output_tokens.mean / full.input_tokens.mean
    ratio_small = small.output_tokens.mean / (small.input_tokens.mean - 4)
    assert ratio_small == pytest.approx(
        ratio_full * (full.input_tokens.mean) / (full.input_tokens.mean - 4), rel=0.2
    )
    assert small.output_tokens.mean == pytest.approx(33.8, rel=0.15)


def test_rag_prompts_are_long_and_answers_short() -> None:
    s = materialize(spec("rag", conversations=300), CORPUS).summary
    assert s.input_tokens.mean > 1300 and s.output_tokens.mean < 80


def test_multi_turn_histories_grow_and_share_a_system_prompt() -> None:
    traffic = materialize(spec("multi-turn", conversations=200), CORPUS)
    systems = {c.system for c in traffic.conversations}
    assert len(systems) == 1  # every user shares one system prompt
    for conv in traffic.conversations:
        assert 2 <= len(conv.turns) <= 8
        lengths = stats.prompt_lengths(conv, stats.words)
        prompts = [p for p, _ in lengths]
        assert prompts == sorted(prompts) and len(set(prompts)) == len(prompts)  # history grows
        for k, (_prompt, reused) in enumerate(lengths):
            if k:
                # the whole previous turn and its answer are resent
                assert reused == lengths[k - 1][0] + conv.turns[k - 1].max_tokens
        assert conv.turns[0].think_s == 0 and all(t.think_s >= 0 for t in conv.turns[1:])
    s = traffic.summary
    assert s.turns.mean == pytest.approx(3, rel=0.25)
    assert s.think_s.mean == pytest.approx(5.0, rel=0.15)
    assert 0.5 < s.prefix_reuse_share < 1.0


def test_single_turn_traffic_shares_no_prefix() -> None:
    s = materialize(spec("chat", conversations=100), CORPUS).summary
    assert s.prefix_reuse_share == 0.0


def test_every_request_fits_the_context() -> None:
    full = materialize(spec("multi-turn", conversations=100), CORPUS)
    fitted = materialize(spec("multi-turn", conversations=100), CORPUS, context=1200)
    assert fitted.summary.longest_request <= 1200
    assert fitted.summary.turns_dropped_to_fit > 0
    assert sum(len(c.turns) for c in fitted.conversations) < sum(
        len(c.turns) for c in full.conversations
    )


def test_nothing_fits_is_a_clear_error() -> None:
    from quantbench.errors import UserError

    with pytest.raises(UserError, match="no request fits the context of 64 tokens"):
        materialize(spec("rag", conversations=10), CORPUS, context=64)


def test_lognormal_draws_have_the_asked_mean_and_clip() -> None:
    import random

    rng = random.Random(0)
    dist = LengthDist(mean=100, sigma=0.8, minimum=4, maximum=300)
    xs = np.array([dist.sample(rng) for _ in range(20000)])
    assert xs.min() >= 4 and xs.max() <= 300
    unclipped = LengthDist(mean=100, sigma=0.8, minimum=0)
    ys = np.array([unclipped.sample(rng) for _ in range(20000)])
    assert ys.mean() == pytest.approx(100, rel=0.03)


def test_corpus_text_is_cut_exactly_with_a_tokenizer() -> None:
    import random

    corpus = Corpus(CORPUS, cut=lambda text, n: " ".join(text.split()[:n]))
    assert len(corpus.text(37, random.Random(1)).split()) == 37
    convs = conversations(NAMED["chat"].shape, 3, 1, corpus, scenario="x")
    assert [c.prompt_id for c in convs] == ["x-00000", "x-00001", "x-00002"]


# Each named workload's documented output distribution (builtin.py, docs/LOAD.md): the mean and
# the log-normal spread, and the prompt mean (instruction or question words included).
DOCUMENTED = {
    # name: (output mean, output sigma, input mean)
    "chat": (338, 0.8, 161 + 4),
    "rag": (48, 0.5, 3 * 480 + 20),
    "long-generation": (1024, 0.3, 64 + 9),
    "multi-turn": (215, 0.8, None),  # prompts grow with the history: see the test above
}


@pytest.mark.parametrize("name", sorted(DOCUMENTED))
def test_each_workload_matches_its_documented_distribution(name: str) -> None:
    """Means within 10 % and spreads (sd of log length) within 15 % over 1,500 conversations;
    the clips (a minimum, a context maximum) trim the spread a little, never this much."""
    out_mean, out_sigma, in_mean = DOCUMENTED[name]
    traffic = materialize(spec(name, conversations=1500), CORPUS)
    outputs = np.array([t.max_tokens for c in traffic.conversations for t in c.turns])
    assert outputs.mean() == pytest.approx(out_mean, rel=0.10)
    assert np.log(outputs).std() == pytest.approx(out_sigma, rel=0.15)
    if in_mean is not None:
        assert traffic.summary.input_tokens.mean == pytest.approx(in_mean, rel=0.10)
