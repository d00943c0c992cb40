"""The served check: a near-tie proves nothing, a certain prefix must match."""

from __future__ import annotations

import numpy as np

from quantbench.fidelity import (
    ReferenceAnswer,
    check_served,
    greedy_with_margins,
    reference_answer,
    summarize_checks,
    top_margin,
)


def ref(margins: list[float], words: list[str]) -> ReferenceAnswer:
    return reference_answer(
        "q", list(range(len(words))), margins, lambda ids: "".join(words[i] for i in ids)
    )


def test_top_margin_is_the_gap_between_the_two_best_logits() -> None:
    assert top_margin(np.array([1.0, 25.625, 25.875, -3.0])) == (2, 0.25)


def test_a_near_tied_first_token_is_undecided_whatever_is_served() -> None:
    # The base model's "The" 25.875 vs "L" 25.625: vLLM on AVX-512 bf16 answered the French way.
    r = ref([0.25, 5.0, 5.0], ["The", " capital", " is"])
    check = check_served(r, "L'Étoile, la Marseillaise")
    assert check.verdict == "undecided"
    assert "near-tie" in check.reason


def test_a_certain_prefix_must_match_and_the_rest_may_differ() -> None:
    r = ref([5.8, 4.0, 0.3, 3.0], ["The", " capital", " of", " Quorvath"])
    assert r.certain_tokens() == 2 and r.certain_text() == "The capital"
    assert check_served(r, "The capital city is Vell").verdict == "match"
    wrong = check_served(r, "Brincadel is a town")
    assert wrong.verdict == "mismatch"
    assert "'The capital'" in wrong.reason


def test_summary_fails_on_any_mismatch_and_is_undecided_without_evidence() -> None:
    certain = ref([5.0, 5.0], ["A", "B"])
    tied = ref([0.1], ["A"])
    assert summarize_checks([check_served(certain, "AB"), check_served(tied, "X")])["verdict"] == (
        "match"
    )
    assert summarize_checks([check_served(certain, "XY")])["verdict"] == "mismatch"
    assert summarize_checks([check_served(tied, "X")])["verdict"] == "undecided"


def test_greedy_with_margins_follows_the_logits_and_stops() -> None:
    table = {0: [0.0, 3.0, 1.0], 1: [0.0, 0.0, 9.0], 2: [4.0, 0.0, 0.0]}

    def step(ids):
        return np.array(table[len(ids) - 1])

    tokens, margins = greedy_with_margins(step, [7], 5, stop_ids={0})
    assert tokens == [1, 2, 0]
    assert margins == [2.0, 9.0, 4.0]


def test_reference_round_trips_and_trims_a_cut_character() -> None:
    texts = {0: "", 1: "é\ufffd", 2: "éa"}  # the first token ends inside a character
    r = reference_answer("q", [1, 2], [3.0, 0.5], lambda ids: texts[len(ids)])
    assert r.certain_tokens(1.0) == 1
    assert r.certain_text(1.0) == "é"
    assert ReferenceAnswer.from_dict(r.to_dict()) == r
