"""The prompt as served: the chat template's and the unique marker's tokens, counted for real."""

from __future__ import annotations

from quantbench.estimate.served import template_tokens
from quantbench.load.tokens import load_counter
from quantbench.workloads.marker import PLACEHOLDER, Room
from quantbench.workloads.plan import Conversation, Turn
from quantbench.workloads.prompts import PromptItem


def _conv(turns: int, system: str | None = None) -> Conversation:
    return Conversation(
        prompt_id="p",
        scenario="s",
        turns=[Turn(content="tell me about the sea", max_tokens=8) for _ in range(turns)],
        system=system,
    )


def test_template_tokens_are_what_the_chat_template_adds(tiny_model_dir) -> None:
    counter = load_counter(tiny_model_dir)
    text = "tell me about the sea"
    item = PromptItem(id="a", max_tokens=8, messages=[{"role": "user", "content": text}])
    served = counter.count_prompt(item, "chat")
    assert served > counter.count_text(text) + 10  # SmolLM2's default system prompt, markers
    untagged = template_tokens(tiny_model_dir, [_conv(1)], tagged=False)
    assert untagged == served - counter.count_text(text)
    # a conversation made without room for the marker gets it on top, as the harness sends it
    tag = counter.count_text(f"{PLACEHOLDER} x") - counter.count_text("x")
    assert tag == 4  # four digits, a token each in SmolLM2's vocabulary
    assert template_tokens(tiny_model_dir, [_conv(1)]) == untagged + tag
    # a completions prompt has no template: the marker only
    assert template_tokens(tiny_model_dir, [_conv(1)], api="completions") == tag


def test_a_marker_within_the_message_adds_nothing(tiny_model_dir) -> None:
    # the traffic holds the marker's room within each first message's length (workloads.marker):
    # counted once, with the text, never again on top
    counter = load_counter(tiny_model_dir)
    room = Room(counter.count_text, counter.cut)
    roomy = room.conversation(_conv(2, system="be brief"))
    assert roomy.turns[0].content.startswith(PLACEHOLDER)
    untagged = template_tokens(tiny_model_dir, [roomy], tagged=False)
    assert template_tokens(tiny_model_dir, [roomy]) == untagged
    assert template_tokens(tiny_model_dir, [roomy], api="completions") == 0


def test_later_turns_resend_more_markers(tiny_model_dir) -> None:
    one = template_tokens(tiny_model_dir, [_conv(1, system="be brief")], tagged=False)
    three = template_tokens(tiny_model_dir, [_conv(3, system="be brief")], tagged=False)
    assert three > one  # turns 2 and 3 carry the earlier turns' role markers too


def test_a_later_turn_shares_all_but_its_new_message(tiny_model_dir) -> None:
    from quantbench.estimate.served import prompt_profile

    conv = Conversation(
        prompt_id="p", scenario="s", system="be brief",
        turns=[Turn(content="tell me about the sea", max_tokens=8),
               Turn(content="and the sky", max_tokens=8)],
    )  # fmt: skip
    first, later = prompt_profile(tiny_model_dir, [conv])
    counter = load_counter(tiny_model_dir)
    assert first[1] == 0  # a system prompt no earlier conversation sent
    # the later turn resends the first and its answer: all of it is shared, and only its own
    # message (with the few tokens that wrap it) is new
    new = later[0] - later[1]
    assert counter.count_text("and the sky") < new < counter.count_text("and the sky") + 12
    assert later[0] > first[0] + 8  # the answer's tokens (max_tokens) are in the history
    assert first[2] == later[2] == 0  # no other conversation sends that system prompt
    # a second conversation with the same system prompt shares it on its first turn, and
    # every later turn shares it with the other conversations too
    again = Conversation(prompt_id="q", scenario="s", system="be brief",
                         turns=[Turn(content="hello", max_tokens=8)])  # fmt: skip
    _, later, first_again = prompt_profile(tiny_model_dir, [conv, again])
    assert first_again[1] >= counter.count_text("be brief")
    assert first_again[2] == later[2] >= counter.count_text("be brief")
    assert later[2] < later[1]  # the history is the conversation's own
